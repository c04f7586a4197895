"""The web audit view as a process (``allot-ui``, ``python -m allot_ui``, also ``allot ui``): read-only pages over the
log, with the health, readiness and metrics endpoints every Allot process has (``allot_ui.server``).

Finds the log as every command does (``ALLOT_DATABASE_URL``, else the dev stack's state); listens on ``--host`` /
``--port`` (``ALLOT_UI_HOST``, ``ALLOT_UI_PORT``; 127.0.0.1:8088 by default) and reads the log every ``--poll``
seconds; a read of the log that gets no answer in ``--read-timeout`` seconds (``ALLOT_UI_READ_TIMEOUT``, 10 by
default) fails, so a database that stops answering makes pages answer 503 and ``/readyz`` not ready instead of
hanging them. Logs as the services do (``ALLOT_LOG_LEVEL``, ``ALLOT_LOG_FORMAT``). A log it cannot find or an address it
cannot listen on stops it at once with one line and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from allot_runtime import flags

READ_TIMEOUT_S = 10.0


def add_arguments(parser: Any) -> None:
    """The view's arguments (``allot-ui`` and ``allot ui`` take the same ones)."""
    parser.add_argument(
        "--host", default=os.environ.get("ALLOT_UI_HOST", "127.0.0.1"), help="address to listen on"
    )
    parser.add_argument(
        "--port",
        type=flags.port,
        default=os.environ.get("ALLOT_UI_PORT", "8088"),
        help="port (default: ALLOT_UI_PORT, else 8088)",
    )
    parser.add_argument(
        "--poll", type=flags.seconds, default=0.5, help="seconds between reads of the log (default 0.5)"
    )
    parser.add_argument(
        "--read-timeout",
        type=flags.seconds,
        default=os.environ.get("ALLOT_UI_READ_TIMEOUT", str(READ_TIMEOUT_S)),
        help=f"seconds a read of the log may take before it fails (default: ALLOT_UI_READ_TIMEOUT, else "
        f"{READ_TIMEOUT_S:g})",
    )


async def serve_until_stopped(
    database_url: str, host: str, port: int, poll: float, name: str, *, read_timeout: float = READ_TIMEOUT_S
) -> None:
    """Serve the view of the log at ``database_url`` until SIGTERM or SIGINT."""
    from allot_eventstore.postgres import PostgresEventStore
    from allot_runtime.signals import stop_on_signals, unless_stopped
    from allot_ui.model import UiModel
    from allot_ui.server import serve

    store = PostgresEventStore.connect(
        database_url, read_timeout=read_timeout, timeouts_from="--read-timeout or ALLOT_UI_READ_TIMEOUT"
    )
    stop = stop_on_signals()
    try:  # the first read of the log may be long: a signal ends it too
        runner = await unless_stopped(serve(UiModel(store), host, port, poll=poll), stop)
    except BaseException:
        await store.close()
        raise
    if runner is None:
        await store.close()
        return
    try:
        print(f"{name}: serving the audit view on http://{host}:{port}/", file=sys.stderr)
        await stop.wait()
    finally:
        await runner.cleanup()
        await store.close()


def run(database_url: str, args: argparse.Namespace, name: str) -> int:
    """Serve until stopped; 2 (and one line) when the address cannot be listened on, 1 when the log cannot be read."""
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                serve_until_stopped(
                    database_url, args.host, args.port, args.poll, name, read_timeout=args.read_timeout
                )
            )
    except OSError as exc:
        print(f"{name}: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from allot_eventstore.pg_errors import connection_refusal

        refusal = connection_refusal(exc)
        if refusal is None:
            raise
        print(f"{name}: cannot read the event log: {refusal}", file=sys.stderr)
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    """``allot-ui``'s command line."""
    return flags.process_parser("allot-ui", "Serve the web audit view (read-only) of the log.", add_arguments)


def main(argv: Sequence[str] | None = None) -> None:
    """``allot-ui``: the view as a service process."""
    from allot_intake.errors import UsageError
    from allot_runtime import logs, memory
    from allot_stack.connect import endpoints

    args = parser().parse_args(argv)
    logs.setup(
        "ui", level=os.environ.get("ALLOT_LOG_LEVEL", "INFO"), fmt=os.environ.get("ALLOT_LOG_FORMAT", "json")
    )
    memory.configure()
    try:
        database_url = endpoints().database_url
    except UsageError as exc:
        print(f"allot-ui: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.getLogger("allot.ui").info("web view reading the log, serving on %s:%s", args.host, args.port)
    sys.exit(run(database_url, args, "allot-ui"))
