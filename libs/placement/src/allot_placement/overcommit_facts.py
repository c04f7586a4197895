"""What the overcommit calculation reads of a node and its pods, and the co-location strategy that applies to a node.

Responsibility: ``node_facts`` reads a registered Node (and its NodeResourceTopology) as Koordinator's slo-controller
does — capacity, allocatable, the ``node.koordinator.sh/reservation`` annotation, the amplification and
colocation-strategy annotations, the CPU basic info — turning what cannot be read into notes; ``node_strategy``
resolves the ``ColocationStrategy`` of a node (``pkg/util/sloconfig.GetNodeColocationStrategy`` and the
noderesource reconciler's ``isColocationCfgDisabled``). Pure.

Rules:
- Reservation annotation: ``resources`` as quantities; ``reservedCPUs`` (a cpuset) reserves that many cores and
  replaces the cpu of ``resources`` (``pkg/util.GetNodeReservationResources``).
- Strategy of a node: the cluster strategy, the first ``nodeConfigs`` entry whose selector matches merged over it,
  then the ``node.koordinator.sh/colocation-strategy`` annotation merged over that, then the ratio labels
  ``node.koordinator.sh/cpu-reclaim-ratio``, ``memory-reclaim-ratio``, ``mid-static-cpu-reserved-ratio``,
  ``mid-static-memory-reserved-ratio`` (fractions, ``0.7`` → 70 %; a label that is not a number ≥ 0 is ignored,
  with a note). Co-location is on for the node only when the cluster strategy enables it as well: the cluster's
  ``enable: false`` switches it off everywhere, whatever a node entry says.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import msgspec

from allot_contracts import kube
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects import names as n
from allot_contracts.objects.colocation import (
    ColocationConfig,
    ColocationStrategy,
    parse_ratio,
    parse_strategy,
)
from allot_contracts.objects.cpuset import CpusetError, parse_cpuset
from allot_contracts.quantity import QuantityError, to_canonical

__all__ = [
    "ANN_AMPLIFICATION",
    "ANN_COLOCATION_STRATEGY",
    "ANN_CPU_BASIC_INFO",
    "LABEL_NORMALIZATION_ENABLED",
    "Amounts",
    "CpuBasicInfo",
    "NodeFacts",
    "PodFacts",
    "node_facts",
    "node_strategy",
]

LABEL_NORMALIZATION_ENABLED: Final = "node.koordinator.sh/cpu-normalization-enabled"
ANN_AMPLIFICATION: Final = "node.koordinator.sh/resource-amplification-ratio"
ANN_COLOCATION_STRATEGY: Final = "node.koordinator.sh/colocation-strategy"
ANN_CPU_BASIC_INFO: Final = "node.koordinator.sh/cpu-basic-info"
RATIO_LABELS: Final = (
    ("node.koordinator.sh/cpu-reclaim-ratio", "cpu_reclaim_threshold_percent"),
    ("node.koordinator.sh/memory-reclaim-ratio", "memory_reclaim_threshold_percent"),
    ("node.koordinator.sh/mid-static-cpu-reserved-ratio", "mid_static_cpu_reserved_percent"),
    ("node.koordinator.sh/mid-static-memory-reserved-ratio", "mid_static_memory_reserved_percent"),
)
Amounts = dict[str, int]


class CpuBasicInfo(msgspec.Struct, frozen=True, kw_only=True):
    model: str = ""
    hyper_threading: bool = False
    turbo: bool = False


class NodeFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the calculation reads of a Node (and of its NodeResourceTopology)."""

    name: str
    labels: dict[str, str] = {}
    capacity: Amounts = {}
    allocatable: Amounts = {}
    reservation: Amounts = {}
    amplification: dict[str, str] | None = None  # the node annotation, as ratio text
    strategy_override: dict[str, object] | None = None  # the colocation-strategy annotation, as JSON
    cpu: CpuBasicInfo | None = None
    zones: dict[int, Amounts] = {}  # NUMA zone -> allocatable
    notes: tuple[str, ...] = ()  # annotations that could not be read


class PodFacts(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    uid: str = ""
    priority_class: str = ""
    qos: str = ""
    requests: Amounts = {}
    numa: tuple[int, ...] = ()  # the NUMA nodes its allocation is bound to (none: it shares all of them)


def _amounts(raw: Any) -> Amounts:
    out: Amounts = {}
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            try:
                out[str(k)] = to_canonical(str(k), v)
            except (QuantityError, TypeError):
                continue
    return out


def _json(value: Any) -> Any:
    if isinstance(value, str):
        return json.loads(value)
    return value


def _reservation(raw: Any, notes: list[str]) -> Amounts:
    try:
        value = _json(raw) or {}
        reservation = _amounts(value.get("resources"))
        cpus = value.get("reservedCPUs")
        if cpus:
            reservation[n.CPU] = len(parse_cpuset(str(cpus))) * 1000
        return reservation
    except (ValueError, AttributeError, CpusetError):
        notes.append(f"annotation {n.ANN_NODE_RESERVATION} is not a node reservation; not read")
        return {}


def node_read(
    manifest: Mapping[str, JsonValue], share: Callable[[JsonValue], JsonValue] | None = None
) -> JsonObject:
    """What :func:`node_facts` reads of a Node, for a service that keeps every Node to read again later: its name,
    labels and annotations, its capacity and allocatable (each passed through ``share``, to hold the ones nodes of a
    pool repeat once). A Node's status also lists its images, conditions and addresses, often most of its size."""
    meta = kube.meta(manifest)
    status = manifest.get("status")
    status = status if isinstance(status, Mapping) else {}
    kept: JsonObject = {
        "metadata": {key: meta[key] for key in ("name", "labels", "annotations") if key in meta}
    }
    amounts: JsonObject = {
        key: status[key] if share is None else share(status[key]) for key in _AMOUNTS if key in status
    }
    if amounts:
        kept["status"] = amounts
    return kept


_AMOUNTS: Final = ("capacity", "allocatable")


def node_facts(
    manifest: Mapping[str, JsonValue], topology: Mapping[str, JsonValue] | None, zones: Mapping[int, Amounts]
) -> NodeFacts:
    """The facts of a registered Node (and its NodeResourceTopology); unreadable annotations become notes."""
    meta = kube.meta(manifest)
    status = manifest.get("status")
    status = status if isinstance(status, Mapping) else {}
    ann = meta.get("annotations")
    ann = ann if isinstance(ann, Mapping) else {}
    notes: list[str] = []
    capacity = _amounts(status.get("capacity")) or _amounts(status.get("allocatable"))
    allocatable = _amounts(status.get("allocatable")) or dict(capacity)
    reservation = _reservation(ann[n.ANN_NODE_RESERVATION], notes) if n.ANN_NODE_RESERVATION in ann else {}
    amplification = None
    if ANN_AMPLIFICATION in ann:
        issues: list[FieldIssue] = []
        try:
            raw = _json(ann[ANN_AMPLIFICATION])
            amplification = {
                str(k): r
                for k, v in sorted((raw or {}).items())
                if (r := parse_ratio(v, f"{ANN_AMPLIFICATION}.{k}", issues, low="0")) is not None
            }
        except (ValueError, AttributeError):
            notes.append(f"annotation {ANN_AMPLIFICATION} is not valid JSON; not read")
        notes.extend(str(i) for i in issues)
    override = None
    if ANN_COLOCATION_STRATEGY in ann:
        try:
            override = _json(ann[ANN_COLOCATION_STRATEGY])
            if not isinstance(override, dict):
                raise ValueError("not an object")
        except ValueError:
            override = None
            notes.append(f"annotation {ANN_COLOCATION_STRATEGY} is not a JSON object; not read")
    return NodeFacts(
        name=str(meta.get("name") or ""),
        labels=kube.labels(manifest),
        capacity=capacity,
        allocatable=allocatable,
        reservation=reservation,
        amplification=amplification,
        strategy_override=override,
        cpu=_cpu_basic_info(topology, notes),
        zones={int(z): dict(v) for z, v in zones.items()},
        notes=tuple(notes),
    )


def _cpu_basic_info(topology: Mapping[str, JsonValue] | None, notes: list[str]) -> CpuBasicInfo | None:
    tann = kube.annotations_of(topology) if topology is not None else {}
    if ANN_CPU_BASIC_INFO not in tann:
        return None
    try:
        info = _json(tann[ANN_CPU_BASIC_INFO]) or {}
        return CpuBasicInfo(
            model=str(info.get("cpuModel") or ""),
            hyper_threading=info.get("hyperThreadEnabled") is True,
            turbo=info.get("turboEnabled") is True,
        )
    except (ValueError, AttributeError):
        notes.append(f"topology annotation {ANN_CPU_BASIC_INFO} is not valid JSON; not read")
        return None


def node_strategy(config: ColocationConfig, node: NodeFacts) -> tuple[ColocationStrategy, list[str]]:
    """The co-location strategy of ``node`` (module docstring) and notes on what of the node could not be read."""
    strategy = config.for_node(node.labels)[0]
    notes: list[str] = []
    if node.strategy_override is not None:
        issues: list[FieldIssue] = []
        strategy = parse_strategy(node.strategy_override, ANN_COLOCATION_STRATEGY, issues, [], strategy)
        notes.extend(str(i) for i in issues)
    fields: dict[str, int] = {}
    for label, field in RATIO_LABELS:
        if label not in node.labels:
            continue
        try:
            value = Decimal(node.labels[label])
            if not value.is_finite() or value < 0:
                raise InvalidOperation
        except InvalidOperation:
            notes.append(f"label {label}: {node.labels[label]!r} is not a ratio >= 0; not read")
            continue
        fields[field] = int(value * 100)
    if fields:
        strategy = msgspec.structs.replace(strategy, **fields)
    if strategy.enable and not config.strategy.enable:
        strategy = msgspec.structs.replace(strategy, enable=False)
        notes.append("co-location is disabled for the cluster (colocation-config enable: false)")
    return strategy, notes
