"""The dev stack's ``stack.json``: what the supervisor (:mod:`allot_stack.supervisor`) writes about the stack it runs,
read back by ``allot status``, ``allot down`` and every command that finds the log through it (``read_stack``).

Only ``status``, ``state_dir`` and the two URLs are always there; the rest is written once the supervisor knows it.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict, TypeGuard


class ProcessInfo(TypedDict):
    """One supervised process: its pid, HTTP port, log file, command line and how often it was restarted."""

    pid: NotRequired[int | None]
    port: NotRequired[int | None]
    log: NotRequired[str]
    command: NotRequired[list[str]]
    restarts: NotRequired[int]
    recent_crashes: NotRequired[int]
    alive: NotRequired[bool]


class ServerInfo(TypedDict):
    """PostgreSQL or nats-server: embedded or not, its pid, log or monitor URL, and (embedded) how it runs."""

    embedded: NotRequired[bool]
    pid: NotRequired[int | None]
    log: NotRequired[str | None]
    monitor: NotRequired[str | None]
    port: NotRequired[int | None]
    restarts: NotRequired[int]
    alive: NotRequired[bool]


class StackFile(TypedDict):
    """The whole file."""

    status: str
    error: NotRequired[str]
    degraded: NotRequired[dict[str, str]]
    supervisor_pid: NotRequired[int]
    state_dir: str
    database_url: str
    nats_url: str
    nats_prefix: NotRequired[str]
    nats_stream: NotRequired[str]
    postgres: NotRequired[ServerInfo]
    nats: NotRequired[ServerInfo]
    processes: NotRequired[dict[str, ProcessInfo]]


def is_stack_file(value: object) -> TypeGuard[StackFile]:
    """Whether ``value`` (decoded JSON) is a ``stack.json``: a mapping with the fields always written, and with
    mappings where the supervisor writes them. Read without a schema library: ``allot status`` starts in
    milliseconds."""
    if not isinstance(value, dict):
        return False
    if not all(
        isinstance(value.get(key), str) for key in ("status", "state_dir", "database_url", "nats_url")
    ):
        return False
    return all(isinstance(value.get(key, {}), dict) for key in ("degraded", "postgres", "nats", "processes"))
