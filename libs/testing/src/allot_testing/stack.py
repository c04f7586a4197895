"""The relay and the seven services' runtimes as asyncio tasks in one process, against real PostgreSQL and NATS.

The same code paths as the service processes (ProcessorRuntime: rebuild, durable consumer, decide, append with
checkpoint; the relay with LISTEN/NOTIFY), without process start-up costs, so a test can run many scenarios each on a
fresh database and bus prefix. Process-level behaviour (supervision, kill -9) is covered by the e2e tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

from allot_bus.adapters.nats import connect
from allot_bus.names import BusNames
from allot_bus.relay import Relay
from allot_contracts.jsonvalue import JsonObject
from allot_eventstore.clock import Clock, system_clock
from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.processor import instance_name
from allot_runtime.recorded_config import AppliedConfig, normalised
from allot_runtime.service import ProcessorRuntime
from allot_stack.pipeline import PROCESSORS, build_instance


class InProcessStack:
    def __init__(
        self,
        database_url: str,
        nats_url: str,
        names: BusNames,
        configs: dict[str, JsonObject] | None = None,
        *,
        delete_stream: bool = False,
        instances: dict[str, list[str]] | None = None,
        tracer: Any = None,
        clock: Clock = system_clock,
        record_configs: bool = True,
    ) -> None:
        self.record_configs = record_configs  # False: a log from before services recorded their config
        self.clock = clock  # the time the log records events at (a ManualClock moves only when told)
        self.instances = instances or {}
        self.tracer = tracer
        self.delete_stream = delete_stream
        self.database_url = database_url
        self.nats_url = nats_url
        self.names = names
        self.configs = configs or {}
        self.stop = asyncio.Event()
        self.stops: dict[str, asyncio.Event] = {}  # one per runtime, to pause a single service
        self.tasks: list[asyncio.Task[None]] = []
        self.clients: list[Any] = []
        self.runtimes: dict[str, ProcessorRuntime] = {}

    async def __aenter__(self) -> InProcessStack:
        self.store = PostgresEventStore.connect(self.database_url, pool_size=10, clock=self.clock)
        relay_nc = await connect(self.nats_url, name="stack-relay")
        self.clients.append(relay_nc)
        relay = Relay(self.store, relay_nc.jetstream(), self.names, poll_interval=0.2)
        self._listen = self.store.notifications()
        woken = (await self._listen.__aenter__()).woken
        self.tasks.append(asyncio.create_task(relay.run(self.stop, wake=woken), name="relay"))
        for service, _ in PROCESSORS:
            for name in [instance_name(service, i) for i in self.instances.get(service, [""])]:
                nc = await connect(self.nats_url, name=f"stack-{name}")
                self.clients.append(nc)
                config = self.configs.get(service, {})
                if (
                    self.record_configs
                ):  # decided under the canonical form recorded, as a service process does
                    config = normalised(config)
                runtime = ProcessorRuntime(
                    name=name,
                    factory=functools.partial(build_instance, service, name, config),
                    store=self.store,
                    nc=nc,
                    names=self.names,
                    fetch_timeout=0.2,
                    tracer=self.tracer,
                    config=AppliedConfig(config=config) if self.record_configs else None,
                )
                self.runtimes[name] = runtime
                self.stops[name] = asyncio.Event()
                self.tasks.append(asyncio.create_task(runtime.consumer.run(self.stops[name]), name=name))
        await asyncio.wait_for(asyncio.gather(*(r.consumer.ready.wait() for r in self.runtimes.values())), 30)
        return self

    async def pause(self, name: str) -> None:
        """Stop one service's consumer (as if its process were stopped): the others go on."""
        self.stops[name].set()
        task = next(t for t in self.tasks if t.get_name() == name)
        await asyncio.wait_for(task, timeout=20)

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        for stop in self.stops.values():
            stop.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), timeout=20)
        await self._listen.__aexit__(None, None, None)
        if self.delete_stream:
            with contextlib.suppress(Exception):
                await self.clients[0].jetstream().delete_stream(self.names.stream)
        for nc in self.clients:
            with contextlib.suppress(Exception):
                await nc.close()
        await self.store.close()
