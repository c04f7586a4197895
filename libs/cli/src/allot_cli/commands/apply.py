"""``allot apply -f FILE``: record objects (the kinds of :mod:`allot_intake.manifests`) in the log.

Every document is admitted first (the door: :mod:`allot_contracts.objects.admission`), knowing the PriorityClasses,
elastic quotas, ClusterColocationProfiles and Namespaces already recorded; a new pod is mutated by the matching
profiles first, as Koordinator's mutating webhook does (:meth:`allot_intake.manifests.Door.admit_pod`). As
``kubectl apply`` does, the valid documents are recorded and each refused one is reported with the document, field
path and reason, and the command then exits 1; with ``--atomic`` nothing is recorded unless every document is
valid. Anything read but not acted on is printed as a warning per object. Recording (batches, retries of transient
database failures, what was recorded when the database stays away) is :func:`allot_stack.apply.record`. By default
the command then waits until the services have handled what it recorded (``--no-wait`` returns at once;
``--wait-each`` records and waits one document at a time, which makes a running stack decide in exactly the order
``allot sim run`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from typing import TYPE_CHECKING, Any

from allot_cli.files import file_name
from allot_intake.errors import InputError
from allot_runtime.flags import seconds

if TYPE_CHECKING:  # the engines, drivers and contracts are imported by the functions that run the command
    from allot_intake.documents import Document
    from allot_intake.manifests import Verdict


def report(verdicts: list[Verdict]) -> tuple[list[Document], int]:
    """Print warnings and refusals; the documents to record and the number refused."""
    from allot_intake.manifests import tell

    return tell(verdicts, lambda line: print(line, file=sys.stderr))


def cmd_apply(args: argparse.Namespace) -> int:
    from allot_intake.documents import load_documents
    from allot_intake.manifests import to_input
    from allot_stack.apply import door_for, record
    from allot_stack.connect import endpoints

    docs = [doc for path in args.filename for doc in load_documents(path)]
    if not docs:
        raise InputError("no documents found")
    url = endpoints().database_url
    door = asyncio.run(door_for(url))
    accepted, refused = report(door.check_all(docs))
    if refused and (args.atomic or not accepted):
        print(f"nothing was recorded ({refused} document(s) refused)", file=sys.stderr)
        return 1
    inputs = [to_input(doc, uid_factory=lambda: str(uuid.uuid4())) for doc in accepted]
    asyncio.run(
        record(
            url,
            inputs,
            wait=not args.no_wait,
            wait_each=args.wait_each,
            timeout=args.timeout,
        )
    )
    if refused:
        print(f"{refused} document(s) refused, {len(accepted)} recorded", file=sys.stderr)
        return 1
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("apply", help="record objects from YAML files in the event log")
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        type=file_name,
        required=True,
        help="YAML file ('-' for stdin); repeatable",
    )
    p.add_argument("--no-wait", action="store_true", help="return without waiting for the services")
    p.add_argument("--wait-each", action="store_true", help="wait for the services after every document")
    p.add_argument("--timeout", type=seconds, default=120.0)
    p.add_argument(
        "--atomic",
        action="store_true",
        help="record nothing unless every document is valid (default: record the valid ones, report the others)",
    )
    p.set_defaults(func=cmd_apply)
