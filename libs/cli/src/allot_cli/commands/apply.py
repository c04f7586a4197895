"""``allot apply -f FILE``: record Node, Device, NodeResourceTopology, Pod and ElasticQuota objects in the log.

Every document is validated first; if any is invalid nothing is recorded and each problem is printed with the
document, field path and reason. By default the command then waits until the services have handled what it
recorded (``--no-wait`` returns at once; ``--wait-each`` waits after every document, which makes a running stack
decide in exactly the order ``allot sim run`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from typing import Any

from allot_cli.connect import endpoints
from allot_cli.errors import UsageError
from allot_cli.logtools import wait_idle
from allot_cli.manifests import Input, admit_all, load_documents, to_input
from allot_contracts.envelope import NewEvent
from allot_eventstore.postgres import PostgresEventStore

VERBS = {"pod.submitted": "submitted", "pod.observed": "recorded (bound)", "object.ignored": "accepted (ignored)"}


async def record(url: str, inputs: list[Input], *, wait: bool, wait_each: bool, timeout: float) -> None:
    store = PostgresEventStore.connect(url)
    try:
        for item in inputs:
            if item.advance_seconds is not None:
                print(f"{item.document.label()}: AdvanceClock only moves the simulator's clock; skipped "
                      "(a running stack keeps real time)", file=sys.stderr)
                continue
            news = [NewEvent(stream_id=stream, event=event, event_id=str(uuid.uuid4())) for stream, event in item.events]
            await store.append(news, producer="api")
            for stream, event in item.events:
                tag = type(event).__struct_config__.tag.rsplit(".", 1)[0]
                kind = item.document.kind
                if kind == "Delete":
                    kind = str((item.document.body.get("spec") or {}).get("kind", kind))
                print(f"{kind.lower()}/{stream.split(':', 1)[1]} {VERBS.get(tag, tag.split('.')[-1])}")
            if wait_each:
                await wait_idle(store, timeout=timeout)
        if wait and not wait_each:
            await wait_idle(store, timeout=timeout)
    finally:
        await store.close()


def cmd_apply(args: argparse.Namespace) -> int:
    docs = [doc for path in args.filename for doc in load_documents(path)]
    if not docs:
        raise UsageError("no documents found")
    problems = list(admit_all(docs))
    if problems:
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        print(f"nothing was recorded ({len(problems)} problem(s))", file=sys.stderr)
        return 1
    inputs = [to_input(doc, uid_factory=lambda: str(uuid.uuid4())) for doc in docs]
    asyncio.run(record(endpoints().database_url, inputs, wait=not args.no_wait, wait_each=args.wait_each,
                       timeout=args.timeout))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("apply", help="record objects from YAML files in the event log")
    p.add_argument("-f", "--filename", action="append", required=True, help="YAML file ('-' for stdin); repeatable")
    p.add_argument("--no-wait", action="store_true", help="return without waiting for the services")
    p.add_argument("--wait-each", action="store_true", help="wait for the services after every document")
    p.add_argument("--timeout", type=float, default=120.0)
    p.set_defaults(func=cmd_apply)
