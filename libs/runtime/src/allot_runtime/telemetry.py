"""OpenTelemetry tracing: the context of a decision travels with its events (event metadata → NATS headers).

Exporter by setting: ``none`` (default), ``console`` or ``otlp`` (standard ``OTEL_EXPORTER_OTLP_*`` variables).
Span names follow the messaging conventions: ``process <subject-template>`` (CONSUMER) for handling an event,
with ``messaging.system=nats``, ``messaging.destination.name``, ``messaging.message.id`` and
``messaging.consumer.group.name``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

# OpenTelemetry is imported once tracing is on (``setup``): a service that traces nothing starts without it.
if TYPE_CHECKING:
    from opentelemetry import trace
    from opentelemetry.propagators.textmap import DefaultGetter, DefaultSetter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    from opentelemetry.util.types import AttributeValue


@functools.cache
def _propagation() -> tuple[TraceContextTextMapPropagator, DefaultGetter, DefaultSetter]:
    from opentelemetry.propagators.textmap import DefaultGetter, DefaultSetter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator(), DefaultGetter(), DefaultSetter()


def setup(service: str, exporter: str) -> trace.Tracer | None:
    """The service's tracer, or None when tracing is off (exporter ``none``): then no span is created and no trace
    context is stored with decisions, which keeps the per-event cost of a busy pipeline at zero."""
    if exporter not in ("console", "otlp"):
        return None
    from opentelemetry.sdk.resources import Resource  # the SDK only when tracing is on (a tenth of a second)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"allot-{service}"}))
    if exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider.get_tracer("allot")


def inject() -> dict[str, str]:
    carrier: dict[str, str] = {}
    propagator, _, setter = _propagation()
    propagator.inject(carrier, setter=setter)  # type: ignore[misc]  # CarrierT is a TypeVar mypy cannot bind here
    return carrier


@contextmanager
def consuming(
    tracer: trace.Tracer,
    *,
    carrier: dict[str, str],
    subject: str,
    message_id: str,
    consumer: str,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> Iterator[trace.Span]:
    from opentelemetry import context, trace

    propagator, getter, _ = _propagation()
    parent = propagator.extract(carrier, getter=getter)
    token = context.attach(parent)
    try:
        with tracer.start_as_current_span(
            f"process {subject}",
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "messaging.system": "nats",
                "messaging.operation.type": "process",
                "messaging.destination.name": subject,
                "messaging.message.id": message_id,
                "messaging.consumer.group.name": consumer,
                **(attributes or {}),
            },
        ) as span:
            yield span
    finally:
        context.detach(token)
