"""node-reporter's agent: what a per-node instance observes on its own machine and records (the shell; IO and clock).

A node-reporter started with ``ALLOT_INSTANCE=<node>`` (one per node, a DaemonSet pod) runs, next to its consumer:

- **discovery** (every ``discoveryIntervalSeconds``, default 30, and at once after a critical GPU XID): the
  machine's ``Device`` and ``NodeResourceTopology`` from sysfs/procfs and NVML (:mod:`node_reporter.discovery`),
  recorded as ``device.applied`` / ``topology.applied`` when they differ from what was last recorded for the node —
  the same inputs ``allot apply`` and the Kubernetes watch record, which the processor then validates and reports.
  A GPU NVML reports unhealthy, or that raised a critical XID since the agent started, is reported with
  ``health: false``, so only that device becomes unschedulable.
- **heartbeat** (every ``heartbeatIntervalSeconds``, default 10): ``node.heartbeat``; the device-allocator declares the
  node's devices unschedulable when heartbeats stop for longer than its grace.
- **metrics** (a sample every ``sampleIntervalSeconds``, default 1; a report every ``reportIntervalSeconds``,
  default 60): the node's and its pods' usage (:mod:`node_reporter.metrics`), recorded as ``nodemetric.applied``.

Everything is recorded as producer ``node-reporter@<node>.agent`` with fresh ids. A failing pass is logged and
retried at the next interval; a source that does not exist on the machine (no GPU, no cgroup controllers) is reported
once and left out. Configuration (``agent`` in the service's config file; ``ALLOT_AGENT_SYS_ROOT``,
``ALLOT_AGENT_PROC_ROOT``, ``ALLOT_AGENT_CGROUP_ROOT`` override the roots, for a DaemonSet that mounts the host's)::

    agent:
      discovery: true            # default false in Kubernetes mode (koordlet writes Device/NodeResourceTopology)
      heartbeat: true
      metrics: true              # default false in Kubernetes mode (koordlet writes NodeMetric)
      sysRoot: /   procRoot: /   cgroupRoot: /sys/fs/cgroup
      discoveryIntervalSeconds: 30
      heartbeatIntervalSeconds: 10
      sampleIntervalSeconds: 1
      reportIntervalSeconds: 60
      aggregateDurationSeconds: 300
      aggregateDurations: [5m, 10m, 30m]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from allot_contracts.envelope import NewEvent, stream_id
from allot_contracts.errors import InvalidInput
from allot_contracts.events import DeviceApplied, Event, TopologyApplied
from allot_contracts.events.nodeside import NodeHeartbeat, NodeMetricApplied
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.duration import parse_go_duration
from allot_contracts.objects.nodemetric import nodemetric_manifest

log = logging.getLogger("allot.node-reporter.agent")

__all__ = ["AgentConfig", "agent", "is_critical_xid", "mark_unhealthy", "parse_agent_config"]

# XIDs that report an application's own fault, not the GPU's (as NVIDIA's device plugin skips them)
APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})


class AgentConfig(msgspec.Struct, frozen=True, kw_only=True):
    discovery: bool = True
    heartbeat: bool = True
    metrics: bool = True
    sys_root: str = "/"
    proc_root: str = "/"
    cgroup_root: str = "/sys/fs/cgroup"
    discovery_interval_s: float = 30.0
    heartbeat_interval_s: float = 10.0
    sample_interval_s: float = 1.0
    report_interval_s: float = 60.0
    aggregate_duration_s: int = 300
    aggregate_durations_s: tuple[int, ...] = (300, 600, 1800)


_KEYS: Final = {
    "discovery": "discovery",
    "heartbeat": "heartbeat",
    "metrics": "metrics",
    "sysRoot": "sys_root",
    "procRoot": "proc_root",
    "cgroupRoot": "cgroup_root",
    "discoveryIntervalSeconds": "discovery_interval_s",
    "heartbeatIntervalSeconds": "heartbeat_interval_s",
    "sampleIntervalSeconds": "sample_interval_s",
    "reportIntervalSeconds": "report_interval_s",
    "aggregateDurationSeconds": "aggregate_duration_s",
    "aggregateDurations": "aggregate_durations_s",
}
_ENV: Final = {
    "ALLOT_AGENT_SYS_ROOT": "sys_root",
    "ALLOT_AGENT_PROC_ROOT": "proc_root",
    "ALLOT_AGENT_CGROUP_ROOT": "cgroup_root",
}


def parse_agent_config(
    raw: Any, environ: Mapping[str, str] | None = None, *, kubernetes: bool = False
) -> AgentConfig:
    """The ``agent`` section of the config (every key optional); problems raise ``InvalidInput`` with their path.
    In Kubernetes mode discovery and metrics default to off: koordlet writes Device, NodeResourceTopology and
    NodeMetric there, and the watch records them."""
    errors: list[tuple[str, str]] = []
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise InvalidInput([("agent", "must be a mapping")])
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        field = _KEYS.get(str(key))
        path = f"agent.{key}"
        if field is None:
            errors.append((path, f"unknown key; supported: {', '.join(sorted(_KEYS))}"))
        elif field in ("discovery", "heartbeat", "metrics"):
            if not isinstance(value, bool):
                errors.append((path, "must be true or false"))
            fields[field] = value
        elif field.endswith("_root"):
            if not isinstance(value, str) or not value:
                errors.append((path, "must be a directory path"))
            fields[field] = value
        elif field == "aggregate_durations_s":
            seconds = []
            for i, d in enumerate(value if isinstance(value, list) else [None]):
                us, error = (
                    parse_go_duration(d) if isinstance(d, str) else (None, "must be a list of durations")
                )
                if us is None or us <= 0 or us % 1_000_000:
                    errors.append((f"{path}[{i}]", error or "must be whole seconds"))
                else:
                    seconds.append(us // 1_000_000)
            fields[field] = tuple(sorted(set(seconds)))
        else:
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                errors.append((path, "must be a positive number of seconds"))
            fields[field] = (
                int(value) if field == "aggregate_duration_s" and isinstance(value, int | float) else value
            )
    for var, field in _ENV.items():
        value = (os.environ if environ is None else environ).get(var)
        if value:
            fields[field] = value
    if errors:
        raise InvalidInput(errors)
    if kubernetes:
        fields.setdefault("discovery", False)
        fields.setdefault("metrics", False)
    return AgentConfig(**fields)


def is_critical_xid(xid: int) -> bool:
    return xid not in APPLICATION_XIDS


def mark_unhealthy(device: JsonObject, uuids: set[str]) -> JsonObject:
    """The Device with every GPU whose id is in ``uuids`` reported unhealthy (pure; the input is not changed)."""
    if not uuids:
        return device
    out = dict(device)
    found = out.get("spec")
    spec = dict(found) if isinstance(found, dict) else {}
    devices = spec.get("devices")
    spec["devices"] = [
        {**d, "health": False}
        if isinstance(d, dict) and d.get("type") == "gpu" and d.get("id") in uuids
        else d
        for d in (devices if isinstance(devices, list) else [])
    ]
    out["spec"] = spec
    return out


class Agent:
    def __init__(self, ctx: Any, config: AgentConfig, nvml: Callable[[], Any] | None = None) -> None:
        self.ctx = ctx
        self.config = config
        self.nvml = nvml  # an NVML answer provider (tests replay recorded answers); None = ask NVML
        self.node = str(ctx.settings.instance)
        self.producer = f"{ctx.runtime.name}.agent"
        self.recorded: dict[str, JsonObject] = {}  # stream -> manifest last recorded
        self.xid_unhealthy: set[str] = set()
        self.rediscover = asyncio.Event()
        self.sampler: Any = (
            None  # the metrics loop's Sampler (built on first use; a benchmark may give its own)
        )

    async def append(self, stream: str, event: Event) -> None:
        new = NewEvent(stream_id=stream, event=event, event_id=str(uuid.uuid4()))
        await self.ctx.store.append([new], producer=self.producer)

    async def last_applied(self, stream: str, kind: str) -> JsonObject | None:
        for record in reversed(await self.ctx.store.read_stream(stream)):
            if record.type == f"{kind}.applied":
                manifest = record.payload_dict().get("manifest")
                return dict(manifest) if isinstance(manifest, dict) else None
            if record.type == f"{kind}.deleted":
                return None
        return None

    # -- discovery ------------------------------------------------------------------------------------------------
    async def discovery_loop(self, stop: asyncio.Event) -> None:
        from node_reporter.discovery import DiscoveryError, discover

        for kind in ("device", "topology"):
            last = await self.last_applied(stream_id(kind, self.node), kind)
            if last is not None:
                self.recorded[stream_id(kind, self.node)] = last
        warned: set[str] = set()
        while not stop.is_set():
            try:
                found = await asyncio.to_thread(
                    discover,
                    self.node,
                    sys_root=self.config.sys_root,
                    proc_root=self.config.proc_root,
                    nvml=self.nvml() if self.nvml is not None else None,
                )
                for warning in found.warnings:
                    if warning not in warned:
                        warned.add(warning)
                        log.warning("%s: discovery: %s", self.node, warning)
                device = mark_unhealthy(found.device, self.xid_unhealthy)
                await self.record_if_changed("device", device, DeviceApplied(name=self.node, manifest=device))
                await self.record_if_changed(
                    "topology", found.topology, TopologyApplied(name=self.node, manifest=found.topology)
                )
            except DiscoveryError as exc:
                log.error("%s: discovery failed: %s", self.node, exc)
            except Exception as exc:  # the store may be away; try again at the next interval
                log.warning("%s: could not record discovery: %s", self.node, exc)
            self.rediscover.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(
                    _first(stop.wait(), self.rediscover.wait()), timeout=self.config.discovery_interval_s
                )

    async def record_if_changed(self, kind: str, manifest: JsonObject, event: Event) -> None:
        stream = stream_id(kind, self.node)
        if self.recorded.get(stream) == manifest:
            return
        await self.append(stream, event)
        self.recorded[stream] = manifest
        log.info("%s: recorded %s.applied", self.node, kind)

    def on_xid(self, gpu_uuid: str, xid: int) -> None:
        """Called from the XID watcher's thread."""
        if is_critical_xid(xid):
            log.error("%s: GPU %s raised critical XID %d: reported unhealthy", self.node, gpu_uuid, xid)
            self.xid_unhealthy.add(gpu_uuid)
            self.rediscover.set()

    # -- heartbeat ------------------------------------------------------------------------------------------------
    async def heartbeat_loop(self, stop: asyncio.Event) -> None:
        interval = self.config.heartbeat_interval_s
        while not stop.is_set():
            try:
                await self.append(
                    stream_id("node", self.node),
                    NodeHeartbeat(
                        name=self.node, instance=self.ctx.runtime.name, interval_s=max(int(interval), 1)
                    ),
                )
            except Exception as exc:
                log.warning("%s: could not record a heartbeat: %s", self.node, exc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)

    # -- metrics --------------------------------------------------------------------------------------------------
    async def metrics_loop(self, stop: asyncio.Event) -> None:
        from node_reporter.metrics.sampler import Sampler
        from node_reporter.metrics.window import Window

        if self.sampler is None:
            self.sampler = Sampler(proc_root=self.config.proc_root, cgroup_root=self.config.cgroup_root)
        sampler = self.sampler
        if sampler.layout.version == 0:
            log.warning("%s: no pod usage: %s", self.node, sampler.layout.reason)
        window = Window(self.config.aggregate_duration_s, self.config.aggregate_durations_s)
        interval = self.config.sample_interval_s
        next_report = time.monotonic() + self.config.report_interval_s
        while not stop.is_set():
            started = time.monotonic()
            try:
                sample = await asyncio.to_thread(sampler.sample, time.time_ns() // 1000, time.monotonic_ns())
                if sample is not None:
                    window.add(sample)
                if started >= next_report:
                    next_report = started + self.config.report_interval_s
                    await asyncio.to_thread(sampler.refresh)
                    metric = window.metric(
                        self.node, sampler.pods, report_interval_s=max(int(self.config.report_interval_s), 1)
                    )
                    if metric is not None:
                        manifest = nodemetric_manifest(metric)
                        await self.append(
                            stream_id("nodemetric", self.node),
                            NodeMetricApplied(name=self.node, manifest=manifest),
                        )
            except Exception as exc:
                log.warning("%s: metrics pass failed: %s", self.node, exc)
            delay = max(interval - (time.monotonic() - started), 0.01)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)


async def _first(*waits: Any) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def xid_watch(on_xid: Callable[[str, int], None], stop: threading.Event, nvml: Any = None) -> str:
    """Wait for NVML XID events on every GPU until ``stop`` (a thread); returns why it ended."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return "the NVML bindings (package nvidia-ml-py) are not installed"
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return f"NVML is not available: {exc}"
    try:
        events = nvml.nvmlEventSetCreate()
        uuids: dict[Any, str] = {}
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            raw = nvml.nvmlDeviceGetUUID(handle)
            uuids[handle] = raw.decode() if isinstance(raw, bytes) else str(raw)
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
        if not uuids:
            return "NVML reports no GPU"
        while not stop.is_set():
            try:
                data = nvml.nvmlEventSetWait(events, 1000)
            except nvml.NVMLError_Timeout:
                continue
            if data.eventType == nvml.nvmlEventTypeXidCriticalError:
                on_xid(uuids.get(data.device, ""), int(data.eventData))
        nvml.nvmlEventSetFree(events)
        return "stopped"
    except nvml.NVMLError as exc:
        return f"NVML event wait failed: {exc}"
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


async def agent(ctx: Any, stop: asyncio.Event, config: AgentConfig | None = None) -> None:
    """The node-reporter ``Extra`` of a per-node instance (added by ``main`` when ``ALLOT_INSTANCE`` is set)."""
    if config is None:
        config = parse_agent_config(
            ctx.settings.config().get("agent"), kubernetes=ctx.settings.kube_mode == "kubernetes"
        )
    a = Agent(ctx, config)
    log.info(
        "%s: agent started (discovery %s, heartbeat %s, metrics %s)",
        a.node,
        config.discovery,
        config.heartbeat,
        config.metrics,
    )
    loops = []
    if config.heartbeat:
        loops.append(a.heartbeat_loop(stop))
    if config.discovery:
        loops.append(a.discovery_loop(stop))
    if config.metrics:
        loops.append(a.metrics_loop(stop))
    xid_stop = threading.Event()
    if config.discovery:
        main_loop = asyncio.get_running_loop()

        def on_xid(gpu: str, xid: int) -> None:
            main_loop.call_soon_threadsafe(a.on_xid, gpu, xid)

        def run_xid() -> None:
            why = xid_watch(on_xid, xid_stop)
            if why != "stopped":
                log.info("%s: GPU XID events are not watched: %s", a.node, why)

        threading.Thread(target=run_xid, name="xid-watch", daemon=True).start()
    try:
        await asyncio.gather(*loops)
    finally:
        xid_stop.set()
