"""What ``allot up`` and ``allot status`` say about a dev stack from its ``stack.json``: kept apart from
:mod:`allot_stack.supervisor` (which starts the servers and imports their drivers) so that ``allot status`` starts quickly.
Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from allot_stack.stackfile import StackFile


def redact(url: str) -> str:
    """``url`` with its password as ``***``. (:func:`allot_eventstore.urls.redact` does the same, but importing any
    part of the event store loads all of it, and ``allot status`` prints this before it needs the store.)"""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if not parts.password:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))


def describe(stack: StackFile) -> list[str]:
    def restarts(server: Literal["postgres", "nats"]) -> str:
        count = stack.get(server, {}).get("restarts")
        return f"  restarted {count}x" if count else ""

    lines = [
        f"state      {stack['state_dir']}",
        f"postgres   {redact(stack['database_url'])}"
        + ("  (embedded)" if stack.get("postgres", {}).get("embedded") else "  (external)")
        + restarts("postgres"),
        f"nats       {redact(stack['nats_url'])}"
        + ("  (embedded)" if stack.get("nats", {}).get("embedded") else "  (external)")
        + (f"  monitor {stack['nats']['monitor']}" if stack.get("nats", {}).get("monitor") else "")
        + restarts("nats"),
        f"subjects   {stack.get('nats_prefix', 'allot')}.events.>  on stream {stack.get('nats_stream', 'ALLOT_EVENTS')}",
    ]
    for name, problem in stack.get("degraded", {}).items():
        lines.append(f"DEGRADED   {name}: {str(problem).splitlines()[0] if problem else ''}")
    return lines
