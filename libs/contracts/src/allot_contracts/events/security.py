"""Security warnings: what a service refused to act on, and why.

A service acts only on events that are in the log (docs/adr/0010-only-logged-events-act.md): a message on the bus is
a notification that the log holds an event, and the service checks the claim against PostgreSQL before deciding.
A message that fails the check is refused and recorded here. Nothing consumes these events; they are facts for the
operator (``allot events tail --type security.*``) and for ``allot replay --verify``'s report. Their cause is not in
the log, so they carry no ``causation_id``: what the message claimed is in the payload.
"""

from __future__ import annotations

from allot_contracts.events._base import Event

__all__ = [
    "SecurityMessageRefused",
]

REFUSAL_REASONS = (
    "not_in_log",  # no event at the claimed position (beyond the head, or a position that never existed)
    "wrong_hash",  # the log holds another event at the claimed position
    "altered",  # the claimed hash is the log's, but the message's content does not hash to it
    "wrong_position",  # the event is in the log, at another position than the message claims
    "replayed",  # a logged event published again, out of the stream's order (not a JetStream redelivery)
    "undecodable",  # not an event in the wire format at all
)


class SecurityMessageRefused(Event, frozen=True, kw_only=True, tag="security.message_refused.v1"):
    """``consumer`` refused a message it was delivered on ``subject`` (JetStream sequence ``stream_sequence``): no
    decision was taken on it. ``reason`` is one of :data:`REFUSAL_REASONS`. The ``claimed_*`` fields are what the
    message said (empty when it could not be read); ``logged_hash`` is the hash the log holds at the claimed position
    ("" when none) and ``logged_position`` where the log holds the claimed event id (0 when nowhere)."""

    consumer: str
    reason: str
    subject: str
    stream_sequence: int = 0
    claimed_position: int = 0
    claimed_event_id: str = ""
    claimed_type: str = ""
    claimed_stream: str = ""
    claimed_producer: str = ""
    claimed_hash: str = ""
    logged_hash: str = ""
    logged_position: int = 0
    detail: str = ""
