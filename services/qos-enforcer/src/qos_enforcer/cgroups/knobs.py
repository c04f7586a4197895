"""The resource knobs Koordinator sets, their cgroup v1 and v2 files and value formats (pure: no IO).

:data:`KNOBS` is the single mapping table; :func:`plan` turns :class:`Settings` into an ordered list of
:class:`Write` for one cgroup directory on one hierarchy version, and :func:`canonical` is how a value read back
from the kernel is compared with the value written.

=================  =====================================  =====================================================
Setting            cgroup v1 file(s), in write order      cgroup v2 file
=================  =====================================  =====================================================
``cpuset_cpus``    ``cpuset.cpus``                        ``cpuset.cpus``
``cpu_quota``      ``cpu.cfs_period_us``,                 ``cpu.max`` (``"<quota|max> <period>"``)
                   ``cpu.cfs_quota_us`` (``-1`` = none)
``cpu_shares``     ``cpu.shares``                         ``cpu.weight`` (kernel conversion, below)
``cpu_burst_us``   ``cpu.cfs_burst_us`` (Linux >= 5.14)   ``cpu.max.burst`` (Linux >= 5.14)
``cpu_idle``       ``cpu.idle`` (Linux >= 5.15)           ``cpu.idle``
``cpu_bvt_warp_ns`` ``cpu.bvt_warp_ns`` (group identity:    ``cpu.bvt_warp_ns``
                   Alibaba Cloud Linux / Anolis kernels)
``memory_min``     refused: v1 has no protection knob     ``memory.min``
``memory_low``     ``memory.soft_limit_in_bytes``         ``memory.low``
``memory_high``    refused: v1 has no throttle limit      ``memory.high``
``memory_max``     ``memory.limit_in_bytes`` (``-1``)     ``memory.max``
=================  =====================================  =====================================================

Conversions and formats:

- CPU weight is the kernel's own shares<->weight mapping (``sched_weight_to_cgroup``): ``weight =
  clamp(round(shares * 100 / 1024), 1, 10000)``, so the v1 default 1024 is the v2 default 100. (runc's linear
  ``1 + (shares - 2) * 9999 / 262142`` is a different mapping and is not used.)
- ``memory_low`` on v1 is approximate: the soft limit only makes a group a later target of global reclaim, it does
  not protect memory the way ``memory.low`` does. ``memory_min`` and ``memory_high`` have no v1 file upstream
  (Alibaba Cloud Linux adds them; not supported here) and raise :class:`UnsupportedKnob`.
- ``cpu_burst_us`` and ``cpu_idle`` need newer kernels; when the file is absent the writer reports it.
- Memory values are bytes, or ``"max"`` for no limit; the kernel keeps them in pages, so a read-back is compared
  after rounding the written value down to the page size; v1 reads "no limit" as ``PAGE_COUNTER_MAX`` pages.
- ``cpuset.cpus`` is compared as a set (``"0-3"`` equals ``"0,1,2,3"``); ``cpu.max`` token by token.

Refused (``CgroupError``/:class:`UnsupportedKnob`): values out of the kernel's accepted range (shares 2..262144,
period 1000..1000000 us, quota >= 1000 us, burst <= quota, negative bytes), an empty or malformed cpuset, shares
together with ``cpu_idle=True`` (the kernel pins an idle group's weight), and a setting with no file on the
requested hierarchy version.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, Literal

import msgspec

from qos_enforcer.cgroups.mode import CgroupError

Version = Literal[1, 2]
Bytes = int | Literal["max"]
_CPULIST: Final = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")
_MEMORY_FILES: Final = frozenset(
    {
        "memory.min",
        "memory.low",
        "memory.high",
        "memory.max",
        "memory.soft_limit_in_bytes",
        "memory.limit_in_bytes",
    }
)
_CPULIST_FILES: Final = frozenset(
    {"cpuset.cpus", "cpuset.mems", "cpuset.effective_cpus", "cpuset.effective_mems"}
)


class Write(msgspec.Struct, frozen=True, kw_only=True):
    """Set ``file`` in the cgroup directory ``path`` (relative to the controller root) to ``value``."""

    path: str
    file: str
    value: str


class UnsupportedKnob(CgroupError):
    """A setting that has no file on the requested hierarchy version."""


class CpuQuota(msgspec.Struct, frozen=True, kw_only=True):
    """CFS bandwidth: ``quota_us`` of CPU time per ``period_us``; None means no limit."""

    quota_us: int | None
    period_us: int = 100_000


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Desired values for one cgroup; None leaves a knob untouched."""

    cpuset_cpus: str | None = None
    cpu_quota: CpuQuota | None = None
    cpu_shares: int | None = None
    cpu_burst_us: int | None = None
    cpu_idle: bool | None = None
    cpu_bvt_warp_ns: int | None = None
    memory_min: Bytes | None = None
    memory_low: Bytes | None = None
    memory_high: Bytes | None = None
    memory_max: Bytes | None = None


class Knob(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the mapping table: the files per version (empty = refused, with the reason) and the format."""

    v1: tuple[str, ...]
    v2: tuple[str, ...]
    format: Callable[[object, Version], tuple[str, ...]]
    v1_refusal: str = ""
    doc: str = ""


def cpulist(text: str) -> frozenset[int]:
    """The CPUs of a kernel list (``"0-3,8"``); raises on a malformed list."""
    text = text.strip()
    if not _CPULIST.fullmatch(text):
        raise CgroupError(f"cpu list {text!r} is not in the kernel list format (e.g. '0-3,8')")
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            raise CgroupError(f"cpu list {text!r}: range {part!r} runs backwards")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def format_cpulist(cpus: frozenset[int]) -> str:
    """The kernel's compact form of a CPU set (``{0,1,2,3,8}`` -> ``"0-3,8"``)."""
    ranges: list[tuple[int, int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], cpu)
        else:
            ranges.append((cpu, cpu))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def shares_to_weight(shares: int) -> int:
    """The kernel's conversion from v1 ``cpu.shares`` to v2 ``cpu.weight`` (round to nearest, clamp 1..10000)."""
    return min(max((shares * 100 + 512) // 1024, 1), 10_000)


def _int(value: object, name: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise CgroupError(f"{name}={value!r} is outside the kernel's accepted range {low}..{high}")
    return value


def _cpuset(value: object, version: Version) -> tuple[str, ...]:
    cpus = cpulist(str(value))
    return (format_cpulist(cpus),)


def _quota(value: object, version: Version) -> tuple[str, ...]:
    if not isinstance(value, CpuQuota):
        raise CgroupError(f"cpu_quota={value!r} is not a CpuQuota")
    period = _int(value.period_us, "cpu period (us)", 1000, 1_000_000)
    quota = None if value.quota_us is None else _int(value.quota_us, "cpu quota (us)", 1000, 2**53)
    if version == 1:
        return (str(period), "-1" if quota is None else str(quota))
    return (f"{'max' if quota is None else quota} {period}",)


def _shares(value: object, version: Version) -> tuple[str, ...]:
    shares = _int(value, "cpu shares", 2, 262_144)
    return (str(shares if version == 1 else shares_to_weight(shares)),)


def _burst(value: object, version: Version) -> tuple[str, ...]:
    return (str(_int(value, "cpu burst (us)", 0, 2**53)),)


def _idle(value: object, version: Version) -> tuple[str, ...]:
    if not isinstance(value, bool):
        raise CgroupError(f"cpu_idle={value!r} is not a bool")
    return ("1" if value else "0",)


def _bvt(value: object, version: Version) -> tuple[str, ...]:
    return (str(_int(value, "group identity (cpu.bvt_warp_ns)", -1, 2)),)


def _bytes(value: object, version: Version) -> tuple[str, ...]:
    if value == "max":
        return ("-1" if version == 1 else "max",)
    return (str(_int(value, "memory (bytes)", 0, 2**63 - 1)),)


KNOBS: Final[dict[str, Knob]] = {
    "cpuset_cpus": Knob(
        v1=("cpuset.cpus",), v2=("cpuset.cpus",), format=_cpuset, doc="CPUs the group may run on"
    ),
    "cpu_quota": Knob(
        v1=("cpu.cfs_period_us", "cpu.cfs_quota_us"),
        v2=("cpu.max",),
        format=_quota,
        doc="CFS bandwidth limit",
    ),
    "cpu_shares": Knob(v1=("cpu.shares",), v2=("cpu.weight",), format=_shares, doc="proportional CPU weight"),
    "cpu_burst_us": Knob(
        v1=("cpu.cfs_burst_us",), v2=("cpu.max.burst",), format=_burst, doc="unused quota carried over (us)"
    ),
    "cpu_idle": Knob(v1=("cpu.idle",), v2=("cpu.idle",), format=_idle, doc="SCHED_IDLE for the whole group"),
    "cpu_bvt_warp_ns": Knob(
        v1=("cpu.bvt_warp_ns",),
        v2=("cpu.bvt_warp_ns",),
        format=_bvt,
        doc="group identity (-1 BE .. 2 LS; kernels with the feature only)",
    ),
    "memory_min": Knob(
        v1=(),
        v2=("memory.min",),
        format=_bytes,
        v1_refusal="cgroup v1 has no hard memory protection (memory.min is v2-only)",
        doc="memory never reclaimed",
    ),
    "memory_low": Knob(
        v1=("memory.soft_limit_in_bytes",),
        v2=("memory.low",),
        format=_bytes,
        doc="best-effort protection (v1: soft limit, reclaimed later under global pressure)",
    ),
    "memory_high": Knob(
        v1=(),
        v2=("memory.high",),
        format=_bytes,
        v1_refusal="cgroup v1 has no throttling limit (memory.limit_in_bytes is the OOM limit, memory_max)",
        doc="throttle and reclaim above this",
    ),
    "memory_max": Knob(
        v1=("memory.limit_in_bytes",), v2=("memory.max",), format=_bytes, doc="hard limit (OOM above)"
    ),
}


def supported(setting: str, version: Version) -> str | None:
    """None when ``setting`` maps to a file on ``version``, else the reason it is refused."""
    knob = KNOBS.get(setting)
    if knob is None:
        return f"unknown setting {setting!r}"
    if not (knob.v1 if version == 1 else knob.v2):
        return knob.v1_refusal or f"{setting} has no cgroup v{version} file"
    return None


def plan(path: str, settings: Settings, version: Version) -> list[Write]:
    """The writes that realise ``settings`` in the cgroup ``path``, in table order: period before quota, quota
    before burst, shares before idle (idle off before shares). A quota lowered below the current burst is refused
    by the kernel until the burst write lands, so such a change converges on the next reconcile.
    Raises :class:`UnsupportedKnob` or ``CgroupError`` naming the path and the setting."""
    if settings.cpu_idle is True and settings.cpu_shares is not None:
        raise CgroupError(
            f"{path}: cpu_shares with cpu_idle=True: an idle group's weight is fixed by the kernel (cpu.shares reads"
            " 3, cpu.weight 1) and writes to it are rejected"
        )
    order = list(KNOBS)
    if settings.cpu_idle is False:  # the kernel refuses cpu.shares/cpu.weight while a group is idle
        order.remove("cpu_idle")
        order.insert(order.index("cpu_shares"), "cpu_idle")
    writes: list[Write] = []
    for setting in order:
        knob, value = KNOBS[setting], getattr(settings, setting)
        if value is None:
            continue
        if (reason := supported(setting, version)) is not None:
            raise UnsupportedKnob(f"{path}: {setting} on cgroup v{version}: {reason}")
        files = knob.v1 if version == 1 else knob.v2
        try:
            values = knob.format(value, version)
        except CgroupError as error:
            raise CgroupError(f"{path}: {setting}: {error}") from None
        writes.extend(Write(path=path, file=f, value=v) for f, v in zip(files, values, strict=True))
    if settings.cpu_burst_us and settings.cpu_quota is not None:
        quota = settings.cpu_quota.quota_us
        if quota is not None and settings.cpu_burst_us > quota:
            raise CgroupError(f"{path}: cpu burst {settings.cpu_burst_us}us exceeds the quota {quota}us")
    return writes


def canonical(file: str, text: str, page_size: int) -> str:
    """The comparable form of a knob value, as written or as read back from the kernel."""
    text = text.strip()
    if file in _CPULIST_FILES:
        return format_cpulist(cpulist(text)) if text else ""
    if file in _MEMORY_FILES:
        if text in ("max", "-1"):
            return "max"
        if not text.isdigit():
            return text
        value = int(text)
        if value >= (2**63 - 1) // page_size * page_size:  # v1 "no limit" is PAGE_COUNTER_MAX pages
            return "max"
        return str(value // page_size * page_size)
    if file == "cpu.max":
        return " ".join(text.split())
    if re.fullmatch(r"-?\d+", text):
        return str(int(text))
    return text


def same(file: str, desired: str, actual: str, page_size: int) -> bool:
    """Whether the kernel's ``actual`` value is what writing ``desired`` should leave (``cpu.max`` written as a
    bare ``max`` or quota keeps the existing period, so only the written tokens are compared)."""
    try:
        want, have = canonical(file, desired, page_size), canonical(file, actual, page_size)
    except CgroupError:
        return False
    if file == "cpu.max":
        tokens = want.split()
        return have.split()[: len(tokens)] == tokens
    return want == have
