"""Reading gang fields out of manifest metadata while collecting ``FieldIssue``s (used by :mod:`.gang`).

Every helper records an error with the field path instead of raising, and returns None for a value it refused,
so one pass reports every problem of a manifest at once.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from allot_contracts.issues import FieldIssue, annotation_path, label_path, not_acted_on

_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_COUNT: Final = re.compile(r"^[0-9]+\Z")
SUBDOMAIN_REASON: Final = (
    "must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.'; at most 253 characters)"
)


def is_name(text: str) -> bool:
    return len(text) <= 253 and bool(_SUBDOMAIN.match(text))


def is_namespace(text: str) -> bool:
    return len(text) <= 63 and bool(_LABEL.match(text))


class Reader:
    """Collects errors while reading string fields out of a manifest's metadata maps."""

    def __init__(self, annotations: dict[str, Any], labels: dict[str, Any]) -> None:
        self.ann, self.labels = annotations, labels
        self.errors: list[FieldIssue] = []
        self.warnings: list[FieldIssue] = []

    def error(self, path: str, reason: str, value: object = "") -> None:
        self.errors.append(FieldIssue(path=path, message=reason, value="" if value is None else str(value)))

    def text(self, where: dict[str, Any], key: str, path: str) -> str | None:
        if key not in where:
            return None
        value = where[key]
        if not isinstance(value, str):
            self.error(path, "must be a string", value)
            return None
        return value

    def first_of(self, sources: list[tuple[str, str]], what: str) -> tuple[str, str] | None:
        """The first present value among ``(where, key)`` sources ("ann"/"label"); later ones must agree."""
        found: tuple[str, str] | None = None
        for where, key in sources:
            path = annotation_path(key) if where == "ann" else label_path(key)
            value = self.text(self.ann if where == "ann" else self.labels, key, path)
            if value is None:
                continue
            if found is None:
                found = (value, path)
            elif value != found[0]:
                self.error(path, f"gives {what} {value!r} but {found[1]} gives {found[0]!r}", value)
        return found

    def count(self, found: tuple[str, str] | None, low: int = 1) -> int | None:
        if found is None:
            return None
        value, path = found
        if not _COUNT.match(value):
            self.error(path, "must be a whole number", value)
            return None
        if len(value) > 18:  # beyond any count (and beyond what int() converts, past 4,300 digits)
            self.error(path, "is out of range", value[:24] + "...")
            return None
        n = int(value)
        if n < low:
            self.error(path, f"must be >= {low}", value)
            return None
        return n

    def choice(self, found: tuple[str, str] | None, choices: tuple[str, ...]) -> str | None:
        if found is None:
            return None
        if found[0] not in choices:
            self.error(found[1], "must be one of " + ", ".join(choices) + " (case-sensitive)", found[0])
            return None
        return found[0]

    def groups(self, found: tuple[str, str] | None, own: str | None) -> tuple[str, ...] | None:
        if found is None:
            return None
        value, path = found
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            self.error(path, f'must be a JSON list of "namespace/name" gang ids ({detail})', value)
            return None
        if not isinstance(parsed, list) or not parsed or not all(isinstance(x, str) for x in parsed):
            self.error(path, 'must be a non-empty JSON list of "namespace/name" gang ids', value)
            return None
        seen: set[str] = set()
        for i, gid in enumerate(parsed):
            ns, _, name = gid.partition("/")
            if not (is_namespace(ns) and is_name(name)):
                self.error(path, f'entry {i} ({gid!r}) is not a "namespace/name" gang id', value)
                return None
            if gid in seen:
                self.error(path, f"lists {gid!r} more than once", value)
                return None
            seen.add(gid)
        if own is not None and own not in seen:
            self.error(path, f"must include this gang's own id {own!r}", value)
            return None
        return tuple(sorted(seen))

    def unknown_keys(
        self, prefix: str, allowed: set[str], refused: dict[str, str], ignored: dict[str, str]
    ) -> None:
        """Keys under ``prefix`` that are not ``allowed``: ``refused`` ones with their reason, ``ignored`` ones as
        warnings (read, not acted on), any other as an error naming the known keys (a typo must not silently drop
        a setting)."""
        for key in sorted(self.ann):
            if key in refused:
                self.error(annotation_path(key), refused[key], self.ann[key])
            elif key in ignored:
                self.warnings.append(not_acted_on(annotation_path(key), ignored[key]))
            elif key.startswith(prefix) and key not in allowed:
                self.error(
                    annotation_path(key),
                    "unknown gang annotation; known keys: "
                    + ", ".join(sorted(x.removeprefix(prefix) for x in allowed | set(ignored))),
                    self.ann[key],
                )
