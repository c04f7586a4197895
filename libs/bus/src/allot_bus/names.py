"""Names on the bus: the JetStream stream, its subjects, and durable consumer names.

Every committed event is published to ``<prefix>.events.<kind>.<action>`` (``allot.events.pod.placed``) on the stream
``<stream>`` (default ``ALLOT_EVENTS``). The prefix and stream name are settings, so several installations (or tests)
can share one NATS server. Service admin requests use ``<prefix>.admin.<service>.<verb>``.
"""

from __future__ import annotations

import re

import msgspec

from allot_contracts.envelope import subject_for


class BusNames(msgspec.Struct, frozen=True, kw_only=True):
    prefix: str = "allot"
    stream: str = "ALLOT_EVENTS"

    @property
    def all_events(self) -> str:
        return f"{self.prefix}.events.>"

    def subject(self, event_type: str) -> str:
        return subject_for(self.prefix, event_type)

    def admin(self, service: str, verb: str) -> str:
        return f"{self.prefix}.admin.{token(service)}.{verb}"

    def durable(self, consumer: str) -> str:
        return token(consumer)


def token(name: str) -> str:
    """A consumer or instance name as one NATS subject token / durable name (``qos-enforcer@ip-10.0.0.1`` →
    ``qos-enforcer_ip-10_0_0_1``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


HEADER_POSITION = "Allot-Position"
HEADER_TYPE = "Allot-Type"
HEADER_STREAM = "Allot-Stream"
HEADER_MSG_ID = "Nats-Msg-Id"
HEADER_EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
