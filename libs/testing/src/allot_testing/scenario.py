"""Driving the simulator from tests: documents as dicts, results as decisions and views."""

from __future__ import annotations

from typing import Any

import yaml

from allot_cli.decisions import decisions
from allot_cli.manifests import Document, admit_all, to_input
from allot_cli.simulator import Simulation
from allot_cli.views import ClusterView


class Scenario:
    def __init__(self, configs: dict[str, dict[str, Any]] | None = None) -> None:
        self.sim = Simulation(configs)
        self._index = 0

    def apply(self, *bodies: dict[str, Any]) -> Scenario:
        for body in bodies:
            doc = Document(source="test", index=self._index, body=body)
            self._index += 1
            problems = list(admit_all([doc]))
            assert not problems, problems
            self.sim.apply(to_input(doc))
        return self

    def apply_yaml(self, text: str) -> Scenario:
        return self.apply(*[b for b in yaml.safe_load_all(text) if b])

    def advance(self, seconds: float) -> Scenario:
        return self.apply({"apiVersion": "allot.dev/v1", "kind": "AdvanceClock", "spec": {"seconds": seconds}})

    def delete(self, kind: str, name: str, namespace: str = "default") -> Scenario:
        return self.apply({"apiVersion": "allot.dev/v1", "kind": "Delete",
                           "spec": {"kind": kind, "namespace": namespace, "name": name}})

    @property
    def events(self) -> list[Any]:
        return self.sim.store.events

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def decisions(self) -> list[dict[str, Any]]:
        return decisions(self.events)

    def view(self) -> ClusterView:
        view = ClusterView()
        for record in self.events:
            view.apply(record)
        return view

    def phase(self, key: str) -> str:
        pod = self.view().pods.get(key)
        return pod.phase if pod else "Absent"

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [e.payload_dict() for e in self.events if e.type == event_type]
