"""Driving the simulator from tests: documents as dicts, results as decisions and views."""

from __future__ import annotations

from typing import Any

import yaml

from allot_contracts.jsonvalue import JsonObject
from allot_intake.documents import Document
from allot_intake.manifests import Input, admit_all, to_input
from allot_sim.simulator import Simulation
from allot_views.cluster import ClusterView
from allot_views.decisions import Decision, decisions


class Scenario:
    def __init__(self, configs: dict[str, JsonObject] | None = None) -> None:
        self.configs = configs or {}
        self.sim = Simulation(configs)
        self._index = 0

    def apply(self, *bodies: JsonObject) -> Scenario:
        for body in bodies:
            self.sim.apply(self._admitted(body))
        return self

    def apply_unchecked(self, *bodies: JsonObject) -> Scenario:
        """Record ``bodies`` without the CLI's admission, as the Kubernetes watch does: what the services alone make
        of input nobody checked."""
        for body in bodies:
            self.sim.apply(to_input(Document(source="test", index=self._index, body=body)))
            self._index += 1
        return self

    def interleave(self, when: Any, *bodies: JsonObject) -> Scenario:
        """Apply ``bodies`` the moment the log reaches a record matching ``when`` (a record predicate, or an event
        type): a concurrent input landing between two services' steps."""
        match = when if callable(when) else (lambda record: record.type == when)
        for body in bodies:
            self.sim.interleave(match, self._admitted(body))
        return self

    def _admitted(self, body: JsonObject) -> Input:
        """``body`` as the next document's input, admitted as the CLI admits it (a refusal fails the test)."""
        doc = Document(source="test", index=self._index, body=body)
        self._index += 1
        problems = list(admit_all([doc]))
        assert not problems, problems
        return to_input(doc)

    def apply_yaml(self, text: str) -> Scenario:
        return self.apply(*[b for b in yaml.safe_load_all(text) if b])

    def advance(self, seconds: float) -> Scenario:
        return self.apply(
            {"apiVersion": "allot.dev/v1", "kind": "AdvanceClock", "spec": {"seconds": seconds}}
        )

    def delete(self, kind: str, name: str, namespace: str = "default") -> Scenario:
        return self.apply(
            {
                "apiVersion": "allot.dev/v1",
                "kind": "Delete",
                "spec": {"kind": kind, "namespace": namespace, "name": name},
            }
        )

    @property
    def events(self) -> list[Any]:
        return self.sim.store.events

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def decisions(self) -> list[Decision]:
        return decisions(self.events)

    def view(self) -> ClusterView:
        view = ClusterView()
        for record in self.events:
            view.apply(record)
        return view

    def phase(self, key: str) -> str:
        pod = self.view().pods.get(key)
        return pod.phase if pod else "Absent"

    def of_type(self, event_type: str) -> list[JsonObject]:
        return [e.payload_dict() for e in self.events if e.type == event_type]

    def assert_replays(self) -> None:
        """Every decision re-derives from the log, and every projection rebuilt from it equals the live one."""
        import asyncio

        from allot_runtime.processor import Host
        from allot_runtime.replay import rebuild, verify_decisions

        async def check() -> None:
            for live in self.sim.hosts:
                config = self.configs.get(live.name, {})
                factory: Any = type(live.processor)
                checked, mismatches = await verify_decisions(Host(factory(config)), self.sim.store)
                assert mismatches == [], (live.name, mismatches[0].describe())
                rebuilt = Host(factory(config))
                await rebuild(rebuilt, self.sim.store, until=live.position)
                assert rebuilt.digest() == live.digest(), (
                    f"{live.name}: rebuilt projection differs from the live one"
                )

        asyncio.run(check())


def borrowed_quota(labels: dict[str, str] | None = None) -> Scenario:
    """Two quotas ``a`` and ``b`` (min 8 cpu, max 16 each) on one 16-cpu node: ``a``'s four 4-cpu pods (with
    ``labels``) borrow ``b``'s idle min, then ``b``'s 8-cpu pod ``b0`` wants it back (``a`` is over its runtime)."""
    from allot_testing.builders import a_node, a_pod, a_quota

    s = Scenario()
    s.apply(a_node("n", cpu="16", memory="64Gi"))
    limits = {"max": {"cpu": "16", "memory": "64Gi"}, "min": {"cpu": "8", "memory": "32Gi"}}
    s.apply(a_quota("a", namespace="a", **limits), a_quota("b", namespace="b", **limits))
    s.apply(*(a_pod(f"a{i}", namespace="a", cpu="4", memory="4Gi", labels=labels or {}) for i in range(4)))
    s.apply(a_pod("b0", namespace="b", cpu="8", memory="8Gi"))
    return s
