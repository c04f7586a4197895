"""The seven processors, in one place: what the live stack runs, what the simulator chains and what replay checks.

Order is the pod's path through the services (used by the simulator to deliver one event to several processors
deterministically); nothing about correctness depends on it in the live stack, where each service consumes on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from allot_contracts.jsonvalue import JsonObject
from allot_runtime.processor import Processor, is_shell_producer
from binder.processor import Binder
from device_allocator.processor import DeviceAllocator
from gang_coordinator.processor import GangCoordinator
from node_reporter.processor import NodeReporter
from qos_enforcer.processor import QosEnforcer
from quota_manager.processor import QuotaManager
from reservation_manager.processor import ReservationManager

Factory = Callable[[JsonObject], Processor]

PROCESSORS: tuple[tuple[str, Factory], ...] = (
    ("node-reporter", NodeReporter),
    ("gang-coordinator", GangCoordinator),
    ("quota-manager", QuotaManager),
    ("reservation-manager", ReservationManager),
    ("device-allocator", DeviceAllocator),
    ("binder", Binder),
    ("qos-enforcer", QosEnforcer),
)

SERVICES: tuple[str, ...] = tuple(name for name, _ in PROCESSORS)


def build(name: str, config: JsonObject | None = None) -> Processor:
    for candidate, factory in PROCESSORS:
        if candidate == name:
            return factory(config or {})
    raise KeyError(name)


def interests() -> dict[str, frozenset[str]]:
    """The event types each service consumes (a class attribute: no processor is built)."""
    return {name: frozenset(getattr(factory, "interests")) for name, factory in PROCESSORS}  # noqa: B009


def instances(service: str, producers: Iterable[str]) -> list[str]:
    """The instances of a service that decided in a log: ``service`` itself and/or ``service@<node>`` ones (not
    their shells: ``service@<node>.timer``, ``.config``, …)."""
    names = set(producers)
    scoped = sorted(p for p in names if p.startswith(f"{service}@") and not is_shell_producer(p))
    return [*([service] if service in names or not scoped else []), *scoped]


def build_instance(service: str, instance: str, config: JsonObject | None = None) -> Processor:
    """The processor of one instance: a per-node instance gets its node as scope."""
    node = instance.split("@", 1)[1] if "@" in instance else ""
    settings = dict(config or {})
    if node:
        settings["scope"] = {"node": node}
    return build(service, settings)
