"""Fuzzing the manifest doors: every kind Allot accepts, mutated (allot_testing.manifest_fuzz), read as ``allot apply``
reads a file (YAML, the reader's bounds, the door, the events it would record) and as kube-sync and the webhook read
an object (the door over the decoded JSON).

Properties: nothing escapes but the project's refusal (``InputError`` from the reader); every refusal names a field
path; what is accepted becomes events the log stores and every service decodes back. Recording against a real
PostgreSQL (nothing of a refused batch is recorded) is in tests/integration/test_fuzz_apply_records.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given

from allot_contracts.envelope import canonical
from allot_contracts.events import AnyEvent
from allot_contracts.issues import FieldIssue
from allot_contracts.objects.admission import KINDS
from allot_intake.documents import Document, parse_documents
from allot_intake.errors import InputError
from allot_intake.manifests import CLI_KINDS, Door, Verdict, to_input
from allot_intake.workloads import WORKLOAD_KINDS
from allot_kube_sync.sync import _DOOR as KUBE_SYNC_DOOR
from allot_testing import fuzz
from allot_testing.manifest_fuzz import KindKey, as_yaml, manifests, seeds
from allot_webhook.server import verdict as webhook_verdict

ROOT = Path(__file__).resolve().parents[2]
_DECODE = msgspec.json.Decoder(AnyEvent)


def test_every_kind_allot_accepts_has_seeds_to_mutate() -> None:
    accepted = {(k.api_version, k.kind) for k in KINDS} | set(WORKLOAD_KINDS) | set(CLI_KINDS)
    assert accepted - set(seeds(ROOT)) == set()


def _names_a_path(issue: FieldIssue) -> bool:
    return bool(issue.path.strip()) and bool(issue.message.strip())


def _recordable(verdict: Verdict) -> int:
    """The events of an accepted document, stored as the log stores them and decoded as every service does."""
    events = to_input(verdict.document).events
    for _, event in events:
        assert _DECODE.decode(canonical(event)) is not None
    return len(events)


def _apply_door(kind: KindKey, body: dict[str, Any], tally: fuzz.Tally) -> None:
    try:
        text = as_yaml(body)
    except RecursionError:
        tally.count("too deep to write as YAML")
        return
    try:
        docs = parse_documents(text, "fuzz.yaml")
    except InputError as exc:
        assert "fuzz.yaml" in str(exc)
        tally.count("refused by the reader")
        return
    for verdict in Door(quotas=set()).check_all(docs):
        assert all(_names_a_path(i) for i in verdict.issues), verdict.issues
        if verdict.issues:
            tally.count("refused")
        else:
            _recordable(verdict)
            tally.count("accepted")


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_allot_apply_refuses_a_broken_manifest_with_a_path_and_records_what_it_accepts(examples: int) -> None:
    tally = fuzz.Tally("manifests (allot apply)")

    @fuzz.settings_for(examples)
    @given(manifests(ROOT))
    def check(case: tuple[KindKey, dict[str, Any], list[str]]) -> None:
        kind, body, _ = case
        _apply_door(kind, body, tally)

    check()


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_kube_sync_and_the_webhook_refuse_a_broken_object_with_a_path(examples: int) -> None:
    tally = fuzz.Tally("manifests (kube-sync, webhook)")

    @fuzz.settings_for(examples)
    @given(manifests(ROOT))
    def check(case: tuple[KindKey, dict[str, Any], list[str]]) -> None:
        kind, body, _ = case
        if kind in CLI_KINDS or kind in WORKLOAD_KINDS:
            tally.count("skipped (not an object of a cluster)")
            return
        doc = Document(source="kubernetes", index=0, body=body)
        verdict = KUBE_SYNC_DOOR.check(doc)
        assert all(_names_a_path(i) for i in verdict.issues), verdict.issues
        if not verdict.issues:
            _recordable(verdict)
        issues, _ = webhook_verdict(body)
        assert all(_names_a_path(i) for i in issues), issues
        tally.count("refused" if issues else "accepted")

    check()


_DEPLOYMENT_TEMPLATE = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
# Cases the fuzzer found (each raised inside the door before it was fixed): (id, body, field path refused)
FOUND = [
    (
        "Delete with a map as the kind",
        {"apiVersion": "allot.dev/v1", "kind": "Delete", "spec": {"kind": {"": []}, "name": "p"}},
        "spec.kind",
    ),
    (
        "Delete with a list as the namespace",
        {
            "apiVersion": "allot.dev/v1",
            "kind": "Delete",
            "spec": {"kind": "Pod", "name": "p", "namespace": []},
        },
        "spec.namespace",
    ),
    (
        "workload template metadata a string",
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "rs"},
            "spec": {"template": {**_DEPLOYMENT_TEMPLATE, "metadata": "0"}},
        },
        "spec.template.metadata",
    ),
    (
        "workload template labels a boolean",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"template": {**_DEPLOYMENT_TEMPLATE, "metadata": {"labels": True}}},
        },
        "spec.template.metadata.labels",
    ),
    (
        "workload template with an integer key",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"template": {**_DEPLOYMENT_TEMPLATE, "metadata": {1: "x", "labels": {}}}},
        },
        "spec.template.metadata.1",
    ),
    (
        "quota profile labels a string",
        {
            "apiVersion": "quota.koordinator.sh/v1alpha1",
            "kind": "ElasticQuotaProfile",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"quotaName": "p-root", "quotaLabels": "xxx"},
        },
        "spec.quotaLabels",
    ),
    (
        "quota profile metadata labels a string",
        {
            "apiVersion": "quota.koordinator.sh/v1alpha1",
            "kind": "ElasticQuotaProfile",
            "metadata": {"name": "p", "namespace": "default", "labels": "0.5"},
            "spec": {"quotaName": "p-root"},
        },
        "metadata.labels",
    ),
    (
        "quota profile quota name a map",
        {
            "apiVersion": "quota.koordinator.sh/v1alpha1",
            "kind": "ElasticQuotaProfile",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"quotaName": {"a": "p-root"}},
        },
        "spec.quotaName",
    ),
    (
        "node selector operator a list",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchFields": [{"key": "metadata.name", "operator": [{"0": "In"}]}]}
                            ]
                        }
                    }
                },
                "containers": [{"name": "c"}],
            },
        },
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchFields[0].operator",
    ),
    (
        "colocation profile QoS class a map",
        {
            "apiVersion": "config.koordinator.sh/v1alpha1",
            "kind": "ClusterColocationProfile",
            "metadata": {"name": "c"},
            "spec": {"qosClass": {"a": "BE"}},
        },
        "spec.qosClass",
    ),
]


@pytest.mark.parametrize(("body", "path"), [c[1:] for c in FOUND], ids=[c[0] for c in FOUND])
def test_what_the_fuzzer_found_is_refused_with_its_path(body: dict[str, Any], path: str) -> None:
    verdict = Door(quotas=set()).check(Document(source="f.yaml", index=0, body=body))
    assert path in [i.path for i in verdict.issues], verdict.issues


def test_a_topology_whose_policies_are_not_a_list_is_refused_with_the_path() -> None:
    """Found by the slow run: the engine's reader raised (``KeyError: 0``) and the refusal named no path."""
    topology = next(b for b in seeds(ROOT)[("topology.node.k8s.io/v1alpha1", "NodeResourceTopology")])
    body = {**topology, "topologyPolicies": {"0": "None"}}
    verdict = Door(quotas=set()).check(Document(source="f.yaml", index=0, body=body))
    assert [i.path for i in verdict.issues] == ["topologyPolicies"], verdict.issues
