"""Failpoints: crash a service at a named point of its decision cycle, for crash-safety tests.

``ALLOT_FAILPOINTS`` holds comma-separated rules ``<service>:<stage>:<event type>:<n>``; the service whose name
matches exits at once with status 137 (as if killed with SIGKILL) the *n*-th time it reaches ``<stage>`` for a
decision emitting ``<event type>``. Stages:

- ``before-append``: the batch holding that decision is decided, nothing is written (it must be decided again after
  restart);
- ``after-append``: the batch's decisions and the checkpoint are committed, the messages are not acknowledged (they
  will be redelivered and must not be decided twice).

``ALLOT_FAILPOINT_STATE`` names a file recording which rules already fired, so each fires once across restarts.
Unset (the default) costs one attribute check per decision.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path


class Failpoints:
    def __init__(self, service: str, spec: str, state_file: str | None) -> None:
        self.rules: dict[tuple[str, str], int] = {}
        for rule in (r.strip() for r in spec.split(",") if r.strip()):
            parts = rule.split(":")
            if len(parts) != 4 or not parts[3].isdigit():
                raise ValueError(f"bad failpoint {rule!r}: expected service:stage:event-type:n")
            name, stage, event_type, n = parts
            if stage not in ("before-append", "after-append"):
                raise ValueError(f"bad failpoint stage {stage!r}")
            if name == service:
                self.rules[(stage, event_type)] = int(n)
        self.counts: dict[tuple[str, str], int] = {}
        self.state = Path(state_file) if state_file else None

    @classmethod
    def from_env(cls, service: str, environ: Mapping[str, str] | None = None) -> Failpoints | None:
        env = os.environ if environ is None else environ
        spec = env.get("ALLOT_FAILPOINTS", "")
        return cls(service, spec, env.get("ALLOT_FAILPOINT_STATE")) if spec else None

    def _fired(self) -> set[str]:
        if self.state is None or not self.state.exists():
            return set()
        return set(self.state.read_text().split())

    def hit(self, stage: str, decisions: Iterable[Iterable[str]]) -> None:
        """``decisions``: the event types each decision of a batch emits. A rule fires on the batch holding its
        *n*-th decision emitting its type (a batch commits many decisions at once)."""
        for types in decisions:
            for event_type in set(types):
                key = (stage, event_type)
                if key not in self.rules:
                    continue
                self.counts[key] = self.counts.get(key, 0) + 1
                if self.counts[key] == self.rules[key]:
                    self._fire(f"{stage}:{event_type}:{self.rules[key]}")

    def _fire(self, marker: str) -> None:
        if marker in self._fired():
            return
        if self.state is not None:
            with self.state.open("a") as f:
                f.write(marker + "\n")
        print(f"failpoint {marker}: exiting", file=sys.stderr, flush=True)
        os._exit(137)
