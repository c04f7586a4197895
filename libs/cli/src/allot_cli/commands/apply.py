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


ENDS_A_POD = frozenset({"pod.deleted", "quota.evicted"})


async def existing_pods(store: PostgresEventStore, inputs: list[Input]) -> list[str]:
    """Pods the documents would submit although they already exist (recorded and not deleted since): a pod is
    created once; to change one, delete it and apply it again."""
    clashes: list[str] = []
    live: dict[str, bool] = {}
    for item in inputs:
        for stream, event in item.events:
            kind = type(event).__struct_config__.tag.rsplit(".", 1)[0]
            if not stream.startswith("pod:"):
                continue
            key = stream.split(":", 1)[1]
            if key not in live:
                history = await store.read_stream(stream)
                lifecycle = [r.type for r in history if r.type in ENDS_A_POD | {"pod.submitted", "pod.observed"}]
                live[key] = bool(lifecycle) and lifecycle[-1] not in ENDS_A_POD
            if kind in ("pod.submitted", "pod.observed"):
                if live[key]:
                    clashes.append(f"{item.document.label()}: pod {key} already exists (delete it first to replace it)")
                live[key] = True
            elif kind == "pod.deleted":
                live[key] = False
    return clashes


async def record(url: str, inputs: list[Input], *, wait: bool, wait_each: bool, timeout: float,
                 check_existing: bool = True) -> None:
    store = PostgresEventStore.connect(url)
    try:
        if check_existing:
            clashes = await existing_pods(store, inputs)
            if clashes:
                raise UsageError("nothing was recorded:\n  " + "\n  ".join(clashes))
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
