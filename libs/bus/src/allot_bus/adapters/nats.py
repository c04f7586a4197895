"""NATS adapter: connecting, the JetStream stream, durable pull consumers, and error translation.

Driver exceptions (``nats.errors``, ``nats.js.errors``) stop here: callers see :mod:`allot_contracts.errors`.
Works with nats-server 2.9 and newer: multi-subject consumer filters (2.10+) are used when the server has them,
otherwise a consumer filters on ``<prefix>.events.>`` and skips other types itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Any
from urllib.parse import urlsplit

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api as jsapi
from nats.js import errors as jserrors

from allot_bus.adapters import natsauth
from allot_bus.adapters.natsauth import NatsAuth, NatsUnavailable
from allot_bus.names import BusNames
from allot_bus.outage import Outage
from allot_contracts.errors import InvalidInput
from allot_eventstore.urls import redact

log = logging.getLogger("allot.bus")

STREAM_MAX_AGE_S = 7 * 24 * 3600.0
DUPLICATE_WINDOW_S = 120.0

_BLANKS = " \t\n\r\x0b\x0c"  # what ``bytes.strip()`` strips
_SPACE = re.compile(r"\s")


class HeaderClient(Client):
    """nats-py's client, reading message headers in half the time.

    Every message of the log carries a dozen headers (the position, the hash, the CloudEvents attributes) and every
    service reads them for each message it is delivered: nats-py's own reader (15 µs for such a block, a tenth of a
    quota-manager's CPU in a burst) decodes and checks each name and value on its own. A block of ASCII, as the
    relay writes, is decoded once here and split the same way, with the same result; anything else goes to
    nats-py's reader."""

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, str]:
        if not raw.isascii():
            parsed: dict[str, str] = Client._parse_header_lines(raw)
            return parsed
        out: dict[str, str] = {}
        for line in raw.decode("ascii").split("\r\n"):
            name, sep, value = line.partition(":")
            if not sep:
                continue
            key = name.strip(_BLANKS)
            if _SPACE.search(key) is None:  # a name with blanks inside is not a header name: skipped
                out[key] = value.strip(_BLANKS)
        return out


async def connect(
    url: str,
    *,
    name: str,
    connect_timeout: float = 5.0,
    auth: NatsAuth | None = None,
    give_up_after: float | None = None,
    url_from: str = natsauth.URL_VARIABLE,
) -> Client:
    """Connect with reconnects forever (a control plane outlives broker restarts), authenticated as ``auth`` says
    (default: the ALLOT_NATS_* environment, :mod:`allot_bus.adapters.natsauth`; credentials may also be in ``url``).

    A server that is not up yet is waited for; one that refuses the credentials or the TLS handshake is not: that
    raises InvalidInput naming the setting to fix (for the URL: ``url_from``, the variable or the dev stack's
    ``stack.json`` it came from), since trying the same again cannot help. With ``give_up_after``
    (a command someone waits on), the first connection is tried for that many seconds only, its failures not logged
    one by one: then :class:`~allot_bus.adapters.natsauth.NatsUnavailable` says what failed last."""
    auth = natsauth.from_env() if auth is None else auth
    options: dict[str, Any] = {
        **natsauth.connect_options(auth, url, url_from=url_from),
        "name": name,
        "connect_timeout": connect_timeout,
        "max_reconnect_attempts": -1,  # forever
        "reconnect_time_wait": 0.5,
        "allow_reconnect": True,
    }
    refused: asyncio.Future[InvalidInput] = asyncio.get_running_loop().create_future()
    failures: list[Exception] = []
    # the driver retries every ``reconnect_time_wait`` for as long as NATS is away: one warning, one line at the end
    outage = Outage(f"NATS at {redact(url)}", log)

    async def _error(exc: Exception) -> None:
        problem = natsauth.refusal(exc, auth, url, url_from=url_from)
        if problem is not None and not refused.done():
            refused.set_result(problem)
        if give_up_after is not None and not connecting.done():
            failures[:] = [exc]  # the first connection's: said once, in the error that ends the wait
            return
        if (
            nc.is_connected
        ):  # a problem while connected (a slow consumer, a permission refused): said each time
            log.warning("nats connection problem: %s", exc)
        else:
            outage.failed("nats connection problem", exc)

    async def _reconnected() -> None:
        outage.over()

    nc = HeaderClient()
    connecting: asyncio.Future[Any] = asyncio.ensure_future(
        nc.connect(url, error_cb=_error, reconnected_cb=_reconnected, **options)
    )
    try:
        await asyncio.wait([connecting, refused], return_when=asyncio.FIRST_COMPLETED, timeout=give_up_after)
    finally:
        if not connecting.done():
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await connecting
    if refused.done() and not nc.is_connected:
        with contextlib.suppress(Exception):
            await nc.close()
        raise refused.result()
    refused.cancel()
    if connecting.cancelled():  # given up on: ``give_up_after`` passed
        with contextlib.suppress(Exception):
            await nc.close()
        reason = (str(failures[-1]) or type(failures[-1]).__name__) if failures else "no answer"
        raise NatsUnavailable(f"cannot connect to NATS at {redact(url)} within {give_up_after:g} s: {reason}")
    try:
        connecting.result()
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        raise NatsUnavailable(f"cannot connect to NATS at {redact(url)}: {exc}") from exc
    outage.over()  # a server that was waited for at the start answers now
    if urlsplit(url).scheme == "tls" and not nc._server_info.get("tls_required"):
        # The driver upgrades to TLS only when the server asks for it: a tls:// URL must not end up in plain text.
        with contextlib.suppress(Exception):
            await nc.close()
        raise InvalidInput(
            [
                (
                    url_from,
                    "is tls:// but the server does not require TLS, so the connection was plain text",
                )
            ],
            subject=f"NATS at {redact(url)}",
        )
    return nc


def server_version(nc: Client) -> tuple[int, int, int]:
    raw = str(nc._server_info.get("version", "0.0.0"))
    parts = [int(p) if p.isdigit() else 0 for p in raw.split("-")[0].split(".")[:3]]
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def supports_multi_filter(nc: Client) -> bool:
    return server_version(nc) >= (2, 10, 0)


def stream_config(names: BusNames, *, replicas: int = 1) -> jsapi.StreamConfig:
    return jsapi.StreamConfig(
        name=names.stream,
        subjects=[names.all_events],
        storage=jsapi.StorageType.FILE,
        retention=jsapi.RetentionPolicy.LIMITS,
        max_age=STREAM_MAX_AGE_S,
        duplicate_window=DUPLICATE_WINDOW_S,
        num_replicas=replicas,
    )


async def ensure_stream(js: JetStreamContext, names: BusNames) -> jsapi.StreamInfo:
    try:
        return await js.stream_info(names.stream)
    except jserrors.NotFoundError:
        try:
            return await js.add_stream(stream_config(names))
        except jserrors.APIError as exc:
            raise NatsUnavailable(f"cannot create stream {names.stream}: {exc}") from exc
    except (TimeoutError, jserrors.Error, nats.errors.Error) as exc:
        raise NatsUnavailable(f"JetStream unavailable: {exc}") from exc


async def stream_exists(js: JetStreamContext, names: BusNames) -> bool:
    try:
        await js.stream_info(names.stream)
        return True
    except jserrors.NotFoundError:
        return False


def is_missing(exc: BaseException) -> bool:
    """The stream or consumer is gone (server restarted without its store, or it was deleted)."""
    if isinstance(exc, jserrors.NotFoundError):
        return True
    if isinstance(exc, jserrors.APIError):
        return exc.err_code in (10014, 10059, 10003) or exc.code == 404
    text = str(exc).lower()
    return "consumer not found" in text or "stream not found" in text or "no responders" in text


def is_wrong_last(exc: BaseException) -> bool:
    """A publish's ``Nats-Expected-Last-Msg-Id`` / ``Nats-Expected-Last-Sequence`` did not match the stream."""
    return isinstance(exc, jserrors.APIError) and exc.err_code in (10070, 10071)


def is_refused(exc: BaseException) -> bool:
    """The server will not store this message as things stand: larger than the stream's ``max_msg_size`` (10054) or
    the server's ``max_payload``, the stream's limits reached with discard-new (10077), or JetStream out of storage
    (10023, 10028, 10047). Retrying helps only once an operator has acted."""
    if isinstance(exc, nats.errors.MaxPayloadError):
        return True
    return isinstance(exc, jserrors.APIError) and exc.err_code in (10054, 10077, 10023, 10028, 10047)


async def stream_limits(js: JetStreamContext, names: BusNames) -> str:
    """The stream's storage limits, for error messages ("unknown" when they cannot be read)."""
    try:
        config = (await js.stream_info(names.stream)).config
    except (TimeoutError, jserrors.Error, nats.errors.Error):
        return "unknown"
    discard = getattr(config.discard, "value", config.discard)
    return (
        f"max_msg_size={config.max_msg_size}, max_bytes={config.max_bytes}, max_msgs={config.max_msgs}, "
        f"discard={discard}"
    )


def client_of(js: JetStreamContext) -> Client:
    """The connection a JetStream context publishes on."""
    nc: Client = js._nc
    return nc


def max_payload(js: JetStreamContext) -> int:
    """The largest message (payload and headers) the connected server accepts; it drops the connection of a client
    that sends more."""
    return int(js._nc.max_payload)


def message_size(payload: bytes, headers: dict[str, str]) -> int:
    """What a message counts against ``max_payload``: the payload plus the encoded header block."""
    if not headers:
        return len(payload)
    header_block = len("NATS/1.0\r\n\r\n") + sum(len(f"{k}: {v}\r\n".encode()) for k, v in headers.items())
    return len(payload) + header_block


async def ensure_durable(
    js: JetStreamContext,
    names: BusNames,
    *,
    durable: str,
    subjects: list[str],
    multi_filter: bool,
    ack_wait: float = 30.0,
    max_ack_pending: int = 2000,
) -> None:
    """Create the durable pull consumer if it is missing, or re-create it when its filter, ack policy or ack window
    differ from ours. New consumers start with new messages only: whatever was published before is read from
    PostgreSQL by the consumer's catch-up, which runs after this.

    Acks are "all": acknowledging a message acknowledges every earlier one, so a batch costs one ack."""
    config = jsapi.ConsumerConfig(
        durable_name=durable,
        deliver_policy=jsapi.DeliverPolicy.NEW,
        ack_policy=jsapi.AckPolicy.ALL,
        ack_wait=ack_wait,
        max_ack_pending=max_ack_pending,
        max_deliver=-1,
    )
    if multi_filter and len(subjects) > 1:
        config.filter_subjects = subjects
    elif len(subjects) == 1:
        config.filter_subject = subjects[0]
    else:
        config.filter_subject = names.all_events
    try:
        current = (await js.consumer_info(names.stream, durable)).config
    except jserrors.NotFoundError:
        await js.add_consumer(names.stream, config)
        return
    same = (
        (current.filter_subjects or [current.filter_subject or ""])
        == (config.filter_subjects or [config.filter_subject or ""])
        and current.ack_policy == config.ack_policy
        and current.max_ack_pending == config.max_ack_pending
    )
    if not same:
        await js.delete_consumer(names.stream, durable)
        await js.add_consumer(names.stream, config)
