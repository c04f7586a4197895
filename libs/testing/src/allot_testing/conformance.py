"""The conformance corpus (tests/conformance/): cases in upstream's shapes, run in the simulator and on a live stack.

A case is ``<slug>.yaml`` (documents as upstream writes them), ``<slug>.expected.yaml`` (``source``, ``upstream``,
optional ``difference``, ``refused``, ``pods``, ``nodes``, ``quotas``, ``submitted``) and optionally
``<slug>.config.yaml``; the format is in tests/conformance/README.md.

Both runs reduce a log to the same *outcome*: the documents refused (by the door, or by the quota-manager's
validation of quota trees, where upstream's webhook refuses them), the facts of the last decision of each object,
what the node side derived for each node, the status last written on each ElasticQuota, and each pod as the door
recorded it (after the ClusterColocationProfiles). The simulator applies the documents one by one; the live
stack records the cluster (Nodes, Devices, NodeMetrics, quotas), then the pods already running on nodes (with the
cluster objects that follow them), and then every other document up to the next ``AdvanceClock`` at once, each part
handled before the next is recorded, as ``allot apply -f`` does, and moves a manual clock the way the simulator does (timers fire
at their own time, in order), so a case's outcome must not depend on how fast the services handle what they receive
or in which order the pipeline's stages get to it.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import yaml

from allot_bus.names import BusNames
from allot_contracts import kube
from allot_contracts.envelope import NewEvent, RecordedEvent
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.quantity import QuantityError, parse_quantity
from allot_eventstore.clock import ManualClock
from allot_intake.documents import load_documents
from allot_intake.manifests import Door, Input, Verdict, to_input
from allot_runtime.processor import timer_fired, timer_producer
from allot_sim.scenario import load_config
from allot_sim.simulator import SIM_NS, Simulation
from allot_stack.logtools import wait_idle
from allot_testing.stack import InProcessStack
from allot_views.decisions import QUOTA_REFUSALS, Decision, decisions

__all__ = [
    "Case",
    "Outcome",
    "cases",
    "check_expected",
    "decision_facts",
    "live",
    "outcome_of",
    "segments",
    "simulate",
]

REQUIRED = ("source", "upstream")
KNOWN_KEYS = frozenset({*REQUIRED, "difference", "refused", "pods", "nodes", "quotas", "submitted"})


@dataclass(frozen=True)
class Case:
    path: Path

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.stem}"

    @property
    def expected(self) -> dict[str, Any]:
        data = yaml.safe_load(self.path.with_name(self.path.stem + ".expected.yaml").read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{self.name}: the expected file must be a mapping")
        return data

    @property
    def configs(self) -> dict[str, JsonObject]:
        config = self.path.with_name(self.path.stem + ".config.yaml")
        return load_config(str(config)) if config.exists() else {}


def cases(root: Path) -> list[Case]:
    """Every case under ``root`` (a scenario with an expected file beside it), sorted by feature and name."""
    return [
        Case(p)
        for p in sorted(root.rglob("*.yaml"))
        if not p.name.endswith((".expected.yaml", ".config.yaml"))
        and p.with_name(p.stem + ".expected.yaml").exists()
    ]


class Facts(TypedDict):
    """What a user reads off one decision (:func:`decision_facts`); only what the decision has is there."""

    outcome: str
    node: NotRequired[str]
    gpu: NotRequired[list[int]]
    rdma: NotRequired[list[int]]
    vfs: NotRequired[list[str]]
    gpu_memory: NotRequired[JsonValue]
    cpuset: NotRequired[JsonValue]
    numa: NotRequired[list[int]]
    reservation: NotRequired[str]
    codes: NotRequired[list[str]]
    message: NotRequired[str]
    annotations: NotRequired[JsonObject]


class NodeFacts(TypedDict):
    """A node's last ``node.allocatable_updated``: what the node-side decisions derived."""

    allocatable: JsonObject
    numa: JsonValue
    cpu_normalization_ratio: JsonValue
    amplification: JsonValue
    degraded: JsonValue


class QuotaStatus(TypedDict):
    """What a status sync wrote on one ElasticQuota: its annotations (JSON values parsed) and ``status.used``."""

    annotations: JsonObject
    used: JsonObject


@dataclass
class Outcome:
    refused: dict[str, str] = field(default_factory=dict)  # "<Kind> <name>" -> the door's messages
    pods: dict[str, Facts] = field(default_factory=dict)  # object -> facts of its last decision
    nodes: dict[str, NodeFacts] = field(default_factory=dict)  # node -> last node.allocatable_updated
    quotas: dict[str, QuotaStatus] = field(default_factory=dict)  # "<ns>/<name>" -> status last synced
    submitted: dict[str, JsonObject] = field(default_factory=dict)  # pod -> its manifest as recorded


# --- reading a log -----------------------------------------------------------------------------------------------------
def decision_facts(decision: Decision) -> Facts:
    """What a user reads off one decision: outcome, node, device minors, VFs, cpuset, NUMA nodes, reservation,
    reasons, and the written annotations."""
    out: Facts = {"outcome": decision["outcome"]}
    if decision["node"] is not None:
        out["node"] = decision["node"]
    annotations = decision["annotations"]
    allocated = annotations.get("scheduling.koordinator.sh/device-allocated", {})
    for kind in ("gpu", "rdma"):
        if kind in allocated:
            out[kind] = [entry["minor"] for entry in allocated[kind]]
    vfs = [
        vf["busID"] for entry in allocated.get("rdma", []) for vf in entry.get("extension", {}).get("vfs", [])
    ]
    if vfs:
        out["vfs"] = vfs
    if "gpu" in allocated:
        out["gpu_memory"] = allocated["gpu"][0]["resources"].get("koordinator.sh/gpu-memory")
    status = annotations.get("scheduling.koordinator.sh/resource-status", {})
    if "cpuset" in status:
        out["cpuset"] = status["cpuset"]
    if "numaNodeResources" in status:
        out["numa"] = [zone["node"] for zone in status["numaNodeResources"]]
    reservation = annotations.get("scheduling.koordinator.sh/reservation-allocated")
    if reservation:
        out["reservation"] = reservation["name"]
    if decision["outcome"] != "Scheduled":
        out["codes"] = decision["codes"]
        out["message"] = decision["message"]
    if annotations:
        out["annotations"] = annotations
    return out


def _quota_status(patch: JsonObject) -> QuotaStatus:
    """What a status sync wrote on one ElasticQuota: its annotations (JSON values parsed) and ``status.used``."""
    annotations = _object(_object(patch.get("metadata")).get("annotations"))
    return {
        "annotations": {k: json.loads(v) if isinstance(v, str) else v for k, v in annotations.items()},
        "used": dict(_object(_object(patch.get("status")).get("used"))),
    }


def _object(value: JsonValue) -> JsonObject:
    """``value`` when it is a JSON object; an empty one for an absent (or other) value."""
    return value if isinstance(value, dict) else {}


def outcome_of(records: Iterable[RecordedEvent], refused: dict[str, str]) -> Outcome:
    records = list(records)
    outcome = Outcome(refused=dict(refused))
    refusals = tuple(f"{kind}/" for kind, _ in QUOTA_REFUSALS.values())  # `refused` below says what they are
    for decision in decisions(records):  # the last decision per object wins
        if not decision["pod"].startswith(refusals):
            outcome.pods[decision["pod"]] = decision_facts(decision)
    deleting: set[str] = set()  # quota streams whose last input was a deletion
    for record in records:
        if record.type in ("pod.submitted", "pod.observed"):
            outcome.submitted[record.stream_id.removeprefix("pod:")] = record.payload_dict()["manifest"]
        elif record.type in (
            "quota.applied",
            "quota.deleted",
            "quotaprofile.applied",
            "quotaprofile.deleted",
        ):
            (deleting.add if record.type.endswith("deleted") else deleting.discard)(record.stream_id)
        elif record.type in QUOTA_REFUSALS:
            kind, field_name = QUOTA_REFUSALS[record.type]
            p = record.payload_dict()
            ref = p[field_name]
            label = (
                f"{'Delete ' if record.stream_id in deleting else ''}{kind} {ref['namespace']}/{ref['name']}"
            )
            outcome.refused[label] = "\n".join(str(FieldIssue(**issue)) for issue in p["errors"])
        elif record.type == "quota.status_synced":
            for key, patch in record.payload_dict()["patches"].items():
                outcome.quotas[key] = _quota_status(patch)
        elif record.type == "node.allocatable_updated":
            p = record.payload_dict()
            outcome.nodes[p["name"]] = {
                "allocatable": dict(p["allocatable"]),
                "numa": p.get("numa") or {},
                "cpu_normalization_ratio": p.get("cpu_normalization_ratio", "1.00"),
                "amplification": p.get("amplification") or {},
                "degraded": p.get("degraded", False),
            }
    return outcome


# --- running ------------------------------------------------------------------------------------------------------------
def admit(case: Case) -> tuple[list[Input], dict[str, str]]:
    """The door's verdicts on the case's documents, in order: the inputs to record and the refusals."""
    verdicts = Door(quotas=set()).check_all(load_documents(str(case.path)))
    refused = {_label(v): "\n".join(str(i) for i in v.issues) for v in verdicts if v.issues}
    return [to_input(v.document) for v in verdicts if not v.issues], refused


def _label(verdict: Verdict) -> str:
    ref = verdict.document.ref
    return f"{verdict.document.kind} {ref.key}"


# The cluster a workload is submitted to: what a user (or Kubernetes) has in place before pods arrive.
CLUSTER_KINDS = frozenset(
    {
        "Node",
        "Device",
        "NodeResourceTopology",
        "NodeMetric",
        "ConfigMap",
        "ElasticQuota",
        "ElasticQuotaProfile",
        "PriorityClass",
        "Namespace",
        "ClusterColocationProfile",
    }
)


def _stage(item: Input) -> int:
    """0: a cluster object (Node, Device, NodeMetric, quota, ...); 1: a pod already running on a node (what the
    scheduler observes rather than decides); 2: anything else (what asks for a decision)."""
    kind = item.document.kind
    if kind in CLUSTER_KINDS:
        return 0
    return 1 if kind == "Pod" and kube.spec_of(item.document.body).get("nodeName") else 2


def segments(inputs: list[Input]) -> Iterator[tuple[list[Input], float | None]]:
    """What the live stack records at once: the inputs between two clock moves, each run split where it moves on to
    a later stage — its leading cluster objects (Nodes, Devices, NodeMetrics, quotas, ...); then the pods already
    running on nodes, with whatever cluster objects follow them (their NodeMetrics); then everything from the first
    object that asks for a decision on — each with the clock move that follows it (0 between the parts, None at the
    end). The services handle each part before the next is recorded, as in a cluster where the nodes, and the
    running pods' usage, are in place before a new pod arrives."""
    batch: list[Input] = []
    stage = 0
    for item in inputs:
        if item.advance_seconds is not None:
            yield batch, item.advance_seconds
            batch, stage = [], 0
            continue
        reached = _stage(item)
        if batch and reached > stage:
            yield batch, 0.0
            batch = []
        stage = max(stage, reached)
        batch.append(item)
    yield batch, None


def simulate(case: Case) -> tuple[Simulation, Outcome]:
    inputs, refused = admit(case)
    sim = Simulation(case.configs)
    with contextlib.redirect_stderr(io.StringIO()):
        for item in inputs:
            sim.apply(item)
    return sim, outcome_of(sim.store.events, refused)


# --- checking -----------------------------------------------------------------------------------------------------------
def _matches(got: Facts, want: JsonObject) -> list[str]:
    wrong: list[str] = []
    for key, value in want.items():
        if key == "message_contains":
            if str(value) not in str(got.get("message", "")):
                wrong.append(f"message {got.get('message')!r} does not contain {value!r}")
        elif key == "annotations":
            have = got.get("annotations", {})
            for name, expected in _object(value).items():
                if have.get(name) != expected:
                    wrong.append(f"annotation {name}: {have.get(name)!r} != {expected!r}")
        elif got.get(key) != value:
            wrong.append(f"{key}: {got.get(key)!r} != {value!r}")
    return wrong


def _same_amount(have: Any, want: Any) -> bool:
    """Equal as written, or the same quantity (``36000000000`` is ``35156250Ki``, ``57600m`` is ``57.6``)."""
    if str(have) == str(want):
        return True
    try:
        return have is not None and parse_quantity(str(have)) == parse_quantity(str(want))
    except QuantityError:
        return False


def _node_matches(got: Mapping[str, object], want: JsonObject, path: str = "") -> list[str]:
    wrong: list[str] = []
    for key, value in want.items():
        have = got.get(key)
        if isinstance(value, dict):
            wrong += _node_matches(have if isinstance(have, dict) else {}, value, f"{path}{key}.")
        elif not _same_amount(have, value):
            wrong.append(f"{path}{key}: {have!r} != {value!r}")
    return wrong


def _subset(got: Any, want: Any, path: str) -> list[str]:
    """Where ``got`` differs from ``want``: maps key by key (``null`` wants the key absent), anything else equal."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: {got!r} is not a mapping"]
        wrong: list[str] = []
        for key, value in want.items():
            where = f"{path}.{key}"
            if value is None:
                if key in got:
                    wrong.append(f"{where}: {got[key]!r}, expected absent")
            elif key not in got:
                wrong.append(f"{where}: absent, expected {value!r}")
            else:
                wrong += _subset(got[key], value, where)
        return wrong
    return [] if got == want else [f"{path}: {got!r} != {want!r}"]


def check_expected(case: Case, outcome: Outcome) -> list[str]:
    """Every way ``outcome`` differs from the case's expected file (empty: it conforms)."""
    expected = case.expected
    problems = [f"the expected file lacks {k!r}" for k in REQUIRED if not expected.get(k)]
    problems += [f"unknown key {k!r} in the expected file" for k in expected if k not in KNOWN_KEYS]
    want_refused: dict[str, str] = expected.get("refused") or {}
    for label, part in want_refused.items():
        if label not in outcome.refused:
            problems.append(f"{label}: expected to be refused ({part!r}), it was admitted")
        elif str(part) not in outcome.refused[label]:
            problems.append(f"{label}: refused with {outcome.refused[label]!r}, expected {part!r} in it")
    problems += [
        f"{label}: refused unexpectedly: {why}"
        for label, why in outcome.refused.items()
        if label not in want_refused
    ]
    want_pods: dict[str, JsonObject] = expected.get("pods") or {}
    for pod, want in want_pods.items():
        if pod not in outcome.pods:
            problems.append(f"{pod}: no decision (expected {want})")
            continue
        problems += [f"{pod}: {w}" for w in _matches(outcome.pods[pod], want)]
    problems += [
        f"{pod}: a decision nobody expected: {facts}"
        for pod, facts in outcome.pods.items()
        if pod not in want_pods
    ]
    for pod, want in (expected.get("submitted") or {}).items():
        if pod not in outcome.submitted:
            problems.append(f"{pod}: not recorded (expected {want})")
            continue
        problems += _subset(outcome.submitted[pod], want, f"{pod} as recorded")
    for node, want in (expected.get("nodes") or {}).items():
        if node not in outcome.nodes:
            problems.append(f"node {node}: nothing derived (expected {want})")
            continue
        problems += [f"node {node}: {w}" for w in _node_matches(outcome.nodes[node], want)]
    for quota, want in (expected.get("quotas") or {}).items():
        if quota not in outcome.quotas:
            problems.append(f"quota {quota}: no status written (expected {want})")
            continue
        problems += [f"quota {quota}: {w}" for w in _quota_matches(outcome.quotas[quota], want)]
    return problems


def _nonzero(value: Any) -> Any:
    """A ResourceList without its zero quantities, as upstream compares quota status (``quotav1.RemoveZeros``)."""
    if not isinstance(value, dict):
        return value
    return {k: str(v) for k, v in value.items() if parse_quantity(str(v)) != 0}


def _quota_matches(got: QuotaStatus, want: JsonObject) -> list[str]:
    """Each expected annotation equals the written one and ``used`` equals ``status.used``, ResourceLists compared
    without their zero quantities (``{"cpu": "0"}`` is ``{}``), as upstream's status sync compares them."""
    wrong: list[str] = []
    for name, value in _object(want.get("annotations")).items():
        have = got["annotations"].get(name)
        if _nonzero(have) != _nonzero(value):
            wrong.append(f"annotation {name}: {have!r} != {value!r}")
    if "used" in want and _nonzero(got["used"]) != _nonzero(want["used"]):
        wrong.append(f"status.used: {got['used']!r} != {want['used']!r}")
    return wrong


# --- live ---------------------------------------------------------------------------------------------------------------
async def live(
    case: Case, database_url: str, nats_url: str, names: BusNames, *, timeout: float = 60
) -> Outcome:
    """The case on the relay and the seven services against real PostgreSQL and NATS: each run of documents between
    two clock moves is recorded at once; the clock moves as the simulator's does (every timer that falls due on the
    way fires at its own time, in order, once the services have handled everything before it)."""
    inputs, refused = admit(case)
    clock = ManualClock()
    async with InProcessStack(database_url, nats_url, names, case.configs, clock=clock) as stack:
        store = stack.store
        fired: set[tuple[str, int, int]] = set()
        applied = 0
        for batch, move in segments(inputs):
            news = []
            for item in batch:
                applied += 1
                news += [
                    NewEvent(
                        stream_id=stream,
                        event=event,
                        event_id=str(uuid.uuid5(SIM_NS, f"{applied}/{index}")),
                    )
                    for index, (stream, event) in enumerate(item.events)
                ]
            if news:
                await store.append(news, producer="api")
            if move:
                applied += 1  # the simulator counts a clock move as an applied document
            await _advance(stack, clock, fired, 0.0 if move is None else move, timeout)
        records = [r async for r in store.iterate()]
    return outcome_of(records, refused)


async def _advance(
    stack: InProcessStack,
    clock: ManualClock,
    fired: set[tuple[str, int, int]],
    seconds: float,
    timeout: float,
) -> None:
    target = clock.now_us + round(seconds * 1_000_000)
    while True:
        await wait_idle(stack.store, timeout=timeout, settle=0.1)
        due = []
        for name, runtime in stack.runtimes.items():
            async with runtime.lock:
                deadline, consumed = runtime.host.deadline(), runtime.host.timers
            if deadline is not None and deadline <= target and (name, deadline, consumed) not in fired:
                due.append((deadline, name, consumed))
        if not due:
            break
        deadline, name, consumed = min(due)
        fired.add((name, deadline, consumed))
        clock.now_us = max(clock.now_us, deadline)
        await stack.store.append([timer_fired(name, deadline, consumed)], producer=timer_producer(name))
    clock.now_us = target
