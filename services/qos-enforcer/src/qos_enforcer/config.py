"""qos-enforcer's decision config: Koordinator's NodeSLO strategies, the kubelet's cgroup naming and HAMi-core's
paths, read from the service's config file (``ALLOT_CONFIG_FILE``) and checked field by field.

Shape (every key optional; the defaults are Koordinator's, which leave the co-location strategies disabled until a
cluster enables them)::

    cgroupDriver: systemd            # or cgroupfs: the kubelet's --cgroup-driver
    cgroupRoot: ""                   # the kubelet's --cgroup-root ("" = /)
    containerRuntime: containerd     # or cri-o, docker: how container cgroups are named
    cpusetSharePools: true           # LS pods on the CPUs no LSE/LSR pod holds, BE pods on those no LSE pod holds
    hamiCore: {libvgpuHostPath, cacheHostDir, lockHostDir, containerDir, ldSoPreloadHostPath}
    resourceUsedThresholdWithBE:     # NodeSLO: BE suppression and eviction
      enable: false
      cpuSuppressThresholdPercent: 65
      cpuSuppressPolicy: cfsQuota    # cpuset is Koordinator's default; only cfsQuota is enforced here
      cpuSuppressMinMilli: 1000      # the BE cgroup keeps at least this much CPU
      suppressUpdateThresholdMilli: 100
      memoryEvictThresholdPercent: 70
      memoryEvictLowerPercent: 68    # default: threshold - 2
    resourceQOSStrategy:             # NodeSLO: per QoS class
      lsrClass|lsClass|beClass|lseClass:
        cpuQOS: {enable, groupIdentity, schedIdle}
        memoryQOS: {enable, minLimitPercent, lowLimitPercent, throttlingPercent}
        resctrlQOS: {enable, catRangeStartPercent, catRangeEndPercent, mbaPercent}
    cpuBurstStrategy: {policy: none|cpuBurstOnly|cfsQuotaBurstOnly|auto, cpuBurstPercent: 1000}
    agent: {...}                     # the node agent's IO settings (adapters/agent.py), not part of decisions

Refused (``InvalidConfig`` naming the field path): unknown keys, values of the wrong type or out of range.
Warnings (accepted, reported in every plan): Koordinator NodeSLO settings read but not enforced here, each with the
reason (``cpuset`` suppression policy, ``cfsQuotaBurst``, the Alibaba Cloud Linux memcg knobs, CPU-satisfaction
eviction, ``blkioQOS``, ``networkQOS``, ``systemClass``, ``systemStrategy``, …), so a NodeSLO copied from a cluster
is accepted whole and says what it does not get.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.errors import InvalidConfig
from allot_contracts.issues import FieldIssue
from qos_enforcer.cdi import HamiCorePaths

QOS_CLASSES: Final = ("LSE", "LSR", "LS", "BE")
_CLASS_KEYS: Final = {"lseClass": "LSE", "lsrClass": "LSR", "lsClass": "LS", "beClass": "BE"}
DRIVERS: Final = ("systemd", "cgroupfs")
RUNTIMES: Final = ("containerd", "cri-o", "docker")
BURST_POLICIES: Final = ("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto")
ENVIRONMENT: Final = (
    "ALLOT_QOS_AGENT",
    "ALLOT_QOS_DRY_RUN",
)  # read by the node agent besides the common settings
# Koordinator settings accepted in the config and pod annotations but not enforced here, with the reason.
_ALINUX_MEMCG: Final = "an Alibaba Cloud Linux memcg feature mainline kernels lack"
UNENFORCED_MEMORY_QOS: Final = {
    "wmarkRatio": f"asynchronous memory reclaim watermark, {_ALINUX_MEMCG}",
    "wmarkScalePermill": f"asynchronous memory reclaim watermark, {_ALINUX_MEMCG}",
    "wmarkMinAdj": f"min watermark grading, {_ALINUX_MEMCG}",
    "priorityEnable": f"memcg OOM priority, {_ALINUX_MEMCG}",
    "priority": f"memcg OOM priority, {_ALINUX_MEMCG}",
    "oomKillGroup": "killing the whole cgroup on OOM (memory.oom.group) is not planned yet",
}
UNENFORCED_CPU_QOS: Final = {
    "coreExpeller": "core scheduling cookies are not set (the agent writes no prctl)"
}
UNENFORCED_THRESHOLDS: Final = {
    "cpuEvictBEUsageThresholdPercent": "CPU-satisfaction eviction of BE pods is not decided here",
    "cpuEvictBESatisfactionLowerPercent": "CPU-satisfaction eviction of BE pods is not decided here",
    "cpuEvictBESatisfactionUpperPercent": "CPU-satisfaction eviction of BE pods is not decided here",
    "cpuEvictTimeWindowSeconds": "CPU-satisfaction eviction of BE pods is not decided here",
    "cpuEvictPolicy": "CPU-satisfaction eviction of BE pods is not decided here",
    "memoryEvictPolicy": "eviction always orders BE pods by priority, then memory use",
}
UNENFORCED_CLASS: Final = {
    "blkioQOS": "block IO weights and limits (blkio/io controller) are not planned",
    "networkQOS": "network bandwidth QoS (terway-qos) is not planned",
}
UNENFORCED_STRATEGY: Final = {
    "policies": "the CPU policy is always group identity where the kernel has it; core scheduling is not planned",
    "systemClass": "system daemons' cgroups (SYSTEM QoS) are not enforced",
    "cgroupRoot": "the kubepods root cgroup's own QoS is not enforced",
}
UNENFORCED_TOP: Final = {
    "systemStrategy": "node sysctls (min_free_kbytes, watermark_scale_factor, memcg reaping) are not written",
    "hostApplications": "host applications' cgroups are not enforced",
    "extensions": "NodeSLO extensions are not read",
}


class CpuQos(msgspec.Struct, frozen=True, kw_only=True):
    enable: bool = False
    group_identity: int | None = None
    sched_idle: int | None = None


class MemoryQos(msgspec.Struct, frozen=True, kw_only=True):
    enable: bool = False
    min_limit_percent: int = 0
    low_limit_percent: int = 0
    throttling_percent: int = 0


class ResctrlQos(msgspec.Struct, frozen=True, kw_only=True):
    enable: bool = False
    cat_start: int = 0
    cat_end: int = 100
    mba_percent: int = 100


class ClassQos(msgspec.Struct, frozen=True, kw_only=True):
    cpu: CpuQos = CpuQos()
    memory: MemoryQos = MemoryQos()
    resctrl: ResctrlQos = ResctrlQos()


# Koordinator's recommended values per class (NodeSLO defaults), each strategy disabled until enabled.
DEFAULT_CLASSES: Final = {
    "LSR": ClassQos(
        cpu=CpuQos(group_identity=2), resctrl=ResctrlQos(cat_start=0, cat_end=100, mba_percent=100)
    ),
    "LS": ClassQos(
        cpu=CpuQos(group_identity=2), resctrl=ResctrlQos(cat_start=0, cat_end=100, mba_percent=100)
    ),
    "BE": ClassQos(
        cpu=CpuQos(group_identity=-1), resctrl=ResctrlQos(cat_start=0, cat_end=30, mba_percent=100)
    ),
}


class Thresholds(msgspec.Struct, frozen=True, kw_only=True):
    enable: bool = False
    cpu_suppress_percent: int = 65
    cpu_suppress_policy: str = "cfsQuota"
    cpu_suppress_min_milli: int = 1000
    suppress_update_milli: int = 100
    memory_evict_percent: int = 70
    memory_evict_lower_percent: int = 68


class Burst(msgspec.Struct, frozen=True, kw_only=True):
    policy: str = "none"
    cpu_burst_percent: int = 1000


HamiPaths = HamiCorePaths  # hamiCore: the paths the CDI specs of HAMi-core isolated containers use


class QosConfig(msgspec.Struct, frozen=True, kw_only=True):
    cgroup_driver: str = "systemd"
    cgroup_root: str = ""
    runtime: str = "containerd"
    share_pools: bool = True
    hami: HamiPaths = HamiPaths()
    thresholds: Thresholds = Thresholds()
    classes: dict[str, ClassQos] = msgspec.field(default_factory=lambda: dict(DEFAULT_CLASSES))
    burst: Burst = Burst()
    warnings: tuple[FieldIssue, ...] = ()

    def qos_of(self, koord_qos: str) -> ClassQos | None:
        """The strategy of a Koordinator QoS class (LSE falls back to LSR's; SYSTEM has none)."""
        if koord_qos == "LSE":
            return self.classes.get("LSE") or self.classes.get("LSR")
        return self.classes.get(koord_qos)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Reader:
    def __init__(self) -> None:
        self.issues: list[FieldIssue] = []
        self.warnings: list[FieldIssue] = []

    def mapping(
        self, raw: Any, path: str, allowed: set[str], unenforced: Mapping[str, str] | None = None
    ) -> Mapping[str, object]:
        """``raw`` as a mapping; keys outside ``allowed`` are refused, except Koordinator's own keys this project reads
        but does not enforce (``unenforced``: key -> why), which are warnings."""
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            self.issues.append(FieldIssue(path=path, message="must be a mapping"))
            return {}
        for key in sorted(set(map(str, raw)) & set(unenforced or {})):
            self.warnings.append(
                FieldIssue(
                    path=_join(path, key),
                    message=f"not enforced here: {(unenforced or {})[key]}",
                    code="NotSupported",
                    value=str(raw[key]),
                )
            )
        for key in sorted(set(map(str, raw)) - allowed - set(unenforced or {})):
            self.issues.append(
                FieldIssue(
                    path=_join(path, key),
                    message=f"unknown field; supported: {', '.join(sorted(allowed))}",
                    code="NotSupported",
                )
            )
        return raw

    def boolean(self, raw: Mapping[str, object], key: str, path: str, default: bool) -> bool:
        value = raw.get(key, default)
        if not isinstance(value, bool):
            self.issues.append(
                FieldIssue(path=_join(path, key), message="must be true or false", value=str(value))
            )
            return default
        return value

    def integer(
        self, raw: Mapping[str, object], key: str, path: str, default: int, low: int, high: int
    ) -> int:
        value = raw.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            self.issues.append(
                FieldIssue(
                    path=_join(path, key), message=f"must be an integer in {low}..{high}", value=str(value)
                )
            )
            return default
        return value

    def choice(
        self, raw: Mapping[str, object], key: str, path: str, default: str, allowed: tuple[str, ...]
    ) -> str:
        value = raw.get(key, default)
        if value not in allowed:
            self.issues.append(
                FieldIssue(
                    path=_join(path, key),
                    message=f"must be one of {', '.join(allowed)}",
                    code="NotSupported",
                    value=str(value),
                )
            )
            return default
        return str(value)

    def path(self, raw: Mapping[str, object], key: str, path: str, default: str | None) -> str | None:
        value = raw.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or not value.startswith("/") or ".." in value.split("/"):
            self.issues.append(
                FieldIssue(
                    path=_join(path, key), message="must be an absolute path without '..'", value=str(value)
                )
            )
            return default
        return value


def _int_or(value: object, default: int) -> int:
    """``value`` when it is an integer (the reader then checks its range), else ``default`` (it reports the value)."""
    return value if isinstance(value, int) else default


def _class(r: _Reader, raw: Any, path: str, base: ClassQos) -> ClassQos:
    m = r.mapping(raw, path, {"cpuQOS", "memoryQOS", "resctrlQOS"}, UNENFORCED_CLASS)
    cpu_raw = r.mapping(
        m.get("cpuQOS"), f"{path}.cpuQOS", {"enable", "groupIdentity", "schedIdle"}, UNENFORCED_CPU_QOS
    )
    mem_raw = r.mapping(
        m.get("memoryQOS"),
        f"{path}.memoryQOS",
        {"enable", "minLimitPercent", "lowLimitPercent", "throttlingPercent"},
        UNENFORCED_MEMORY_QOS,
    )
    rdt_raw = r.mapping(
        m.get("resctrlQOS"),
        f"{path}.resctrlQOS",
        {"enable", "catRangeStartPercent", "catRangeEndPercent", "mbaPercent"},
    )
    p = f"{path}.cpuQOS"
    gi = cpu_raw.get("groupIdentity", base.cpu.group_identity)
    idle = cpu_raw.get("schedIdle", base.cpu.sched_idle)
    cpu = CpuQos(
        enable=r.boolean(cpu_raw, "enable", p, base.cpu.enable),
        group_identity=None if gi is None else r.integer(cpu_raw, "groupIdentity", p, _int_or(gi, 0), -1, 2),
        sched_idle=None if idle is None else r.integer(cpu_raw, "schedIdle", p, _int_or(idle, 0), 0, 1),
    )
    p = f"{path}.memoryQOS"
    memory = MemoryQos(
        enable=r.boolean(mem_raw, "enable", p, base.memory.enable),
        min_limit_percent=r.integer(mem_raw, "minLimitPercent", p, base.memory.min_limit_percent, 0, 100),
        low_limit_percent=r.integer(mem_raw, "lowLimitPercent", p, base.memory.low_limit_percent, 0, 100),
        throttling_percent=r.integer(mem_raw, "throttlingPercent", p, base.memory.throttling_percent, 0, 100),
    )
    p = f"{path}.resctrlQOS"
    resctrl = ResctrlQos(
        enable=r.boolean(rdt_raw, "enable", p, base.resctrl.enable),
        cat_start=r.integer(rdt_raw, "catRangeStartPercent", p, base.resctrl.cat_start, 0, 100),
        cat_end=r.integer(rdt_raw, "catRangeEndPercent", p, base.resctrl.cat_end, 0, 100),
        mba_percent=r.integer(rdt_raw, "mbaPercent", p, base.resctrl.mba_percent, 0, 100),
    )
    if resctrl.cat_start >= resctrl.cat_end:
        r.issues.append(
            FieldIssue(
                path=f"{p}.catRangeEndPercent",
                message="must be greater than catRangeStartPercent",
                value=str(resctrl.cat_end),
            )
        )
    return ClassQos(cpu=cpu, memory=memory, resctrl=resctrl)


def parse_config(config: Mapping[str, object] | None) -> QosConfig:
    """The decision config; raises ``InvalidConfig`` listing every problem with its path."""
    r = _Reader()
    top = r.mapping(
        {k: v for k, v in (config or {}).items() if k not in ("scope", "agent")},
        "",
        {
            "cgroupDriver",
            "cgroupRoot",
            "containerRuntime",
            "cpusetSharePools",
            "hamiCore",
            "resourceUsedThresholdWithBE",
            "resourceQOSStrategy",
            "cpuBurstStrategy",
        },
        UNENFORCED_TOP,
    )
    hami = _hami(r, top)
    thresholds = _thresholds(r, top)
    classes = _classes(r, top)
    burst = _burst(r, top)
    root = _cgroup_root(r, top)
    result = QosConfig(
        cgroup_driver=r.choice(top, "cgroupDriver", "", "systemd", DRIVERS).strip(),
        cgroup_root=root.strip("/"),
        runtime=r.choice(top, "containerRuntime", "", "containerd", RUNTIMES),
        share_pools=r.boolean(top, "cpusetSharePools", "", True),
        hami=hami,
        thresholds=thresholds,
        classes=classes,
        burst=burst,
        warnings=tuple(r.warnings),
    )
    if r.issues:
        raise InvalidConfig(r.issues, subject="qos-enforcer config")
    return result


def _hami(r: _Reader, top: Mapping[str, object]) -> HamiPaths:
    """hamiCore: the host and container paths of the HAMi-core library and its caches."""
    hami_raw = r.mapping(
        top.get("hamiCore"),
        "hamiCore",
        {"libvgpuHostPath", "cacheHostDir", "lockHostDir", "containerDir", "ldSoPreloadHostPath"},
    )
    d = HamiPaths()
    hami = HamiPaths(
        libvgpu_host_path=r.path(hami_raw, "libvgpuHostPath", "hamiCore", d.libvgpu_host_path) or "",
        cache_host_dir=r.path(hami_raw, "cacheHostDir", "hamiCore", d.cache_host_dir) or "",
        lock_host_dir=r.path(hami_raw, "lockHostDir", "hamiCore", d.lock_host_dir) or "",
        container_dir=r.path(hami_raw, "containerDir", "hamiCore", d.container_dir) or "",
        ld_so_preload_host_path=r.path(hami_raw, "ldSoPreloadHostPath", "hamiCore", None),
    )
    return hami


def _thresholds(r: _Reader, top: Mapping[str, object]) -> Thresholds:
    """resourceUsedThresholdWithBE: BE CPU suppression and memory-pressure eviction."""
    p = "resourceUsedThresholdWithBE"
    t_raw = r.mapping(
        top.get(p),
        p,
        {
            "enable",
            "cpuSuppressThresholdPercent",
            "cpuSuppressPolicy",
            "cpuSuppressMinMilli",
            "suppressUpdateThresholdMilli",
            "memoryEvictThresholdPercent",
            "memoryEvictLowerPercent",
        },
        UNENFORCED_THRESHOLDS,
    )
    evict = r.integer(t_raw, "memoryEvictThresholdPercent", p, 70, 1, 100)
    thresholds = Thresholds(
        enable=r.boolean(t_raw, "enable", p, False),
        cpu_suppress_percent=r.integer(t_raw, "cpuSuppressThresholdPercent", p, 65, 0, 100),
        cpu_suppress_policy=r.choice(t_raw, "cpuSuppressPolicy", p, "cfsQuota", ("cfsQuota", "cpuset")),
        cpu_suppress_min_milli=r.integer(t_raw, "cpuSuppressMinMilli", p, 1000, 0, 2**31),
        suppress_update_milli=r.integer(t_raw, "suppressUpdateThresholdMilli", p, 100, 0, 2**31),
        memory_evict_percent=evict,
        memory_evict_lower_percent=r.integer(
            t_raw, "memoryEvictLowerPercent", p, max(evict - 2, 0), 0, evict
        ),
    )
    if thresholds.enable and thresholds.cpu_suppress_policy == "cpuset":
        r.warnings.append(
            FieldIssue(
                path=f"{p}.cpuSuppressPolicy",
                message="the cpuset suppression policy is not enforced here; the BE cgroup's CFS quota is",
                code="NotSupported",
                value="cpuset",
            )
        )
    return thresholds


def _classes(r: _Reader, top: Mapping[str, object]) -> dict[str, ClassQos]:
    """resourceQOSStrategy: the per-QoS-class settings, over the defaults."""
    q_raw = r.mapping(
        top.get("resourceQOSStrategy"), "resourceQOSStrategy", set(_CLASS_KEYS), UNENFORCED_STRATEGY
    )
    classes = dict(DEFAULT_CLASSES)
    for key, qos in _CLASS_KEYS.items():
        if key in q_raw:
            classes[qos] = _class(r, q_raw[key], f"resourceQOSStrategy.{key}", classes.get(qos, ClassQos()))
    return classes


def _burst(r: _Reader, top: Mapping[str, object]) -> Burst:
    """cpuBurstStrategy: the CPU burst policy and percent."""
    b_raw = r.mapping(
        top.get("cpuBurstStrategy"),
        "cpuBurstStrategy",
        {"policy", "cpuBurstPercent"},
        {
            "cfsQuotaBurstPercent": "cfsQuotaBurst (raising a throttled pod's quota) is not decided here",
            "cfsQuotaBurstPeriodSeconds": "cfsQuotaBurst (raising a throttled pod's quota) is not decided here",
            "sharePoolThresholdPercent": "bursting is not held back by share-pool usage",
        },
    )
    burst = Burst(
        policy=r.choice(b_raw, "policy", "cpuBurstStrategy", "none", BURST_POLICIES),
        cpu_burst_percent=r.integer(b_raw, "cpuBurstPercent", "cpuBurstStrategy", 1000, 0, 10000),
    )
    if burst.policy in ("cfsQuotaBurstOnly", "auto"):
        r.warnings.append(
            FieldIssue(
                path="cpuBurstStrategy.policy",
                message="cfsQuotaBurst (raising a throttled pod's quota) is not enforced here; cpu.cfs_burst_us is",
                code="NotSupported",
                value=burst.policy,
            )
        )
    return burst


def _cgroup_root(r: _Reader, top: Mapping[str, object]) -> str:
    """cgroupRoot: a cgroup path without '..' ("" when refused)."""
    root = top.get("cgroupRoot", "")
    if not isinstance(root, str) or ".." in root.split("/"):
        r.issues.append(
            FieldIssue(path="cgroupRoot", message="must be a cgroup path without '..'", value=str(root))
        )
        root = ""
    return root


class AgentSettings(msgspec.Struct, frozen=True, kw_only=True):
    enabled: bool = True
    dry_run: bool = False
    cgroup_fs_root: str = "/sys/fs/cgroup"
    mountinfo: str = "/proc/self/mountinfo"
    cdi_spec_dir: str = "/var/run/cdi"
    resctrl_root: str = "/sys/fs/resctrl"
    proc_root: str = "/proc"
    poll_seconds: float = 0.5
    reconcile_seconds: float = 30.0
    retry_seconds: float = 5.0
    reconcile_record_seconds: float = 600.0
    sample_seconds: float = 5.0
    sample_record_seconds: float = 60.0
    sample_change_percent: int = 5


_KEYS = {
    "enabled": "enabled",
    "dryRun": "dry_run",
    "cgroupFsRoot": "cgroup_fs_root",
    "mountinfo": "mountinfo",
    "cdiSpecDir": "cdi_spec_dir",
    "resctrlRoot": "resctrl_root",
    "procRoot": "proc_root",
    "pollSeconds": "poll_seconds",
    "reconcileSeconds": "reconcile_seconds",
    "retrySeconds": "retry_seconds",
    "reconcileRecordSeconds": "reconcile_record_seconds",
    "sampleSeconds": "sample_seconds",
    "sampleRecordSeconds": "sample_record_seconds",
    "sampleChangePercent": "sample_change_percent",
}


def agent_settings(config: Mapping[str, object] | None, environ: Mapping[str, str]) -> AgentSettings:
    """The node agent's settings: the ``agent:`` block of the config (camelCase keys, documented in
    ``adapters/agent.py``), with ``ALLOT_QOS_DRY_RUN`` and ``ALLOT_QOS_AGENT`` (on/off) from ``environ``."""
    raw = (config or {}).get("agent") or {}
    env = environ
    if not isinstance(raw, Mapping):
        raise InvalidConfig(
            [FieldIssue(path="agent", message="must be a mapping")], subject="qos-enforcer config"
        )
    unknown = sorted(set(map(str, raw)) - set(_KEYS))
    if unknown:
        raise InvalidConfig(
            [
                FieldIssue(path=f"agent.{k}", message=f"unknown field; supported: {', '.join(sorted(_KEYS))}")
                for k in unknown
            ],
            subject="qos-enforcer config",
        )
    values = {_KEYS[k]: v for k, v in raw.items()}
    if env.get("ALLOT_QOS_DRY_RUN", "").lower() in ("1", "true", "yes"):
        values["dry_run"] = True
    switch = env.get("ALLOT_QOS_AGENT", "").lower()
    if switch in ("0", "false", "no", "off"):
        values["enabled"] = False
    elif switch in ("1", "true", "yes", "on"):
        values["enabled"] = True
    elif switch:
        raise InvalidConfig(
            [FieldIssue(path="ALLOT_QOS_AGENT", message=f"must be on or off, got {switch!r}")],
            subject="qos-enforcer",
        )
    try:
        return msgspec.convert(values, AgentSettings)
    except msgspec.ValidationError as error:
        raise InvalidConfig(
            [FieldIssue(path="agent", message=str(error))], subject="qos-enforcer config"
        ) from error
