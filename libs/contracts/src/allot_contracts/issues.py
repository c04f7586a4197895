"""Why an input was refused: one value type for every validator in Allot.

``FieldIssue`` names the offending field by its path in the manifest, in Kubernetes notation
(``spec.containers[0].resources.requests[cpu]``, ``metadata.annotations["scheduling.koordinator.sh/device-allocate-hint"]
.gpu.requiredTopologyScope``), says why in words (upstream's wording where users already know it), carries a stable
``code`` for machines (``InvalidField``, ``InvalidQuantity``, ``Required``, ``Forbidden``, ``NotSupported``, …) and,
when useful, the offending ``value`` as text. Validators return ``list[FieldIssue]`` (empty = valid) and never raise
on bad user input; the same issues travel in rejection events, in ``allot apply``'s output and in ``explain``.

Issues are also used for warnings (something read but not acted on): the same shape, reported instead of refused.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

__all__ = ["FieldIssue", "annotation_path", "format_issues", "label_path"]


class FieldIssue(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One problem with one field: where (``path``), why (``message``), a stable ``code`` and the ``value`` given."""

    path: str
    message: str
    code: str = "InvalidField"
    value: str = ""

    def __str__(self) -> str:
        shown = f" (got {self.value!r})" if self.value else ""
        return f"{self.path}: {self.message}{shown}" if self.path else f"{self.message}{shown}"

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {"path": self.path, "message": self.message, "code": self.code}
        if self.value:
            out["value"] = self.value
        return out


def annotation_path(key: str, suffix: str = "") -> str:
    """The field path of an annotation value, optionally followed by a JSON path inside it."""
    return f'metadata.annotations["{key}"]{suffix}'


def label_path(key: str) -> str:
    return f'metadata.labels["{key}"]'


def format_issues(issues: Iterable[FieldIssue]) -> str:
    """One line listing every issue, in the order given."""
    return "; ".join(str(i) for i in issues)
