"""QoS class and priority class combinations at the doors of ``allot apply`` and the simulator: what Koordinator's
validating pod webhook refuses (pkg/webhook/pod/validating/cluster_colocation_profile.go) is refused with upstream's
reason and the field path; what it allows passes. The webhook and kube-sync doors are tested in tests/kube."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_cli.commands.apply import report
from allot_intake.documents import Document
from allot_intake.manifests import Door, to_input
from allot_sim.scenario import run
from allot_testing.builders import a_node
from allot_testing.scenario import Scenario

QOS = "koordinator.sh/qosClass"
QOS_PATH = 'metadata.labels["koordinator.sh/qosClass"]'
CPU_PATH = "spec.containers[*].resources.requests[cpu]"


def pod(
    name: str,
    *,
    qos: str | None = None,
    priority: int | None = None,
    priority_class_name: str | None = None,
    labels: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod shaped as upstream's test builds it: labels, ``spec.priority``, one container's resources."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "resources": {"requests": dict(requests or {}), "limits": dict(limits or {})}}
        ]
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class_name is not None:
        spec["priorityClassName"] = priority_class_name
    all_labels = {**({QOS: qos} if qos else {}), **(labels or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": all_labels},
        "spec": spec,
    }


BATCH = {"kubernetes.io/batch-cpu": "1", "kubernetes.io/batch-memory": "4Gi"}

# (id: upstream test name, pod, field path, part of the reason)
REFUSED = [
    (
        "forbidden QoS and priorityClass combination: BE And Prod",
        pod("p", qos="BE", priority=9999),
        QOS_PATH,
        "Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination",
    ),
    (
        "BE with no Koordinator priority",
        pod("p", qos="BE", priority=0),
        QOS_PATH,
        "Forbidden: koordinator.sh/qosClass=BE and priorityClass= cannot be used in combination",
    ),
    (
        "forbidden QoS and priorityClass combination: LSR And Batch",
        pod("p", qos="LSR", priority=5999, requests={"cpu": "1"}),
        QOS_PATH,
        "Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-batch cannot be used in combination",
    ),
    (
        "forbidden QoS and priorityClass combination: LSR And Mid",
        pod("p", qos="LSR", priority=7999, requests={"cpu": "1"}),
        QOS_PATH,
        "Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-mid cannot be used in combination",
    ),
    (
        "forbidden QoS and priorityClass combination: LSR And Free",
        pod("p", qos="LSR", priority=3999, requests={"cpu": "1"}),
        QOS_PATH,
        "Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-free cannot be used in combination",
    ),
    (
        "LSR with no Koordinator priority",
        pod("p", qos="LSR", requests={"cpu": "1"}),
        QOS_PATH,
        "Forbidden: koordinator.sh/qosClass=LSR and priorityClass= cannot be used in combination",
    ),
    (
        "the priority-class label wins over spec.priority",
        pod("p", qos="BE", priority=5000, labels={"koordinator.sh/priority-class": "koord-prod"}),
        QOS_PATH,
        "priorityClass=koord-prod cannot be used in combination (from the label",
    ),
    (
        "forbidden resources - LSR And Prod: unset CPUs",
        pod("p", qos="LSR", priority=9999, requests={"memory": "0Gi"}, limits={"memory": "4Gi"}),
        CPU_PATH,
        "Required value: LSR Pod must declare the requested CPUs",
    ),
    (
        "forbidden resources - LSR And Prod: non-integer CPUs",
        pod(
            "p",
            qos="LSR",
            priority=9999,
            requests={"cpu": "100m", "memory": "0Gi"},
            limits={"cpu": "100m", "memory": "4Gi"},
        ),
        CPU_PATH,
        'Invalid value: "100m": the requested CPUs of LSR Pod must be integer',
    ),
    (
        "LSE with a fractional CPU request",
        pod("p", qos="LSE", priority=9999, requests={"cpu": "1500m"}),
        CPU_PATH,
        'Invalid value: "1500m": the requested CPUs of LSE Pod must be integer',
    ),
    (
        "forbidden not defined QoS",
        pod("p", priority=6666, requests=BATCH, limits=BATCH),
        QOS_PATH,
        "Required value: must specify koordinator QoS BE with koordinator colocation resources",
    ),
    (
        "batch resources on an LS pod",
        pod("p", qos="LS", priority=5000, requests=BATCH, limits=BATCH),
        QOS_PATH,
        "Required value: must specify koordinator QoS BE with koordinator colocation resources",
    ),
]

ALLOWED = [
    ("non-colocation empty pod", pod("p")),
    ("validate defined QoS", pod("p", qos="BE", priority=5000, requests=BATCH, limits=BATCH)),
    ("allowed QoS and priorityClass combination: BE And NonProd", pod("p", qos="BE", priority=5000)),
    (
        "allowed QoS and priorityClass combination: LSR And Prod",
        pod("p", qos="LSR", priority=9999, requests={"cpu": "1"}),
    ),
    (
        "validate resources - LSR And Prod",
        pod("p", qos="LS", priority=9999, requests={"cpu": "1", "memory": "4Gi"}),
    ),
    ("LS with koord-batch", pod("p", qos="LS", priority_class_name="koord-batch")),
    ("BE with koord-free", pod("p", qos="BE", priority_class_name="koord-free")),
    ("LSE with koord-mid and whole CPUs", pod("p", qos="LSE", priority=7000, requests={"cpu": "2"})),
    ("LSR with koord-prod by priorityClassName", pod("p", qos="LSR", priority_class_name="koord-prod")),
]


@pytest.mark.parametrize(("body", "path", "reason"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_koordinators_pod_webhook_refuses_the_door_refuses_with_its_reason(
    body: dict[str, Any], path: str, reason: str
) -> None:
    verdict = Door().check(Document(source="f.yaml", index=0, body=body))
    assert [(i.path, reason in i.message) for i in verdict.issues] == [(path, True)], verdict.issues


@pytest.mark.parametrize("body", [c[1] for c in ALLOWED], ids=[c[0] for c in ALLOWED])
def test_what_koordinators_pod_webhook_allows_passes(body: dict[str, Any]) -> None:
    body["spec"]["containers"][0]["resources"]["requests"].setdefault("cpu", "1")
    verdict = Door().check(Document(source="f.yaml", index=0, body=body))
    assert verdict.issues == []


def test_a_priority_class_name_is_resolved_by_the_priority_class_applied_before_it() -> None:
    online = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "online"},
        "value": 9100,
    }
    docs = [
        Document(source="f.yaml", index=i, body=b)
        for i, b in enumerate([online, pod("be-online", qos="BE", priority_class_name="online")])
    ]
    verdicts = Door().check_all(docs)
    assert verdicts[0].issues == []
    (issue,) = verdicts[1].issues
    assert issue.message == (
        "Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination "
        "(from spec.priority 9100 of priorityClassName online)"
    )


def test_allot_apply_prints_the_refused_document_with_the_field_and_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = [
        Document(
            source="pods.yaml", index=0, body=pod("be-prod", qos="BE", priority_class_name="koord-prod")
        ),
        Document(
            source="pods.yaml", index=1, body=pod("be-batch", qos="BE", priority_class_name="koord-batch")
        ),
    ]
    accepted, refused = report(Door().check_all(docs))
    assert refused == 1 and [d.body["metadata"]["name"] for d in accepted] == ["be-batch"]
    assert (
        "error: pods.yaml document 1 (Pod default/be-prod): "
        f"{QOS_PATH}: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in "
        "combination (from spec.priority 9000 of priorityClassName koord-prod)"
    ) in capsys.readouterr().err


def test_the_simulator_refuses_the_document_and_runs_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.yaml"
    lsr_batch = pod("lsr-batch", qos="LSR", priority_class_name="koord-batch", requests={"cpu": "2"})
    ls_batch = pod("ls-batch", qos="LS", priority_class_name="koord-batch", requests={"cpu": "2"})
    path.write_text(yaml.safe_dump_all([a_node("n1"), lsr_batch, ls_batch]))
    _, view, refused = run(str(path), config={})
    assert refused == 1
    assert sorted(view.pods) == ["default/ls-batch"]
    assert view.pods["default/ls-batch"].node == "n1"
    assert "koordinator.sh/qosClass=LSR and priorityClass=koord-batch" in capsys.readouterr().err


def test_a_refused_pod_recorded_anyway_is_rejected_by_the_first_service_with_the_reason() -> None:
    """What kube-sync records for a pod the API server holds (its door does not resolve priorityClassName: the API
    server did), the services reject at admission and never retry."""
    body = pod("be-prod", qos="BE", priority_class_name="koord-prod", priority=9000, requests={"cpu": "1"})
    s = Scenario()
    s.apply(a_node("n1"))
    s.sim.apply(
        to_input(
            Document(source="kubernetes", index=0, body=body),
            door=Door(resolve_priority=False, expand_workloads=False),
        )
    )
    (rejected,) = s.of_type("pod.rejected")
    assert rejected["stage"] == "admission" and rejected["codes"] == ["Forbidden"]
    assert rejected["errors"][0]["path"] == QOS_PATH
    assert "koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used" in rejected["message"]
    assert s.phase("default/be-prod") == "Rejected"
