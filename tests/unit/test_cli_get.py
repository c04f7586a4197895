"""``allot get`` for every kind, against a recorded log (the demo, a reservation-first migration, gangs and a
NodeMetric run through the simulator): each format, ``-n`` / ``-A``, ``-l``, names, ``-w`` and human units."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_cli.commands.get import run_get
from allot_intake.errors import InputError
from allot_testing.builders import a_node, a_pod
from allot_testing.scenario import Scenario
from allot_views.kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_767_225_600_000_000 + 90 * 1_000_000  # 90 s after the simulator's clock starts (2026-01-01T00:00:00Z)
METRIC = """
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata: {name: gpu-node-a, labels: {zone: a}}
status:
  nodeMetric:
    nodeUsage: {resources: {cpu: "16", memory: 128Gi}}
"""


@pytest.fixture(scope="module")
def log() -> Scenario:
    s = Scenario()
    for example in (
        "demo/cluster.yaml",
        "demo/pods.yaml",
        "reservation/02-migrate-reservation-first.yaml",
        "gangs/01-gang-of-four.yaml",
    ):
        s.apply_yaml((ROOT / "examples" / example).read_text())
    s.apply_yaml(METRIC)
    s.apply(a_node("kubelet-units", cpu="7500m", memory="65843020Ki", labels={"pool": "cpu"}))
    s.apply(a_pod("web-1", namespace="serving", labels={"app": "shop", "tier": "front"}))
    s.apply(a_pod("web-2", namespace="serving", labels={"app": "shop", "tier": "back"}))
    return s


def get(log: Scenario, *argv: str, now: int = NOW) -> tuple[int, str]:
    from allot_cli.commands import get as command

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    args = parser.parse_args(["get", *argv])
    out: list[str] = []
    code = asyncio.run(run_get(args, log.sim.store, write=out.append, now=lambda: now))
    return code, "\n".join(out)


def cells(text: str, name: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if name in line.split())


def _placeholders(value: Any, path: str = "") -> Any:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _placeholders(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _placeholders(item, f"{path}[{i}]")
    elif value in (None, "", "-"):
        yield path


@pytest.mark.parametrize("kind", [k.plural for k in KINDS])
def test_every_kind_lists_as_a_table_and_as_json_yaml_and_names(log: Scenario, kind: str) -> None:
    code, text = get(log, kind)
    first = next(k.columns[0] for k in KINDS if k.plural == kind).upper()  # NAME, or LAST SEEN for events
    assert code == 0 and text.splitlines()[0].split()[:2] in (
        ["NAMESPACE", first[:4]],
        [first[:4], text.split()[1]],
    )
    _, as_json = get(log, kind, "-o", "json")
    listed = json.loads(as_json)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    rows = listed["items"]
    assert rows and all({"apiVersion", "kind", "metadata"} <= set(r) and r["metadata"]["name"] for r in rows)
    assert all(
        ("namespace" in r["metadata"]) == next(k.namespaced for k in KINDS if k.plural == kind) for r in rows
    )
    assert not list(_placeholders(rows)), "no '-', '' or null in structured output"
    _, as_yaml = get(log, kind, "-o", "yaml")
    assert yaml.safe_load(as_yaml) == listed
    _, names = get(log, kind, "-o", "name")
    singular = next(k.singular for k in KINDS if k.plural == kind)
    assert names.splitlines() == [f"{singular}/{r['metadata']['name']}" for r in rows]
    assert len(text.splitlines()) >= len(rows) + 1


def test_pods_in_all_namespaces_or_one(log: Scenario) -> None:
    _, everything = get(log, "pods")
    assert everything.splitlines()[0].split()[:3] == ["NAMESPACE", "NAME", "PHASE"]
    assert cells(everything, "train-big")[:3] == ["research", "train-big", "Waiting"]
    assert "  train-big: Insufficient quotas" in everything  # why it waits, under the table
    _, research = get(log, "po", "-n", "research")
    assert research.splitlines()[0].split()[:2] == ["NAME", "PHASE"]
    assert {line.split()[0] for line in research.splitlines()[1:] if not line.startswith("  ")} == {
        "notebook-alice",
        "train-big",
        "train-llama-0",
        "train-llama-1",
    }
    _, again = get(log, "pods", "-n", "research", "-A")  # -A wins, as in kubectl
    assert again == everything


def test_show_labels(log: Scenario) -> None:
    _, text = get(log, "pods", "-n", "serving", "-l", "app=shop", "--show-labels")
    assert text.splitlines()[0].split()[-1] == "LABELS"
    assert cells(text, "web-1")[-1] == "app=shop,tier=front"
    _, nodes = get(log, "nodes", "-o", "wide", "--show-labels")
    assert nodes.splitlines()[0].split().count("LABELS") == 1


def test_wide_adds_columns(log: Scenario) -> None:
    _, wide = get(log, "pods", "-o", "wide")
    assert wide.splitlines()[0].split()[-2:] == ["ENFORCEMENT", "ENFORCED"]
    _, nodes = get(log, "nodes", "-o", "wide")
    assert "node.koordinator.sh/gpu-model=A100" in " ".join(cells(nodes, "gpu-node-a"))


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=shop", {"web-1", "web-2"}),
        ("app==shop,tier=front", {"web-1"}),
        ("app=shop,tier!=front", {"web-2"}),
        ("tier in (front, back)", {"web-1", "web-2"}),
        ("app=shop,tier notin (front)", {"web-2"}),
        ("koordinator.sh/qosClass=BE", {"etl-batch"}),
        ("tier", {"web-1", "web-2"}),
        ("!koordinator.sh/qosClass,tier", {"web-1", "web-2"}),
        ("app=db", set()),
    ],
    ids=["equals", "and", "not-equals", "in", "notin", "prefixed-key", "exists", "does-not-exist", "none"],
)
def test_label_selectors(log: Scenario, selector: str, expected: set[str]) -> None:
    _, text = get(log, "pods", "-l", selector, "-o", "json")
    assert {r["metadata"]["name"] for r in json.loads(text)["items"]} == expected


def test_selectors_on_nodes_and_nodemetrics(log: Scenario) -> None:
    _, text = get(log, "nodes", "-l", "node.koordinator.sh/gpu-model=A100", "-o", "name")
    assert text.splitlines() == ["node/gpu-node-a", "node/gpu-node-b"]
    _, text = get(
        log, "nodes", "-l", "node.koordinator.sh/gpu-model,kubernetes.io/hostname!=gpu-node-b", "-o", "name"
    )
    assert text.splitlines() == ["node/gpu-node-a"]
    _, text = get(log, "nodemetrics", "-l", "zone=a", "-o", "name")
    assert text == "nodemetric/gpu-node-a"


@pytest.mark.parametrize(
    ("selector", "complaint"),
    [
        ("app=web,", "cannot read ''"),
        ("tier in (a", "unbalanced parentheses"),
        ("-bad=x", "not a valid label key"),
        ("app=we b", "cannot read"),
        ("app=" + "x" * 64, "not a valid label value"),
    ],
)
def test_a_bad_selector_is_refused_input(log: Scenario, selector: str, complaint: str) -> None:
    with pytest.raises(InputError, match=complaint) as refused:
        get(log, "pods", f"--selector={selector}")
    assert refused.value.exit_code == 1


def test_names_one_object_or_not_found(log: Scenario, capsys: Any) -> None:
    code, text = get(log, "pods", "research/train-big", "-o", "json")
    assert code == 0 and json.loads(text)["status"]["phase"] == "Waiting"  # one object, not a list
    code, text = get(log, "pods", "-n", "training", "llm-0", "llm-1", "-o", "name")
    assert code == 0 and text.splitlines() == ["pod/llm-0", "pod/llm-1"]
    code, text = get(log, "pods", "-n", "research", "train-big", "nope")
    assert code == 1 and "train-big" in text
    assert 'pods "nope" not found' in capsys.readouterr().err
    code, text = get(log, "pods", "-n", "empty")
    assert code == 0 and text == "" and "No resources found in empty namespace." in capsys.readouterr().err


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_an_empty_list_is_an_empty_list_object(log: Scenario, output: str) -> None:
    code, text = get(log, "pods", "-n", "empty", "-o", output)
    listed = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert code == 0 and listed == {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [],
    }


def test_an_unknown_kind_is_refused_input(log: Scenario) -> None:
    from allot_views.kinds import kind_named

    with pytest.raises(InputError, match='resource type "secrets"'):
        kind_named("secrets")


@pytest.mark.parametrize("argv", [[], ["-n", "default"], ["-o", "json"]], ids=["bare", "namespace", "output"])
def test_no_kind_is_a_usage_error_asking_for_the_kind_alone_with_the_kinds(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from allot_cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["get", *argv])
    assert exited.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    kinds = ", ".join(kind.plural for kind in KINDS)
    assert (
        last == f"allot get: error: the following arguments are required: KIND (one of: {kinds})"
    )  # and not NAME: it is optional


def test_human_units_and_unlimited(log: Scenario) -> None:
    _, quotas = get(log, "quotas", "-o", "wide")
    default = cells(quotas, "koordinator-default-quota")
    assert "cpu=unlimited" in default and "memory=unlimited" in default
    assert "1844674407370955161" not in quotas
    assert cells(quotas, "koordinator-root-quota")[5] == "unlimited"  # no max at all
    assert "memory=200Gi" in cells(quotas, "research")
    _, exact = get(log, "quotas", "koordinator-default-quota", "-o", "json")
    assert json.loads(exact)["spec"]["max"]["cpu"] == "1844674407370955161"  # exact in json
    _, metrics = get(log, "nodemetrics")
    assert cells(metrics, "gpu-node-a") == ["gpu-node-a", "16", "(25%)", "128Gi", "(25%)", "90s", "ago"]
    _, nodes = get(log, "nodes", "kubelet-units")  # as a kubelet reports them: in Ki, in millicores
    assert cells(nodes, "kubelet-units")[1:3] == ["7500m", "62.8Gi"]
    _, exact = get(log, "nodes", "kubelet-units", "-o", "json")
    capacity = json.loads(exact)["status"]["capacity"]
    assert (capacity["cpu"], capacity["memory"]) == ("7500m", "65843020Ki")
    _, devices = get(log, "devices", "-o", "wide")
    assert cells(devices, "gpu-node-a")[-2:] == ["A100", "640Gi"]


def test_events_are_what_the_binder_writes_for_the_decisions(log: Scenario) -> None:
    _, text = get(log, "events", "-n", "research", "-o", "json")
    events = json.loads(text)["items"]
    waiting = [
        e
        for e in events
        if e["involvedObject"] == {"kind": "Pod", "namespace": "research", "name": "train-big"}
    ]
    assert waiting and all((e["type"], e["reason"]) == ("Warning", "FailedScheduling") for e in waiting)
    assert any(e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "train-llama-0" for e in events)
    _, table = get(log, "ev", "-n", "research")
    assert table.splitlines()[0].split()[:4] == ["LAST", "SEEN", "TYPE", "REASON"]


def test_every_kind_row_holds_what_its_projection_says(log: Scenario) -> None:
    def one(kind: str, name: str) -> dict[str, Any]:
        row: dict[str, Any] = json.loads(get(log, kind, name, "-o", "json")[1])
        return row

    assert one("gangs", "training/huge")["status"]["phase"] == "Scheduling"
    llm = one("pg", "training/llm")
    assert (llm["kind"], llm["spec"]["minMember"], llm["status"]["members"]["present"]) == ("PodGroup", 4, 4)
    assert one("reservations", "pmj-migrate-web-0")["status"]["phase"] == "Succeeded"
    migration = one("pmj", "migrate-web-0")
    assert (migration["status"]["phase"], migration["status"]["nodeName"]) == ("Succeeded", "gpu-node-b")
    assert migration["spec"]["podRef"] == {"namespace": "default", "name": "web-0"}
    device = one("devices", "gpu-1")
    assert [d["minor"] for d in device["spec"]["devices"]] == list(range(8))
    assert device["status"]["allocated"] == "gpu:0,1,2,3,4,5,6,7"
    assert one("eq", "research")["status"]["parent"] == "koordinator-root-quota"
    pod = one("pods", "training/llm-0")
    assert (pod["apiVersion"], pod["kind"], pod["spec"]["nodeName"]) == ("v1", "Pod", "gpu-1")
    assert pod["status"]["phase"] == "Bound" and pod["status"]["devices"]["gpu"]


class Stepping:
    """The scenario's store, with something recorded (or not) each time the watch looks at the log head."""

    def __init__(self, s: Scenario, *steps: Any) -> None:
        self.store, self.steps = s.sim.store, iter(steps)

    async def head(self) -> Any:
        next(self.steps, lambda: None)()
        return await self.store.head()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def watch_pods(store: Any, output: str, *, rounds: int, **options: Any) -> list[str]:
    """What ``allot get pods -A -w -o OUTPUT`` prints over ``rounds`` polls of ``store``."""
    from allot_cli.commands.get import watch
    from allot_views.kinds import Selector, kind_named, select

    kind = kind_named("pods")
    printed: list[str] = []

    async def run() -> None:
        await watch(
            store,
            kind,
            lambda rows: select(kind, rows, namespace=None, selector=Selector(), names=[]),
            output,
            namespaces=True,
            write=options.pop("write", printed.append),
            interval=0,
            rounds=rounds,
            **options,
        )

    asyncio.run(run())
    return printed


def test_watch_prints_the_list_then_rows_that_change() -> None:
    from allot_cli.commands.get import watch
    from allot_testing.builders import a_gpu_device, a_node
    from allot_views.kinds import Selector, kind_named, select

    s = Scenario()
    s.apply(a_node("n1", gpus=2), a_gpu_device("n1", gpus=2))
    s.apply(a_pod("a", gpus=1))
    store = Stepping(
        s,
        lambda: None,  # the head read before the list
        lambda: s.apply(a_pod("b", gpus=1)),  # a new row
        lambda: None,  # nothing recorded: nothing printed
        lambda: s.apply(a_pod("c", gpus=1)),  # c cannot be placed: only c is printed
        lambda: s.apply(a_pod("x", namespace="other")),  # another namespace: not printed
        lambda: s.delete("Pod", "a"),  # a goes (its last state is printed) and c is placed on its GPU
    )
    kind = kind_named("pods")
    printed: list[str] = []

    def pick(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return select(kind, rows, namespace="default", selector=Selector(), names=[])

    async def run() -> None:
        await watch(store, kind, pick, "table", namespaces=False, write=printed.append, interval=0, rounds=8)  # type: ignore[arg-type]

    asyncio.run(run())
    assert printed[0].splitlines()[0].split()[:3] == ["NAME", "PHASE", "NODE"]
    assert [line.split()[:2] for line in printed[0].splitlines()[1:]] == [["a", "Bound"]]
    changes = [line.split()[:2] for p in printed[1:] for line in p.splitlines()]
    assert changes == [["b", "Bound"], ["c", "Unschedulable"], ["c", "Bound"], ["a", "Deleted"]]
    deletion = next(line for p in printed[1:] for line in p.splitlines() if line.split()[0] == "a")
    assert deletion.split() == ["a", "Deleted", "-", "-", "-"], "not Bound on the GPU c holds now"
    assert len(printed) == 4  # one print per change of the log, none for the poll that found nothing


def test_a_watch_of_nothing_yet_prints_the_header_with_the_first_rows() -> None:
    s = Scenario()
    store = Stepping(s, lambda: None, lambda: None, lambda: s.apply(a_pod("a-pod-with-a-long-name")))
    printed = watch_pods(store, "table", rounds=3)
    assert len(printed) == 1
    header, row = printed[0].splitlines()
    assert header.index(" NAME ") + 1 == row.index("a-pod-with-a-long-name")
    assert header.index("PHASE") == row.index("Unschedulable")  # no node in this log


def test_watch_prints_json_documents_one_by_one() -> None:
    from allot_cli.commands.get import watch
    from allot_views.kinds import Selector, kind_named, select

    s = Scenario()
    s.apply(a_pod("a"))
    kind = kind_named("pods")
    printed: list[str] = []

    def write(text: str) -> None:
        printed.append(text)
        if len(printed) == 1:
            s.apply(a_pod("b"))

    async def run() -> None:
        await watch(
            s.sim.store,
            kind,
            lambda rows: select(kind, rows, namespace=None, selector=Selector(), names=[]),
            "json",
            namespaces=True,
            write=write,
            interval=0,
            rounds=3,
        )

    asyncio.run(run())
    assert [json.loads(p)["metadata"]["name"] for p in printed] == ["a", "b"]


@pytest.mark.parametrize("kind", [k.plural for k in KINDS])
def test_default_tables_fit_80_columns_and_wide_shows_everything(log: Scenario, kind: str) -> None:
    _, table = get(log, kind)
    assert all(len(line) <= 80 for line in table.splitlines())
    _, wide = get(log, kind, "-o", "wide")
    assert len(wide.splitlines()) == len(table.splitlines()), "one line per row: nothing wraps"
    assert "…" not in wide


def test_a_long_message_is_cut_in_the_table_and_whole_in_wide(log: Scenario) -> None:
    _, table = get(log, "pods", "-n", "research")
    note = next(line for line in table.splitlines() if line.startswith("  train-big: "))
    assert len(note) == 80 and note.endswith("…")
    _, wide = get(log, "pods", "-n", "research", "-o", "wide")
    whole = next(line for line in wide.splitlines() if line.startswith("  train-big: "))
    assert whole.startswith(note[:-1]) and whole.endswith("exceedDimensions: [cpu nvidia.com/gpu]")
    assert wide.splitlines()[0].split()[-4:] == ["CPUSET", "QOS", "ENFORCEMENT", "ENFORCED"]


def test_a_watch_in_json_reports_a_deleted_object_without_what_it_held() -> None:
    from allot_testing.builders import a_gpu_device, a_node

    s = Scenario()
    s.apply(a_node("n1", gpus=1), a_gpu_device("n1", gpus=1))
    s.apply(a_pod("a", gpus=1))
    store = Stepping(s, lambda: None, lambda: s.delete("Pod", "a"))
    printed = watch_pods(store, "json", rounds=2, now=lambda: NOW)
    first, gone = (json.loads(p) for p in printed)
    assert first["spec"]["nodeName"] == "n1" and first["status"]["phase"] == "Bound"
    assert gone["metadata"] == {
        "name": "a",
        "namespace": "default",
        "deletionTimestamp": "2026-01-01T00:01:30Z",
    }
    assert gone["status"] == {"phase": "Deleted"} and "spec" not in gone


def test_the_quota_tree_is_an_allot_kind_with_exact_quantities(log: Scenario) -> None:
    from allot_stack.logtools import projection
    from allot_views.objects import tree_object

    async def rows() -> list[dict[str, Any]]:
        return list((await projection(log.sim.store, "quota-manager")).engine.tree_view())

    tree = tree_object(asyncio.run(rows()))
    assert (tree["apiVersion"], tree["kind"]) == ("allot.dev/v1alpha1", "QuotaTree")
    research = next(q for q in tree["status"]["quotas"] if q["name"] == "research")
    assert research["max"]["memory"] == "200Gi" and research["parent"] == "koordinator-root-quota"
    assert not list(_placeholders(tree))
