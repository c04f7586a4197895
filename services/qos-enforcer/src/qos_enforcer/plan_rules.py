"""The rules of the enforcement plan, one reader per setting: the pod's annotations over its QoS class's strategy.

Each returns what its rule decides with the source named (``why``), and appends a warning for whatever is read but
not enforced. :mod:`qos_enforcer.plan` applies them to a pod's cgroups; :mod:`qos_enforcer.plan_node` to the node.
Pure (no IO, no clock).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final, TypeGuard, TypeVar

from allot_contracts import gpu_isolation
from allot_contracts.events.qos import CgroupTarget, GpuIsolation, GpuShare, ResctrlGroup
from allot_contracts.issues import FieldIssue, annotation_path, label_path
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects import names as n
from qos_enforcer import cdi
from qos_enforcer.config import (
    UNENFORCED_CPU_QOS,
    UNENFORCED_MEMORY_QOS,
    ClassQos,
    CpuQos,
    MemoryQos,
    QosConfig,
)
from qos_enforcer.podfacts import ANN_CPU_BURST, ANN_CPU_QOS, ANN_MEMORY_QOS, ANN_RESCTRL, NodeFacts, PodFacts

_T = TypeVar("_T")

PERIOD_US: Final = 100_000
MIB: Final = 1 << 20
BATCH_CPU: Final = n.BATCH_CPU
BATCH_MEMORY: Final = n.BATCH_MEMORY


class Target:
    """Settings being gathered for one cgroup."""

    def __init__(self, scope: str, path: str, container: str = "") -> None:
        self.scope, self.path, self.container = scope, path, container
        self.settings: JsonObject = {}
        self.why: dict[str, str] = {}

    def set(self, knob: str, value: JsonValue, why: str) -> None:
        self.settings[knob] = value
        self.why[knob] = why

    def done(self) -> CgroupTarget | None:
        if not self.settings:
            return None
        return CgroupTarget(
            scope=self.scope,
            path=self.path,
            container=self.container,
            settings=dict(sorted(self.settings.items())),
            why=dict(sorted(self.why.items())),
        )


def total(values: Iterable[int | None]) -> int | None:
    """The sum, or None when any part is unlimited (None)."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _unread(
    raw: Mapping[str, JsonValue],
    key: str,
    known: set[str],
    unenforced: Mapping[str, str],
    warnings: list[FieldIssue],
) -> None:
    """Warnings for the fields of a pod annotation that are read but not acted on."""
    path = annotation_path(key)
    for name in sorted(set(map(str, raw)) - known):
        why = unenforced.get(name, "unknown field; ignored")
        message = why if name not in unenforced else f"not enforced here: {why}"
        warnings.append(
            FieldIssue(path=f"{path}.{name}", message=message, code="NotSupported", value=str(raw[name]))
        )


def cpu_qos_of(
    pod: PodFacts, strategy: ClassQos | None, warnings: list[FieldIssue]
) -> tuple[CpuQos | None, str]:
    base = strategy.cpu if strategy is not None else None
    override = pod.cpu_qos
    if override is None:
        return (
            (base, f"resourceQOSStrategy {pod.koord_qos} cpuQOS")
            if base is not None and base.enable
            else (None, "")
        )
    path = annotation_path(ANN_CPU_QOS)
    _unread(override, ANN_CPU_QOS, {"enable", "groupIdentity", "schedIdle"}, UNENFORCED_CPU_QOS, warnings)
    gi, idle = override.get("groupIdentity"), override.get("schedIdle")
    if gi is not None and (not isinstance(gi, int) or isinstance(gi, bool) or not -1 <= gi <= 2):
        warnings.append(
            FieldIssue(path=f"{path}.groupIdentity", message="must be an integer in -1..2", value=str(gi))
        )
        gi = None
    if idle is not None and (not isinstance(idle, int) or idle not in (0, 1)):
        warnings.append(FieldIssue(path=f"{path}.schedIdle", message="must be 0 or 1", value=str(idle)))
        idle = None
    if override.get("enable") is False:
        return None, ""
    return (
        CpuQos(
            enable=True,
            group_identity=gi if gi is not None else (base.group_identity if base else None),
            sched_idle=idle if idle is not None else (base.sched_idle if base else None),
        ),
        f"pod annotation {ANN_CPU_QOS}",
    )


def memory_qos_of(
    pod: PodFacts, strategy: ClassQos | None, warnings: list[FieldIssue]
) -> tuple[MemoryQos | None, str]:
    base = strategy.memory if strategy is not None else MemoryQos()
    override = pod.memory_qos
    if override is None:
        return (base, f"resourceQOSStrategy {pod.koord_qos} memoryQOS") if base.enable else (None, "")
    _unread(
        override,
        ANN_MEMORY_QOS,
        {"enable", "policy", "minLimitPercent", "lowLimitPercent", "throttlingPercent"},
        UNENFORCED_MEMORY_QOS,
        warnings,
    )
    policy = override.get("policy", "auto")
    if policy == "none" or override.get("enable") is False:
        return None, ""
    path = annotation_path(ANN_MEMORY_QOS)
    values = {}
    for key, field in (
        ("minLimitPercent", "min_limit_percent"),
        ("lowLimitPercent", "low_limit_percent"),
        ("throttlingPercent", "throttling_percent"),
    ):
        value = override.get(key, getattr(base, field))
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
            warnings.append(
                FieldIssue(path=f"{path}.{key}", message="must be an integer in 0..100", value=str(value))
            )
            value = getattr(base, field)
        values[field] = value
    return MemoryQos(enable=True, **values), f"pod annotation {ANN_MEMORY_QOS}"


def burst_percent(pod: PodFacts, config: QosConfig, warnings: list[FieldIssue]) -> tuple[int | None, str]:
    policy, percent, source = config.burst.policy, config.burst.cpu_burst_percent, "cpuBurstStrategy"
    if pod.cpu_burst is not None:
        path = annotation_path(ANN_CPU_BURST)
        _unread(
            pod.cpu_burst,
            ANN_CPU_BURST,
            {"policy", "cpuBurstPercent"},
            {
                "cfsQuotaBurstPercent": "cfsQuotaBurst (raising a throttled pod's quota) is not decided here",
                "cfsQuotaBurstPeriodSeconds": "cfsQuotaBurst (raising a throttled pod's quota) is not decided here",
            },
            warnings,
        )
        chosen = pod.cpu_burst.get("policy", policy)
        policy = chosen if isinstance(chosen, str) else ""
        raw = pod.cpu_burst.get("cpuBurstPercent", percent)
        if not isinstance(raw, int) or isinstance(raw, bool) or not 0 <= raw <= 10000:
            warnings.append(
                FieldIssue(
                    path=f"{path}.cpuBurstPercent", message="must be an integer in 0..10000", value=str(raw)
                )
            )
        else:
            percent = raw
        source = f"pod annotation {ANN_CPU_BURST}"
    if policy not in ("cpuBurstOnly", "auto"):
        return None, ""
    return percent, source


def memory_values(
    request: int, limit: int | None, node_memory: int, mq: MemoryQos
) -> tuple[int | None, int | None, int | str | None]:
    low_min = request * mq.min_limit_percent // 100 if mq.min_limit_percent else None
    low = request * mq.low_limit_percent // 100 if mq.low_limit_percent else None
    high: int | str | None
    if mq.throttling_percent == 0:
        high = "max"
    elif limit:
        high = limit * mq.throttling_percent // 100
    else:
        high = node_memory * mq.throttling_percent // 100 if node_memory else None
    if low_min is not None and low is not None and low < low_min:
        low = low_min
    if low_min is not None and isinstance(high, int) and high < low_min:
        high = low_min
    return low_min, low, high


def gpu_plan(
    pod: PodFacts,
    node: NodeFacts,
    config: QosConfig,
    warnings: list[FieldIssue],
) -> list[GpuIsolation]:
    if pod.isolation_provider != gpu_isolation.HAMI_CORE or not pod.gpus:
        if pod.isolation_provider and pod.isolation_provider != gpu_isolation.HAMI_CORE:
            warnings.append(
                FieldIssue(
                    path=label_path(n.LABEL_GPU_ISOLATION_PROVIDER),
                    message="only HAMi-core isolation is enforced; this pod's GPUs are not isolated",
                    code="NotSupported",
                    value=pod.isolation_provider,
                )
            )
        return []
    if node.labels.get(n.LABEL_GPU_ISOLATION_PROVIDER) != gpu_isolation.HAMI_CORE:
        warnings.append(
            FieldIssue(
                path=label_path(n.LABEL_GPU_ISOLATION_PROVIDER),
                message=f"the node {node.name} does not offer HAMi-core isolation; the pod's GPUs are not isolated",
                code="Forbidden",
                value=gpu_isolation.HAMI_CORE,
            )
        )
        return []
    shares: list[GpuShare] = []
    for gpu in pod.gpus:
        info = node.gpus.get(gpu.minor)
        uuid = gpu.id or (info.uuid if info is not None else "")
        memory = gpu.memory_bytes
        if not memory and gpu.ratio and info is not None and info.memory_bytes:
            memory = info.memory_bytes * gpu.ratio // 100
        if not uuid:
            warnings.append(
                FieldIssue(
                    path=annotation_path(n.ANN_DEVICE_ALLOCATED, f".gpu[minor={gpu.minor}]"),
                    message=f"no UUID for GPU minor {gpu.minor} (neither the allocation nor the node's Device lists "
                    "one); the pod's GPUs are not isolated",
                    code="Required",
                )
            )
            return []
        shares.append(GpuShare(uuid=uuid, minor=gpu.minor, memory_mib=memory // MIB, cores=gpu.core or 100))
    paths = config.hami
    out: list[GpuIsolation] = []
    for container in pod.containers:
        if not container.gpu:
            continue
        try:
            device = cdi.gpu_device(
                pod.uid,
                container.name,
                [cdi.GpuShare(uuid=s.uuid, memory_mib=s.memory_mib, cores=s.cores) for s in shares],
                paths,
                disable_control=container.disable_control,
            )
        except cdi.CdiError as error:
            warnings.append(
                FieldIssue(
                    path=annotation_path(n.ANN_DEVICE_ALLOCATED),
                    message=f"container {container.name}: {error}; not isolated",
                    code="InvalidField",
                )
            )
            continue
        env = dict(item.split("=", 1) for item in device.spec["devices"][0]["containerEdits"]["env"])
        out.append(
            GpuIsolation(
                container=container.name,
                device=device.qualified_name,
                gpus=shares,
                env=env,
                annotations=device.pod_annotation,
                disable_control=container.disable_control,
            )
        )
    return out


def resctrl_of(
    pod: PodFacts, strategy: ClassQos | None, warnings: list[FieldIssue]
) -> tuple[str, ResctrlGroup | None]:
    if pod.resctrl is not None:
        group = parse_resctrl(pod.resctrl, f"allot-pod-{pod.uid}", warnings)
        if group is not None:
            return group.group, group
    if strategy is not None and strategy.resctrl.enable:
        return class_group(pod.koord_qos), None
    return "", None


def class_group(koord_qos: str) -> str:
    return f"allot-{'LSR' if koord_qos == 'LSE' else koord_qos}"


def _whole(value: JsonValue) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _range(value: JsonValue, path: str, warnings: list[FieldIssue]) -> tuple[int, int] | None:
    start, end = value if isinstance(value, list) and len(value) == 2 else (None, None)
    if _whole(start) and _whole(end) and 0 <= start < end <= 100:
        return start, end
    warnings.append(
        FieldIssue(
            path=path, message="must be [start, end] percentages, 0 <= start < end <= 100", value=str(value)
        )
    )
    return None


def _percent(value: JsonValue, path: str, warnings: list[FieldIssue]) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100:
        return value
    warnings.append(FieldIssue(path=path, message="must be a percentage in 1..100", value=str(value)))
    return None


def _entries(value: JsonValue) -> list[JsonValue]:
    """A ``schemataPerCache`` list (empty when missing or not a list)."""
    return value if isinstance(value, list) else []


def _schemata(
    section: JsonValue,
    key: str,
    where: str,
    read: Callable[[JsonValue, str, list[FieldIssue]], _T | None],
    warnings: list[FieldIssue],
) -> tuple[_T | None, dict[str, _T]]:
    """One part of a resctrl annotation (``llc`` or ``mb``): its ``schemata.<key>`` for every cache and its
    ``schemataPerCache`` entries' ``<key>`` by cache id, each read by ``read`` (None, with a warning, when unusable)."""
    if not isinstance(section, Mapping):
        return None, {}
    schemata = section.get("schemata")
    whole = None
    if isinstance(schemata, Mapping) and key in schemata:
        whole = read(schemata[key], f"{where}.schemata.{key}", warnings)
    per_cache: dict[str, _T] = {}
    for i, entry in enumerate(_entries(section.get("schemataPerCache"))):
        if isinstance(entry, Mapping) and isinstance(entry.get("cacheID"), int):
            found = read(entry.get(key), f"{where}.schemataPerCache[{i}].{key}", warnings)
            if found is not None:
                per_cache[str(entry["cacheID"])] = found
    return whole, per_cache


def parse_resctrl(raw: Mapping[str, JsonValue], name: str, warnings: list[FieldIssue]) -> ResctrlGroup | None:
    """A pod's ``node.koordinator.sh/resctrl`` value (``{"llc": {"schemata": {"range": [a, b]}, "schemataPerCache":
    [{"cacheID", "range"}]}, "mb": {"schemata": {"percent": p}, "schemataPerCache": [{"cacheID", "percent"}]}}``) as
    the pod's own group; None (with warnings) when nothing in it is usable."""
    base = annotation_path(ANN_RESCTRL)
    _unread(raw, ANN_RESCTRL, {"llc", "mb"}, {}, warnings)
    llc, llc_per_cache = _schemata(raw.get("llc"), "range", f"{base}.llc", _range, warnings)
    mb, mb_per_cache = _schemata(raw.get("mb"), "percent", f"{base}.mb", _percent, warnings)
    per_cache: dict[str, JsonObject] = {}
    for cache, (low, high) in llc_per_cache.items():
        per_cache.setdefault(cache, {})["llc"] = [low, high]
    for cache, share in mb_per_cache.items():
        per_cache.setdefault(cache, {})["mb"] = share
    usable = llc is not None or mb is not None or bool(per_cache)
    start, end = llc if llc is not None else (0, 100)
    percent = mb if mb is not None else 100
    if not usable:
        warnings.append(FieldIssue(path=base, message="names no usable LLC range or MB percent; ignored"))
        return None
    return ResctrlGroup(
        group=name,
        llc_start=start,
        llc_end=end,
        mb_percent=percent,
        per_cache=dict(sorted(per_cache.items())),
    )
