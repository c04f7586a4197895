"""Upstream YAML (Koordinator's manuals, HAMi's examples) as a user applies it: what the expected files of
examples/upstream/ cannot show — whom a pod's quota is charged to, what is reported as read but not acted on."""

from __future__ import annotations

from pathlib import Path

import pytest

from allot_cli.sim.run import run

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
        "(Namespace team-a): kind: a Namespace is recorded, nothing in Allot acts on it",
        "(ClusterColocationProfile colocation-profile-example): spec: recorded, but pods are not rewritten",
        "(Deployment team-a/web): kind: standalone mode: Deployment expanded into 2 pod(s)",
        '(Pod default/gang-a): metadata.annotations["gang.scheduling.koordinator.sh/network-topology-spec"]',
        "treated as Strict, as Koordinator does (got 'strict')",
    ):
        assert expected in err, expected
