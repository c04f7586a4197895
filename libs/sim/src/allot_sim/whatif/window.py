"""``allot what-if --config FILE --window FROM:TO``: the recorded window re-decided under another configuration.

One service's configuration is replaced: the file's settings merged over each configuration the service decided the
window's triggers under (mappings merged key by key, anything else replaced; a configuration it recorded inside the
window is followed, with the change merged over it too). Its projection is folded from the log up to the
position before ``FROM`` under the new configuration, with the outputs it recorded; then every trigger of the
window is decided again (:func:`allot_runtime.replay.rederive`) and the decisions compared, pod by pod, with the
recorded ones (:mod:`allot_views.decisions`). After each trigger the service goes on with what it recorded, so one
difference does not cascade: every difference listed is one decision taken under the same state. Nothing is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from allot_contracts.clipping import clipped
from allot_contracts.jsonvalue import JsonObject
from allot_intake.errors import UsageError
from allot_views.decisions import decisions_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from allot_contracts.envelope import NewEvent, RecordedEvent
    from allot_eventstore.protocol import EventStore
    from allot_runtime.processor import Host
    from allot_runtime.replay import Switch


class Compared(TypedDict):
    """What is compared of a pod's decision (:mod:`allot_views.decisions`)."""

    outcome: str
    node: str | None
    message: str
    codes: list[str]
    annotations: JsonObject


class Difference(TypedDict):
    """A pod whose decision for the trigger at ``position`` differs (``None``: no decision on that side)."""

    position: int
    trigger: str
    pod: str
    recorded: Compared | None
    would_be: Compared | None


def merged(base: JsonObject, change: JsonObject) -> JsonObject:
    """``change`` over ``base``: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in change.items():
        old = out.get(key)
        out[key] = merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


class WindowSyntaxError(ValueError):
    """A ``FROM:TO`` that is not one (its text repeated cut): refused before the log is read."""


def span(text: str) -> tuple[int, int | None]:
    """``FROM:TO``: two log positions (:func:`~allot_runtime.flags.log_position`), either left out (the log's start;
    its head, ``None``), FROM ≤ TO. The one reading of the form: the command line checks it before any work starts
    (``allot what-if --window``), :func:`window` once the log's head is known. A refused value is repeated cut."""
    from argparse import ArgumentTypeError

    from allot_runtime.flags import log_position

    first, colon, last = text.partition(":")
    try:
        if not colon:
            raise ArgumentTypeError("no ':' between them")
        start = log_position(first) if first else 1
        end = log_position(last) if last else None
    except ArgumentTypeError as exc:
        raise WindowSyntaxError(
            f"{clipped(text)} is not FROM:TO (log positions; either may be left out): {exc}"
        ) from None
    if end is not None and end < start:
        raise WindowSyntaxError(f"{clipped(text)}: needs FROM ≤ TO")
    return start, end


def window(text: str, head: int) -> tuple[int, int]:
    """``FROM:TO`` (:func:`span`; TO left out: the log's head) checked against the log: TO is in it."""
    try:
        first, last = span(text)
    except WindowSyntaxError as exc:
        raise UsageError(f"--window: {exc}") from None
    if last is None:
        last = head
    if last > head:
        raise UsageError(f"--window: position {last} is past the log's head ({head})")
    return first, last


def _records(host: Host, trigger: RecordedEvent, news: list[NewEvent]) -> list[RecordedEvent]:
    from allot_contracts.envelope import prepare

    return [
        prepare(
            new,
            position=trigger.position,
            stream_version=0,
            producer=host.name,
            recorded_at=trigger.recorded_at,
            prev_hash=b"",
        )
        for new in news
    ]


def _lines(records: list[RecordedEvent], groups: dict[str, list[str]]) -> dict[str, Compared]:
    out: dict[str, Compared] = {}
    for record in records:
        for line in decisions_of(record, groups):
            out[line["pod"]] = {
                "outcome": line["outcome"],
                "node": line["node"],
                "message": line["message"],
                "codes": line["codes"],
                "annotations": line["annotations"],
            }
    return out


def differing(
    trigger: RecordedEvent,
    recorded: dict[str, Compared],
    would: dict[str, Compared],
) -> list[Difference]:
    """Every pod whose decision for ``trigger`` differs (a decision absent on one side is ``None``)."""
    return [
        {
            "position": trigger.position,
            "trigger": trigger.type,
            "pod": pod,
            "recorded": recorded.get(pod),
            "would_be": would.get(pod),
        }
        for pod in sorted(set(recorded) | set(would))
        if recorded.get(pod) != would.get(pod)
    ]


async def compare(
    host: Host, store: EventStore, *, first: int, last: int, switches: Sequence[Switch] = ()
) -> tuple[int, list[Difference]]:
    """(triggers decided again, the decisions that differ) for ``host``'s triggers at ``first``..``last``;
    ``switches``: where the service went on under another recorded configuration inside the window (each builds the
    host of that configuration with the change merged in, folded from the log up to there)."""
    from allot_runtime.replay import Outputs, follow_recorded, inputs, rebuild, rederive

    pending = sorted(switches, key=lambda switch: switch.after)
    await rebuild(host, store, until=first - 1)
    outputs = Outputs(store, host.name, after=first - 1)
    groups: dict[str, list[str]] = {}
    triggers = 0
    found: list[Difference] = []
    try:
        async for record in inputs(host, store, last, first - 1):
            while pending and pending[0].after < record.position:
                host = pending.pop(0).build()
                await rebuild(host, store, until=record.position - 1)
            decisions_of(record, groups)  # a gang's members, when the trigger is its group
            kept = await outputs.of(record.position)
            news = rederive(host, record, kept)
            if news is not None:
                triggers += 1
                would = _lines(_records(host, record, news), dict(groups))
                found += differing(record, _lines(kept, groups), would)
            follow_recorded(host, record, kept)
    finally:
        await outputs.close()
    return triggers, found
