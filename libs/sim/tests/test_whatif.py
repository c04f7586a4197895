"""``allot what-if``'s pure parts: strict reading of the pods asked about, the in-memory trial over the deciders'
projections (here the simulator's, folded from an example), the answer read from it, the window and config
merging, and the text rendering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from allot_intake.errors import UsageError
from allot_intake.manifests import Door
from allot_sim.whatif import inputs, render
from allot_sim.whatif.answer import answers
from allot_sim.whatif.pump import Trial
from allot_sim.whatif.window import merged, span, window
from allot_testing.scenario import Scenario

ROOT = Path(__file__).resolve().parents[3]
GANGS = ROOT / "examples" / "gangs" / "01-gang-of-four.yaml"


def _gpu_pod(name: str, group: str, gpus: int) -> str:
    labels = f"{{pod-group.scheduling.sigs.k8s.io: {group}}}" if group else "{}"
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: training
  labels: {labels}
spec:
  containers:
  - name: main
    image: trainer
    resources:
      requests: {{cpu: '2', memory: 4Gi, nvidia.com/gpu: '{gpus}'}}
      limits: {{cpu: '2', memory: 4Gi, nvidia.com/gpu: '{gpus}'}}
"""


def _group(name: str, members: int) -> str:
    return f"""apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata: {{name: {name}, namespace: training}}
spec: {{minMember: {members}}}
"""


def _ask(s: Scenario, tmp_path: Path, text: str) -> tuple[Trial, list[dict[str, Any]]]:
    path = tmp_path / "ask.yaml"
    path.write_text(text)
    items, keys, _ = inputs.admitted(inputs.read([str(path)]), Door(quotas=None))
    events = s.sim.store.events
    trial = Trial(s.sim.hosts, position=len(events), at=s.sim.clock.now_us, prev_hash=events[-1].hash)
    for index, item in enumerate(items):
        trial.apply(item, index)
    return trial, answers(trial.records, keys)


def test_a_pod_group_is_placed_whole_with_its_gpus(tmp_path: Path) -> None:
    s = Scenario().apply_yaml(GANGS.read_text())
    trial, found = _ask(
        s,
        tmp_path,
        "---\n".join([_group("probe", 2), _gpu_pod("probe-0", "probe", 1), _gpu_pod("probe-1", "probe", 1)]),
    )
    assert [a["pod"] for a in found] == ["training/probe-0", "training/probe-1"]
    for answer in found:
        assert answer["fits"] and answer["outcome"] == "Scheduled", answer
        (gpu,) = answer["devices"]["gpu"]
        assert gpu["koordinator.sh/gpu-core"] == 100
    assert trial.records[0].position == len(s.sim.store.events) + 1
    assert render.answer_lines(found[0])[1].startswith("  quota:     koordinator-default-quota admits it")
    assert any(line.startswith("  devices:   gpu ") for line in render.answer_lines(found[0]))


def test_a_lone_gang_member_waits_for_the_rest_and_the_log_is_not_touched(tmp_path: Path) -> None:
    s = Scenario().apply_yaml(GANGS.read_text())
    before = len(s.sim.store.events)
    _, (answer,) = _ask(s, tmp_path, _group("pair", 2) + "---\n" + _gpu_pod("pair-0", "pair", 1))
    assert len(s.sim.store.events) == before
    assert not answer["fits"] and answer["outcome"] == "Waiting"
    assert answer["waits_for"].startswith("the rest of its gang (gang training/pair: 1/2 members present")


def test_the_same_question_gets_the_same_records(tmp_path: Path) -> None:
    text = _gpu_pod("one", "", 9)
    first = _ask(Scenario().apply_yaml(GANGS.read_text()), tmp_path, text)
    second = _ask(Scenario().apply_yaml(GANGS.read_text()), tmp_path, text)
    assert [r.hash for r in first[0].records] == [r.hash for r in second[0].records]
    (answer,) = first[1]
    assert answer["outcome"] == "Unschedulable" and answer["waits_for"].startswith("capacity")


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ("    image: trainer\n", "spec.containers[0].imagee: unknown field"),
        ("  containers:\n", "spec.nodeSelectorr: unknown field"),
        ("metadata:\n", "metadata.lables: unknown field"),
    ],
)
def test_unknown_pod_fields_are_refused_with_their_path(tmp_path: Path, patch: str, path: str) -> None:
    extra = {
        "    image: trainer\n": "    image: trainer\n    imagee: x\n",
        "  containers:\n": "  nodeSelectorr: {}\n  containers:\n",
        "metadata:\n": "metadata:\n  lables: {}\n",
    }[patch]
    file = tmp_path / "pod.yaml"
    file.write_text(_gpu_pod("p", "g", 1).replace(patch, extra, 1))
    with pytest.raises(UsageError) as caught:
        inputs.read([str(file)])
    assert path in str(caught.value)
    assert caught.value.exit_code == 2


def test_other_kinds_and_bad_yaml_are_refused(tmp_path: Path) -> None:
    file = tmp_path / "node.yaml"
    file.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n")
    with pytest.raises(UsageError, match="a what-if asks about Pods and PodGroups, not Node"):
        inputs.read([str(file)])
    file.write_text("a: [\n")
    with pytest.raises(UsageError, match="is not valid YAML") as caught:
        inputs.read([str(file)])
    assert caught.value.exit_code == 2


def test_window_and_merge() -> None:
    assert window(":", 50) == (1, 50)
    assert window("10:", 50) == (10, 50)
    assert window(":20", 50) == (1, 20)
    for bad, message in (
        ("5", "not FROM:TO"),
        ("9:3", "'9:3': needs FROM ≤ TO"),
        ("1:51", "past the log's head"),
        ("a:b", "positions"),
        ("x" * 5000, r"'xxxxxxxxxxxxxxxxxxxx'\.\.\.'xxxxxxxxxx' \(5000 characters\) is not FROM:TO"),
    ):
        with pytest.raises(UsageError, match=message):
            window(bad, 50)
    assert span(":") == (1, None) and span("3:7") == (3, 7)
    base = {
        "policy": "koordinator",
        "scoring": {"nodeResourcesFit": {"strategy": "LeastAllocated", "weight": 1}},
    }
    change = {"scoring": {"nodeResourcesFit": {"strategy": "MostAllocated"}}}
    assert merged(base, change) == {
        "policy": "koordinator",
        "scoring": {"nodeResourcesFit": {"strategy": "MostAllocated", "weight": 1}},
    }


def test_window_lines_list_each_difference_and_the_count() -> None:
    report = {
        "service": "device-allocator",
        "config": "c.yaml",
        "from": 1,
        "to": 9,
        "triggers": 4,
        "differences": [
            {
                "position": 7,
                "pod": "a/b",
                "recorded": {"outcome": "Scheduled", "node": "n1", "message": ""},
                "would_be": None,
            }
        ],
    }
    lines = render.window_lines(report)
    assert "recorded Scheduled on n1" in lines[1]
    assert "would be no decision" in lines[2]
    assert lines[-1] == "1 decision(s) would differ"


def test_node_labels_are_changed_on_the_matching_nodes_records_only() -> None:
    from allot_sim.whatif.facts import NodeLabels, Relabel

    change = NodeLabels.parse("pool=h100:node.koordinator.sh/gpu-partition-policy=Prefer")
    assert change.selector == {"pool": "h100"}
    assert NodeLabels.parse("*:a=b").selector == {}
    for bad in ("pool=h100", "pool:a", "*:"):
        with pytest.raises(UsageError, match="--node-labels"):
            NodeLabels.parse(bad)
    for long in ("x" * 5000, "a=b:" + "x" * 5000, "x" * 5000 + ":a=b"):  # repeated cut, not whole
        with pytest.raises(UsageError, match=r"characters\) is not") as refused:
            NodeLabels.parse(long)
        assert len(str(refused.value)) < 200
    s = Scenario().apply_yaml(
        "\n---\n".join(
            f"apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{pool: {pool}}}}}\n"
            "status: {allocatable: {cpu: '8', memory: 8Gi, pods: '10'}}"
            for name, pool in (("a", "h100"), ("b", "a100"))
        )
    )
    relabel = Relabel(change)
    seen = {}
    for record in s.sim.store.events:
        changed = relabel.record(record)
        if record.type == "node.registered":
            p = changed.payload_dict()
            seen[p["name"]] = (p["node"]["labels"], p["manifest"]["metadata"]["labels"])
            assert (changed is record) == (p["name"] == "b")
    assert seen["a"][0]["node.koordinator.sh/gpu-partition-policy"] == "Prefer"
    assert seen["a"][1]["node.koordinator.sh/gpu-partition-policy"] == "Prefer"
    assert "node.koordinator.sh/gpu-partition-policy" not in seen["b"][0]


def test_a_config_of_several_services_or_an_unknown_key_is_refused(tmp_path: Path) -> None:
    from allot_sim.whatif.run import changed_config

    file = tmp_path / "c.yaml"
    file.write_text("device-allocator: {policy: binpack}\nquota-manager: {}\n")
    with pytest.raises(UsageError, match="give the settings of one service"):
        changed_config(str(file))
    file.write_text("polciy: binpack\n")
    with pytest.raises(UsageError, match="polciy") as caught:
        changed_config(str(file))
    assert caught.value.exit_code == 2
    file.write_text("policy: binpack\n")
    assert changed_config(str(file)) == ("device-allocator", {"policy": "binpack"})


def test_a_single_numa_pod_gets_its_cpuset_and_numa_node(tmp_path: Path) -> None:
    s = Scenario().apply_yaml(
        (ROOT / "examples" / "placement" / "01-gpu-cpu-memory-one-numa.yaml").read_text()
    )
    lsr = """apiVersion: v1
kind: Pod
metadata:
  name: infer-9
  namespace: ml
  labels: {koordinator.sh/qosClass: LSR, koordinator.sh/priority-class: koord-prod}
  annotations:
    scheduling.koordinator.sh/numa-topology-spec: '{"numaTopologyPolicy":"SingleNUMANode"}'
spec:
  containers:
  - name: main
    resources:
      requests: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "1"}
      limits: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "1"}
"""
    _, (answer,) = _ask(s, tmp_path, lsr)
    assert answer["fits"], answer
    assert len(answer["cpuset"]) == 4
    (numa,) = answer["numa"]
    assert numa["resources"]["cpu"] == 4000
    lines = render.answer_lines(answer)
    assert any(line.startswith("  cpuset:    ") for line in lines)
    assert f"  numa:      node {numa['node']} (cpu 4, memory 16Gi)" in lines, lines


def test_a_window_follows_the_configurations_recorded_inside_it() -> None:
    import asyncio

    from allot_runtime.processor import Host
    from allot_runtime.replay import Switch
    from allot_sim.whatif.window import compare
    from device_allocator.processor import DeviceAllocator

    s = Scenario().apply_yaml((ROOT / "examples" / "quota" / "01-borrow-and-wait.yaml").read_text())
    store, head = s.sim.store, len(s.sim.store.events)

    def host(config: dict[str, Any]) -> Host:
        return Host(DeviceAllocator(config), name="device-allocator")

    same = asyncio.run(compare(host({}), store, first=1, last=head))
    assert same[0] > 0 and same[1] == []  # the recorded configuration reproduces every decision
    binpack = asyncio.run(compare(host({"policy": "binpack"}), store, first=1, last=head))[1]
    assert binpack
    middle = binpack[0]["position"]
    later = Switch(middle, lambda: host({"policy": "binpack"}))
    switched = asyncio.run(compare(host({}), store, first=1, last=head, switches=[later]))[1]
    assert switched == [d for d in binpack if d["position"] > middle]
    assert switched and len(switched) < len(binpack)
