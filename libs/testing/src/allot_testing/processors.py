"""Small processors for testing the runtime and the bus against real servers."""

from __future__ import annotations

from typing import ClassVar

from allot_contracts.envelope import stream_id
from allot_contracts.errors import InvalidInput, TransientError
from allot_contracts.events import Event, PodDeleted, PodReleased
from allot_contracts.jsonvalue import JsonObject
from allot_runtime.processor import Emit


class EchoProcessor:
    """Answers every ``pod.deleted`` with one ``pod.released`` on the same pod stream.

    Failure injection (class-level, so it survives rebuilds): pods named in ``fail_transient`` raise a transient
    error the first ``times`` attempts; pods in ``fail_permanent`` raise a permanent error every time; pods in
    ``fail_crash`` make ``evolve`` raise an unexpected error (a bug) every time.
    """

    name: ClassVar[str] = "echo"
    interests: ClassVar[frozenset[str]] = frozenset({"pod.deleted"})
    fail_transient: ClassVar[dict[str, int]] = {}
    fail_permanent: ClassVar[set[str]] = set()
    fail_crash: ClassVar[set[str]] = set()
    attempts: ClassVar[dict[str, int]] = {}

    def __init__(self, config: JsonObject | None = None) -> None:
        self.seen: list[str] = []
        self.echoed = 0

    @classmethod
    def reset(cls) -> None:
        cls.fail_transient = {}
        cls.fail_permanent = set()
        cls.fail_crash = set()
        cls.attempts = {}

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        if isinstance(event, PodDeleted):
            if event.pod.name in self.fail_crash:
                raise KeyError(f"no such thing as {event.pod.name}")
            self.seen.append(event.pod.name)
        elif isinstance(event, PodReleased):
            self.echoed += 1

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        assert isinstance(event, PodDeleted)
        name = event.pod.name
        self.attempts[name] = self.attempts.get(name, 0) + 1
        if name in self.fail_permanent:
            raise InvalidInput([("pod", f"{name} is poison")])
        if self.fail_transient.get(name, 0) >= self.attempts[name]:
            raise TransientError(f"injected transient failure for {name}", delay=0.05)
        return [
            Emit(
                stream_id=stream_id("pod", event.pod.key),
                event=PodReleased(pod=event.pod, node="n", reason="echo"),
            )
        ]

    def snapshot(self) -> dict[str, list[str] | int]:
        return {"seen": self.seen, "echoed": self.echoed}
