"""Admission shared by ``allot apply`` and ``allot sim run``: the engines' own validators, run up front.

The services run the same validators when an object reaches them (a pod can also arrive from a Kubernetes watch,
bypassing this CLI), so an invalid object is rejected the same way whichever door it came in by. Only checks that
need no cluster state run here (syntax, request combinations, annotation JSON); checks against state (a quota's
parent exists, a gang's settings agree with earlier members) happen in the services, which record a rejection.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from allot_contracts.events import FieldIssue
from allot_gang import GangEngine
from allot_placement import PlacementEngine


@lru_cache(maxsize=1)
def _placement() -> PlacementEngine:
    return PlacementEngine()


def pod_issues(manifest: dict[str, Any]) -> list[FieldIssue]:
    issues = [FieldIssue(path=e.path, message=e.message) for e in _placement().validate_pod(manifest)]
    issues += [FieldIssue(path=e.path, message=e.reason) for e in GangEngine().validate_pod(manifest)]
    if issues:
        return issues
    from allot_quota.errors import PodError
    from allot_quota.model import pod_info

    try:
        pod_info(manifest)
    except PodError as exc:
        issues += [FieldIssue(path=e.field, message=e.message) for e in exc.errors]
    return issues


def object_issues(kind: str, manifest: dict[str, Any]) -> list[FieldIssue]:
    if kind == "ElasticQuota":
        from allot_quota.validation import parse_quota

        _, quota_errors = parse_quota(manifest)
        return [FieldIssue(path=e.field, message=e.message) for e in quota_errors]
    if kind == "ElasticQuotaProfile":
        from allot_quota import QuotaEngine

        return [FieldIssue(path=e.field, message=e.message) for e in QuotaEngine().validate_profile(manifest)]
    if kind == "PodGroup":
        from allot_gang.validate import parse_pod_group

        result = parse_pod_group(manifest)
        if isinstance(result, list):
            return [FieldIssue(path=e.path, message=e.reason) for e in result]
        return []
    return []
