"""Errors, sorted by what to do next.

::

    ControlPlaneError
    ├── TransientError(delay)      retry later (JetStream: nak with backoff)
    │   ├── Unavailable            a server (PostgreSQL, NATS, Kubernetes) did not answer or timed out
    │   │   └── Deposed            the lock or lease that let this process decide is lost: it stops (exit 1, one
    │   │                          line) for its supervisor to restart it as a standby
    │   ├── ConcurrencyConflict    a stale expected stream version; reload and decide again
    │   └── Fenced                 a write under a leadership term that is no longer current: refused; the
    │                              process steps down (retried only until it has)
    └── PermanentError             retrying cannot help (JetStream: term, and a dead-letter event)
        ├── InvalidInput(issues)   bad input: each issue has a field path and a reason
        ├── NotFound
        ├── SchemaMismatch         the database schema is not the one this version needs
        └── AlreadyProcessed       a consumer checkpoint is already past this event (a duplicate delivery)

    InvalidConfig(issues)          a configuration file that cannot be loaded (a ValueError): each issue a FieldIssue
                                   with the field path and why; a service refuses to start (exit 2), the CLI reports it

Adapters catch driver exceptions (asyncpg, nats, kubernetes-asyncio) and raise these, with the cause chained.
Expected rejections of decisions ("quota full", "no node fits") are not errors at all: they are outcomes,
recorded as events.
"""

from __future__ import annotations

from collections.abc import Sequence

from allot_contracts.issues import FieldIssue


class ControlPlaneError(Exception):
    """Root of every error Allot raises on purpose."""


class TransientError(ControlPlaneError):
    def __init__(self, message: str, *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class Unavailable(TransientError):
    pass


class Deposed(Unavailable):
    """This process no longer holds what lets it decide alone (the consumer's lock, its Lease): it stops, so that its
    supervisor restarts it as a standby. An expected end, said in one line: not a crash."""


class ConcurrencyConflict(TransientError):
    pass


class Fenced(TransientError):
    """A write made under leadership term ``term`` of ``name`` while term ``current`` holds: refused, nothing was
    written. The writer is a paused or partitioned ex-leader; it must step down, not retry (see
    ``allot_runtime.kube.lease``). A transient error to consumers, so the event is never dead-lettered on its
    account: the new leader decides it."""

    def __init__(self, name: str, term: int, current: int, *, target: str = "log") -> None:
        super().__init__(
            f"{target} write of {name} under term {term} refused: term {current} holds (a newer leader took over)"
        )
        self.name = name
        self.term = term
        self.current = current
        self.target = target


class PermanentError(ControlPlaneError):
    pass


class DecisionFailed(ControlPlaneError):
    """A processor raised while evolving or deciding on an event: a bug or an input it cannot read. Retried a few
    times (the state is rebuilt in between), then the event is dead-lettered; infrastructure errors never count."""


class InvalidInput(PermanentError):
    """Bad input. ``issues`` is a list of ``(path, message)`` pairs; ``str()`` lists them one per line."""

    def __init__(self, issues: Sequence[tuple[str, str]], *, subject: str = "") -> None:
        self.issues = list(issues)
        self.subject = subject
        head = f"{subject}: " if subject else ""
        lines = [f"{path}: {message}" if path else message for path, message in self.issues]
        super().__init__(head + ("; ".join(lines) if lines else "invalid input"))


class NotFound(PermanentError):
    pass


class SchemaMismatch(PermanentError):
    pass


class AlreadyProcessed(PermanentError):
    pass


class InvalidConfig(ValueError):
    """A configuration that cannot be loaded: a service's decision config, a ``KubeSchedulerConfiguration``, a
    ``DeschedulerConfiguration``. ``issues`` name every refused field by its path and say why (an unknown key, plugin
    or ``apiVersion`` names the accepted ones). Every config parser raises this (or a subclass of it) and nothing else
    for bad input, which the fuzz tests of each config kind hold it to."""

    def __init__(self, issues: Sequence[FieldIssue], *, subject: str = "") -> None:
        self.issues = list(issues)
        self.subject = subject
        text = "; ".join(str(i) for i in self.issues) or "invalid configuration"
        super().__init__(f"{subject}: {text}" if subject else text)
