"""The documents a what-if asks about: Pods and PodGroups, read strictly (an unknown field is refused with its path,
as ``kubectl apply --validate=strict`` refuses it), then admitted by the door ``allot apply`` uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from allot_intake.errors import InputError, UsageError

if TYPE_CHECKING:
    from allot_intake.documents import Document
    from allot_intake.manifests import Door, Input

KINDS = ("Pod", "PodGroup")


def read(paths: list[str]) -> list[Document]:
    """The documents of ``paths`` ('-': stdin), every one a Pod or PodGroup with only known fields."""
    from allot_intake.documents import load_documents
    from allot_intake.known_fields import unknown_fields

    try:
        docs = [doc for path in paths for doc in load_documents(path)]
    except InputError as exc:
        raise UsageError(str(exc)) from exc
    if not docs:
        raise UsageError("-f: no documents found")
    problems: list[str] = []
    for doc in docs:
        if doc.kind not in KINDS:
            problems.append(
                f"{doc.label()}: kind: a what-if asks about Pods and PodGroups, not {doc.kind or '?'}"
            )
            continue
        problems += [
            f"{doc.label()}: {issue}" for issue in unknown_fields(doc.api_version, doc.kind, doc.body)
        ]
    if problems:
        raise UsageError("invalid input:\n  " + "\n  ".join(problems))
    return docs


def admitted(docs: list[Document], door: Door) -> tuple[list[Input], list[str], list[str]]:
    """The documents as the events ``allot apply`` would record, the pods asked about ("ns/name") and the door's
    warnings; a document the door refuses is a :class:`UsageError` naming each refused field."""
    from allot_intake.manifests import to_input

    verdicts = door.check_all(docs)
    refused = [line for verdict in verdicts for line in verdict.lines("error", verdict.issues)]
    if refused:
        raise UsageError("invalid input:\n  " + "\n  ".join(refused))
    warnings = [line for verdict in verdicts for line in verdict.lines("warning", verdict.warnings)]
    keys = [doc.ref.key for doc in docs if doc.kind == "Pod"]
    return [to_input(doc) for doc in docs], keys, warnings
