"""Applying plans on the node: cgroup values, CDI spec files and resctrl groups, each write read back and reported.

:class:`Enforcer` is the node agent's IO core, synchronous and free of the bus so that it can be tested against a
temporary tree and against the machine's real cgroups:

- cgroups: each :class:`~allot_contracts.events.qos.CgroupTarget` knob becomes the v1 or v2 writes of
  :mod:`qos_enforcer.cgroups.knobs` for the detected hierarchy, applied by :class:`CgroupWriter` below the kubelet's
  pods cgroup only (anything else is refused); a knob the hierarchy has no file for is ``unsupported``. Pod cgroups
  are written before their containers'; a pod cgroup write refused while its children still hold wider values (a
  cpuset shrinking) is tried once more after them.
- CDI: every isolated container's spec is rebuilt from the plan (:func:`qos_enforcer.cdi.gpu_device`) and written
  atomically into the spec directory; specs of pods that are no longer planned are removed.
- resctrl: the groups of the node plan and of pods with their own group get their schemata; the pod's processes
  (``cgroup.procs`` of its cgroup and below) are added to its group's ``tasks``.

``dry_run`` computes the same writes and reports them as ``planned`` without touching anything.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from allot_contracts.events.qos import CgroupTarget, GpuIsolation, QosPlan, ResctrlGroup, WriteOutcome
from qos_enforcer import cdi
from qos_enforcer.cgroups.knobs import KNOBS, CpuQuota, Settings, Version, Write, plan, supported
from qos_enforcer.cgroups.mode import CgroupError, CgroupLayout
from qos_enforcer.cgroups.paths import absolute_dir, controller_of
from qos_enforcer.cgroups.writer import Applied, CgroupFiles, CgroupWriter
from qos_enforcer.config import HamiPaths
from qos_enforcer.resctrl import ResctrlFs


def _value(knob: str, raw: Any) -> Any:
    if knob == "cpu_quota" and isinstance(raw, dict):
        return CpuQuota(quota_us=raw.get("quota_us"), period_us=int(raw.get("period_us", 100_000)))
    return raw


def _outcome(applied: Applied, target: str) -> WriteOutcome:
    return WriteOutcome(
        kind="cgroup",
        target=target,
        outcome=applied.outcome or ("applied" if applied.ok else "failed"),
        value=applied.write.value,
        readback=applied.readback,
        found=applied.found if applied.outcome == "applied" else "",
        error=applied.error,
    )


class Enforcer:
    def __init__(
        self,
        *,
        layout: CgroupLayout | None,
        base: str,
        cdi_dir: str,
        hami: HamiPaths,
        resctrl: ResctrlFs | None = None,
        layout_error: str = "",
        dry_run: bool = False,
        files: CgroupFiles | None = None,
    ) -> None:
        self.layout = layout
        self.layout_error = layout_error or ("no cgroup hierarchy" if layout is None else "")
        self.writer = CgroupWriter(layout, base, files=files) if layout is not None else None
        self.cdi_dir = cdi_dir
        self.hami = hami
        self.resctrl = resctrl
        self.dry_run = dry_run

    # -- cgroups ---------------------------------------------------------------------------------------------------

    @property
    def version(self) -> Version:
        return self.layout.version if self.layout is not None else 2

    def _file(self, write: Write) -> str:
        if self.layout is None:
            return posixpath.join(write.path, write.file)
        try:
            return posixpath.join(
                absolute_dir(self.layout, write.path, controller_of(write.file)), write.file
            )
        except CgroupError:
            return posixpath.join(write.path, write.file)

    def writes(self, target: CgroupTarget) -> tuple[list[Write], list[WriteOutcome]]:
        """The file writes of one target on this hierarchy, and the knobs it cannot take (``unsupported``)."""
        writes: list[Write] = []
        refused: list[WriteOutcome] = []
        order = list(KNOBS)
        if target.settings.get("cpu_idle") is False:  # leave idle before setting a weight
            order.remove("cpu_idle")
            order.insert(order.index("cpu_shares"), "cpu_idle")
        for knob in order:
            if knob not in target.settings:
                continue
            where = f"{target.path} {knob}"
            if (reason := supported(knob, self.version)) is not None:
                refused.append(
                    WriteOutcome(
                        kind="cgroup",
                        target=where,
                        outcome="unsupported",
                        error=f"cgroup v{self.version}: {reason}",
                    )
                )
                continue
            try:
                settings = msgspec.structs.replace(Settings(), **{knob: _value(knob, target.settings[knob])})
                writes += plan(target.path, settings, self.version)
            except (CgroupError, TypeError, ValueError) as error:
                refused.append(WriteOutcome(kind="cgroup", target=where, outcome="refused", error=str(error)))
        return writes, refused

    def _apply_targets(self, targets: Sequence[CgroupTarget], *, check_only: bool) -> list[WriteOutcome]:
        out: list[WriteOutcome] = []
        ordered = [t for t in targets if t.scope != "container"] + [
            t for t in targets if t.scope == "container"
        ]
        retry: list[Write] = []
        for target in ordered:
            writes, refused = self.writes(target)
            if not check_only:
                out += refused
            if self.dry_run:
                out += [
                    WriteOutcome(kind="cgroup", target=self._file(w), outcome="planned", value=w.value)
                    for w in writes
                ]
                continue
            if self.writer is None:
                out += [
                    WriteOutcome(
                        kind="cgroup",
                        target=self._file(w),
                        outcome="missing",
                        value=w.value,
                        error=self.layout_error,
                    )
                    for w in writes
                ]
                continue
            if check_only:
                writes = self.writer.drift(writes, skip_unsupported=True)
            for applied in self.writer.apply(writes):
                if (
                    target.scope != "container"
                    and applied.outcome in ("rejected", "failed")
                    and any(t.scope == "container" for t in ordered)
                ):
                    retry.append(applied.write)  # children first, then the pod again
                    continue
                if check_only and applied.outcome == "unchanged":
                    continue
                out.append(_outcome(applied, self._file(applied.write)))
        if retry and self.writer is not None:
            out += [_outcome(a, self._file(a.write)) for a in self.writer.apply(retry)]
        return out

    # -- CDI -------------------------------------------------------------------------------------------------------

    def _device(self, uid: str, gpu: GpuIsolation) -> cdi.CdiDevice:
        return cdi.gpu_device(
            uid,
            gpu.container,
            [cdi.GpuShare(uuid=g.uuid, memory_mib=g.memory_mib, cores=g.cores) for g in gpu.gpus],
            self.hami,
            disable_control=gpu.disable_control,
        )

    def _apply_cdi(self, uid: str, gpus: Sequence[GpuIsolation], *, check_only: bool) -> list[WriteOutcome]:
        out: list[WriteOutcome] = []
        for gpu in gpus:
            target = posixpath.join(self.cdi_dir, f"{cdi.SPEC_PREFIX}{uid}_{gpu.container}.json")
            try:
                device = self._device(uid, gpu)
                target = posixpath.join(self.cdi_dir, device.file_name)
                if self.dry_run:
                    out.append(
                        WriteOutcome(
                            kind="cdi", target=target, outcome="planned", value=device.qualified_name
                        )
                    )
                    continue
                cdi.ensure_host_dirs(device)
                written = cdi.write_spec(self.cdi_dir, device)
            except cdi.CdiError as error:
                out.append(WriteOutcome(kind="cdi", target=target, outcome="failed", error=str(error)))
                continue
            if written or not check_only:
                out.append(
                    WriteOutcome(
                        kind="cdi",
                        target=target,
                        outcome="applied" if written else "unchanged",
                        value=device.qualified_name,
                        found="(absent or different)" if written and check_only else "",
                    )
                )
        return out

    def prune(self, live_uids: Iterable[str]) -> tuple[str, ...]:
        """Remove the spec files of pods that are no longer planned (nothing in dry run)."""
        if self.dry_run:
            return ()
        try:
            return cdi.prune_pods(self.cdi_dir, live_uids)
        except cdi.CdiError:
            return ()

    # -- resctrl ---------------------------------------------------------------------------------------------------

    def pod_pids(self, plan: QosPlan) -> list[int]:
        """The processes of the pod (its cgroup and every cgroup below it)."""
        if self.layout is None:
            return []
        pod = next((t for t in plan.cgroups if t.scope == "pod"), None)
        if pod is None:
            return []
        try:
            root = absolute_dir(self.layout, pod.path, "cpu")
        except CgroupError:
            return []
        pids: set[int] = set()
        for directory, _, files in os.walk(root):
            if "cgroup.procs" in files:
                try:
                    with open(posixpath.join(directory, "cgroup.procs"), encoding="utf-8") as handle:
                        pids.update(int(p) for p in handle.read().split())
                except (OSError, ValueError):
                    continue
        return sorted(pids)

    def _apply_resctrl(self, plan: QosPlan, *, check_only: bool) -> list[WriteOutcome]:
        if not plan.resctrl:
            return []
        if self.resctrl is None or self.dry_run:
            return (
                []
                if check_only
                else [
                    WriteOutcome(
                        kind="resctrl",
                        target=plan.resctrl,
                        outcome="planned" if self.dry_run else "unsupported",
                        error="" if self.dry_run else "resctrl is not used by this agent",
                    )
                ]
            )
        if reason := self.resctrl.unavailable():
            return (
                []
                if check_only
                else [WriteOutcome(kind="resctrl", target=plan.resctrl, outcome="unsupported", error=reason)]
            )
        out: list[WriteOutcome] = []
        if plan.resctrl_group is not None:
            out += self.resctrl.apply(plan.resctrl_group, check_only=check_only)
        out += self.resctrl.assign(plan.resctrl, self.pod_pids(plan))
        return out

    # -- whole plans -----------------------------------------------------------------------------------------------

    def apply_pod(self, uid: str, plan: QosPlan, *, check_only: bool = False) -> list[WriteOutcome]:
        """Make ``plan`` hold. With ``check_only`` (a reconcile), only what had to be written again (drift) and what
        still fails is reported."""
        out = self._apply_targets(plan.cgroups, check_only=check_only)
        out += self._apply_cdi(uid, plan.gpu, check_only=check_only)
        out += self._apply_resctrl(plan, check_only=check_only)
        return out

    def apply_node(
        self, cgroups: Sequence[CgroupTarget], groups: Sequence[ResctrlGroup], *, check_only: bool = False
    ) -> list[WriteOutcome]:
        out = self._apply_targets(cgroups, check_only=check_only)
        for group in groups:
            if self.dry_run:
                out.append(WriteOutcome(kind="resctrl", target=group.group, outcome="planned"))
            elif self.resctrl is None:
                if not check_only:
                    out.append(
                        WriteOutcome(
                            kind="resctrl",
                            target=group.group,
                            outcome="unsupported",
                            error="resctrl is not used",
                        )
                    )
            else:
                out += [
                    o
                    for o in self.resctrl.apply(group, check_only=check_only)
                    if not (check_only and o.outcome == "unsupported")
                ]
        return out


FAILED = frozenset({"refused", "missing", "rejected", "mismatch", "failed"})


def all_ok(results: Iterable[WriteOutcome]) -> bool:
    """Whether everything this node can hold holds (``unsupported`` knobs are reported, not failures)."""
    return not any(r.outcome in FAILED for r in results)
