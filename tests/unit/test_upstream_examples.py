"""Upstream YAML (Koordinator's manuals, HAMi's examples) as a user applies it: what the expected files of
examples/upstream/ cannot show — whom a pod's quota is charged to, what is reported as read but not acted on."""

from __future__ import annotations

from pathlib import Path

import pytest

from allot_sim.scenario import run

UPSTREAM = Path(__file__).resolve().parents[2] / "examples" / "upstream"


def test_a_child_of_a_tree_root_joins_its_tree_and_its_pods_are_charged_to_it() -> None:
    sim, _, refused = run(str(UPSTREAM / "02-koordinator-manuals.yaml"), config={})
    assert refused == 0
    charged = {
        e.stream_id.removeprefix("pod:"): e.payload_dict()["quota"]
        for e in sim.store.events
        if e.type == "quota.admitted"
    }
    assert charged["team-a/train-1"] == "team-a"
    assert {q for k, q in charged.items() if k.startswith("team-a/web-")} == {"team-a"}
    assert not [e for e in sim.store.events if e.type == "quota.rejected"]


def test_what_is_read_but_not_acted_on_is_reported_per_object(capsys: pytest.CaptureFixture[str]) -> None:
    run(str(UPSTREAM / "02-koordinator-manuals.yaml"), config={})
    err = capsys.readouterr().err
    for expected in (
        "(Namespace team-a): kind: a Namespace is recorded; only its labels are read",
        "(Pod team-a/test-pod): ClusterColocationProfile colocation-profile-example set: "
        'metadata.labels["koordinator.sh/mutated"]=true, metadata.labels["koordinator.sh/qosClass"]=BE',
        "(Deployment team-a/web): kind: standalone mode: Deployment expanded into 2 pod(s)",
        '(Pod default/gang-a): metadata.annotations["gang.scheduling.koordinator.sh/network-topology-spec"]',
        "treated as Strict, as Koordinator does (got 'strict')",
    ):
        assert expected in err, expected


def test_the_colocation_profile_rewrites_the_manuals_test_pod_as_the_manual_shows() -> None:
    """docs/user-manuals/colocation-profile.md, "Verify ClusterColocationProfile works": the pod as `kubectl get pod
    test-pod -o yaml` shows it (the API server writes batch-cpu 1000 as "1k")."""
    sim, _, refused = run(str(UPSTREAM / "02-koordinator-manuals.yaml"), config={})
    assert refused == 0
    (pod,) = (
        e.payload_dict()["manifest"]
        for e in sim.store.events
        if e.type == "pod.submitted" and e.stream_id == "pod:team-a/test-pod"
    )
    assert pod["metadata"]["annotations"] == {"koordinator.sh/intercepted": "true"}
    assert pod["metadata"]["labels"] == {
        "koordinator.sh/enable-colocation": "true",
        "koordinator.sh/qosClass": "BE",
        "koordinator.sh/priority": "1000",
        "koordinator.sh/mutated": "true",
    }
    spec = pod["spec"]
    assert spec["terminationGracePeriodSeconds"] == 30
    assert (spec["priority"], spec["priorityClassName"], spec["schedulerName"]) == (
        5000,
        "koord-batch",
        "koord-scheduler",
    )
    assert spec["containers"][0]["resources"] == {
        "limits": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "3456Mi"},
        "requests": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "3456Mi"},
    }
