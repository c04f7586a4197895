"""Documents as read from YAML: one ``Document`` per manifest, read within bounds (file and document size, nesting,
value count) so a hostile or broken file is refused with a reason instead of exhausting memory.

Pure apart from reading the file; admission (``allot_intake.manifests``) takes the documents from here.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from allot_contracts.events import ObjectRef
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.admission import Admitted
from allot_intake.errors import InputError
from allot_intake.workloads import WORKLOAD_KINDS

__all__ = [
    "LIMITS",
    "NAMESPACED_DELETES",
    "Document",
    "Limits",
    "load_documents",
    "parse_documents",
    "read_yaml",
]

# Characters an integer in a document may have: more than any field's number (64-bit: 19 digits), few enough that
# converting it never fails (Python refuses to convert more than 4,300 digits, and that raised out of the reader).
MAX_INT_CHARS: Final = 64


def _bounded_int(loader: Any, node: yaml.ScalarNode) -> Any:
    """A YAML integer, as the safe loader reads it, unless it is longer than any field holds."""
    if len(node.value) > MAX_INT_CHARS:
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"an integer of {len(node.value)} characters; at most {MAX_INT_CHARS} are read",
            node.start_mark,
        )
    return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)


def _unique_keys(loader: Any, node: yaml.MappingNode) -> Any:
    """A YAML mapping, as the safe loader reads it, unless a key stands in it twice: kubectl refuses such a file
    (``key "name" already set in map``) where the reader kept the last value without a word. Keys a merge (``<<``)
    brings in may be overridden, as YAML has it."""
    seen: dict[tuple[str, str], yaml.ScalarNode] = {}
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
            first = seen.setdefault((key.tag, key.value), key).start_mark
            if first is not key.start_mark and first is not None:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"the key {key.value!r} stands twice (first on line {first.line + 1})",
                    key.start_mark,
                )
    yield from yaml.constructor.SafeConstructor.construct_yaml_map(loader, node)


_MERGE: Final = "tag:yaml.org,2002:merge"
_NUMBERS: Final = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


class _Expanded(yaml.YAMLError):
    """A document grew past the value budget while it was being constructed."""


class _BoundedConstructor:
    """Counts the values a document's construction makes, and refuses it past ``max_values`` before doing the work.

    Bounding the finished document (``_measure``) comes too late for YAML's merge key: ``<<: [*a, *a, ...]`` copies
    the merged mappings' entries into the merging one, so a few kilobytes of nested merges made hundreds of millions
    of entries (a 129 KB file took 51 s and 777 MB) before anything was measured. Here every value constructed is
    counted, an alias each time it is used, and a merge's copied entries are counted before they are copied.
    """

    max_values = 1_000_000
    _values = 0
    _flattened: set[yaml.Node] = set()  # noqa: RUF012 - replaced per document

    def _spend(self, count: int) -> None:
        self._values += count
        if self._values > self.max_values:
            raise _Expanded(
                f"expands to more than {self.max_values} values (YAML aliases and merge keys included)"
            )

    def construct_document(self, node: yaml.Node) -> Any:
        self._values, self._flattened = 0, set()
        return super().construct_document(node)  # type: ignore[misc]

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        self._spend(1)
        return super().construct_object(node, deep)  # type: ignore[misc]

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        if node in self._flattened:  # a mapping merged again: flattened once, its entries counted each time
            return
        for key, value in node.value:
            if key.tag == _MERGE:
                for sub in value.value if isinstance(value, yaml.SequenceNode) else [value]:
                    if isinstance(sub, yaml.MappingNode):
                        self.flatten_mapping(sub)
                        self._spend(2 * len(sub.value))  # its keys and values, before they are copied
        super().flatten_mapping(node)  # type: ignore[misc]
        self._flattened.add(node)


# libyaml when the wheel has it (same documents, faster), with integers bounded, keys unique and work counted
_LOADER: Any = type("_Loader", (_BoundedConstructor, getattr(yaml, "CSafeLoader", yaml.SafeLoader)), {})
_LOADER.add_constructor("tag:yaml.org,2002:int", _bounded_int)
_LOADER.add_constructor("tag:yaml.org,2002:map", _unique_keys)
# YAML 1.1's base-60 numbers (``1:20`` is 80, ``0000:01:00.0`` is 60.0) are text to Kubernetes, whose YAML reader has
# none: a PCI bus id written without quotes was read as a number. Plain scalars with a colon resolve as strings.
_LOADER.yaml_implicit_resolvers = {
    first: [
        (tag, re.compile("(?!.*:)" + regexp.pattern, regexp.flags) if tag in _NUMBERS else regexp)
        for tag, regexp in resolvers
    ]
    for first, resolvers in _LOADER.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True)
class Limits:
    max_file_bytes: int = 64 * 2**20
    max_document_bytes: int = 3 * 2**20  # the API server's request limit
    max_depth: int = 64
    max_nodes: int = 1_000_000


LIMITS: Final = Limits()

NAMESPACED_DELETES: Final = {"Pod", "ElasticQuota", "PodGroup", "ElasticQuotaProfile", "ConfigMap"}


@dataclass
class Document:
    source: str
    index: int
    body: JsonObject
    admitted: Admitted | None = None
    pods: list[tuple[JsonObject, Admitted]] = field(default_factory=list)  # a workload's pods, admitted

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion", ""))

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def ref(self) -> ObjectRef:
        meta = self.body.get("metadata") or {}
        meta = meta if isinstance(meta, dict) else {}
        namespaced = self.kind in NAMESPACED_DELETES or (self.api_version, self.kind) in WORKLOAD_KINDS
        namespace = str(meta.get("namespace") or ("default" if namespaced else ""))
        return ObjectRef(namespace=namespace if namespaced else "", name=str(meta.get("name") or ""))

    def label(self) -> str:
        ref = self.ref.key if self.kind not in ("Delete", "AdvanceClock", "NodeHeartbeat") else ""
        return f"{self.source} document {self.index + 1} ({self.kind or '?'}{' ' + ref if ref else ''})"


# --- reading YAML, bounded -----------------------------------------------------------------------------------------


def _measure(root: Any, limits: Limits) -> str | None:
    """Why ``root`` is too big or too deep, or None. Shared values (YAML aliases) are counted every time they are
    used, as a reader expanding them would; the walk itself visits each distinct value once."""
    sizes: dict[int, tuple[int, int]] = {}  # id -> (values, text bytes) of the expanded subtree
    stack: list[tuple[Any, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > limits.max_depth:
            return f"nested deeper than {limits.max_depth} levels"
        key = id(node)
        if isinstance(node, dict | list):
            if key in sizes and not done:
                continue
            children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
            if not done:
                stack.append((node, depth, True))
                for _, child in children:
                    if isinstance(child, dict | list):
                        stack.append((child, depth + 1, False))
                continue
            values, text = 1, 0
            for k, child in children:
                if isinstance(node, dict):
                    text += len(str(k))
                if isinstance(child, dict | list):
                    cv, ct = sizes[id(child)]
                else:
                    cv, ct = 1, len(child) if isinstance(child, str) else 8
                values, text = values + cv, text + ct
                if values > limits.max_nodes:
                    return f"expands to more than {limits.max_nodes} values (YAML aliases included)"
                if text > limits.max_document_bytes:
                    return f"expands to more than {limits.max_document_bytes} bytes of text (YAML aliases included)"
            sizes[key] = (values, text)
    return None


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}: not valid UTF-8 (byte {exc.start}, line {line}): {exc.reason}") from exc


def _load(text: str, path: str, limits: Limits, *, single: bool = False) -> list[Any]:
    """The documents of ``text`` as the reader reads them (bounded, keys unique, numbers as Kubernetes reads them), or
    :class:`InputError` saying why not; ``single``: the one document a config file holds."""
    bodies: list[Any] = []
    loader = _LOADER(text)
    loader.max_values = limits.max_nodes
    try:
        if single:
            bodies.append(loader.get_single_data())
        while not single and loader.check_data():
            bodies.append(loader.get_data())
    except RecursionError as exc:
        raise InputError(f"{path}: a document is nested too deeply to read") from exc
    except _Expanded as exc:
        raise InputError(f"{path} document {len(bodies) + 1}: refused: {exc}") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"{path} is not valid YAML: {exc}") from exc
    finally:
        loader.dispose()
    return bodies


def read_yaml(text: str, path: str, limits: Limits = LIMITS) -> Any:
    """The one document of a YAML (or JSON) file such as a config file, read as manifests are read: a key given twice,
    an integer too long to hold or a document that expands past the limits is an :class:`InputError`."""
    [body] = _load(text, path, limits, single=True)
    problem = _measure(body, limits) if isinstance(body, dict | list) else None
    if problem is not None:
        raise InputError(f"{path}: refused: {problem}")
    return body


def parse_documents(text: str, path: str, limits: Limits = LIMITS) -> list[Document]:
    bodies = _load(text, path, limits)
    docs = []
    for index, body in enumerate(bodies):
        if body is None:
            continue
        where = f"{path} document {index + 1}"
        if not isinstance(body, dict):
            raise InputError(f"{where}: expected a mapping, got {type(body).__name__}")
        problem = _measure(body, limits)
        if problem is not None:
            raise InputError(f"{where}: refused: {problem}")
        docs.append(Document(source=path, index=index, body=body))
    return docs


def load_documents(path: str, limits: Limits = LIMITS) -> list[Document]:
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limits.max_file_bytes + 1)
        else:
            with Path(path).open("rb") as f:
                data = f.read(limits.max_file_bytes + 1)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    if len(data) > limits.max_file_bytes:
        raise InputError(f"{path}: larger than {limits.max_file_bytes} bytes; split it into several files")
    return parse_documents(_decode(data, path), path, limits)
