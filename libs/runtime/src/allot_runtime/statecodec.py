"""A data-only codec for a processor's object graph: what a snapshot stores (docs/adr/0011-bounded-verification.md).

``dumps(value)`` walks an object graph and encodes it as MessagePack (msgspec); ``loads(data)`` rebuilds it. The
walk holds what it has encoded as bytes, not as a nested copy of the graph: a node with many objects under it, and
the items of a wide container every ``PACK`` objects, are encoded as soon as they are complete (the same bytes as
encoding the whole at once); ``export_state_parts`` hands the state over in those parts, unjoined.
Shared references and cycles are kept exactly: every container and object is numbered the first time it is met, and
met again it is written as a reference, so an object reachable twice comes back as one object. Supported: ``None``,
``bool``, ``int``, ``float``, ``str``, ``bytes``; ``dict`` (insertion order kept), ``OrderedDict``, ``Counter``,
``defaultdict`` (factory from an allowlist), ``list``, ``tuple``, ``set``, ``frozenset``, ``deque``; ``Enum`` members;
msgspec ``Struct`` instances (rebuilt through their constructor); dataclasses and plain objects with ``__dict__`` and/or
``__slots__`` (made with ``cls.__new__`` and attribute assignment: no ``__init__``, no ``__setstate__``); classes,
module-level functions and bound methods.

Data only: a class or function is named, never serialised, and on decode it is looked up only in modules that are
already imported and whose names are allowed (the ``allot_*`` libraries and the service packages); nothing is imported
and no constructor other than a ``Struct``'s runs. A forged snapshot can therefore at worst describe a wrong state,
which the digest check on load catches. Anything else (a lambda, a lock, an unknown class) is refused on export with
the path of the attribute that holds it; malformed bytes or a refused name are refused on load with the reason.
A state also carries the fingerprint of the source of the modules its classes come from (:func:`code_fingerprint`),
and is loaded only by the same code: after an upgrade that changes a projection's classes, the service folds the log
instead of rebuilding objects with fields of an older release.

``export_state(root, keep)`` / ``restore_state(data, fresh, keep)`` snapshot a processor: ``keep`` names attribute paths
(``"engine.policy"``) whose values are not encoded but taken from ``fresh``, an instance built from the same
configuration; everything else is overlaid onto ``fresh``.
"""

from __future__ import annotations

import collections
import decimal
import enum
import fractions
import sys
import types
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import msgspec

__all__ = [
    "FORMAT",
    "StateCodecError",
    "code_fingerprint",
    "dumps",
    "export_state",
    "export_state_parts",
    "loads",
    "restore_state",
]

from allot_runtime import stateformat as fmt
from allot_runtime.statedecode import Decoder
from allot_runtime.stateformat import (
    BUILTIN_TYPES,
    FORMAT,
    StateCodecError,
    allowed_module,
    code_fingerprint,
    slot_names,
)

_PRIMITIVES = frozenset({type(None), bool, int, float, str, bytes})
_PLAIN = frozenset(
    {type(None), bool, float, str, bytes}
)  # stored as themselves, no check (ints have a range)
_PLAIN_INTS = _PLAIN | {
    int
}  # the first try: an int beyond 64 bits makes msgspec refuse, then ints are checked
_INT_RANGE = (-(2**63), 2**64)
PACK = 1024  # a node this large (objects numbered within it, or items) is held encoded while the walk goes on


class _Unencodable(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: list[str] = []


class _Encoder:
    def __init__(self, allowed: Collection[str], plain: frozenset[type] = _PLAIN) -> None:
        self.allowed = allowed
        self.plain = plain
        self.memo: dict[int, int] = {}
        self.alive: list[Any] = []  # every numbered object, so that no id is reused while encoding
        self.busy: set[int] = (
            set()
        )  # immutable containers being walked (a cycle through one cannot be rebuilt)
        self.names: dict[str, int] = {}
        self.slots: dict[type, list[str]] = {}

    def register(self, value: Any) -> None:
        self.memo[id(value)] = len(self.alive)
        self.alive.append(value)

    def name_of(self, obj: Any, what: str) -> int:
        module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
            raise _Unencodable(f"{what} {obj!r} has no importable name")
        name = f"{module}:{qualname}"
        if name not in BUILTIN_TYPES and not allowed_module(module, self.allowed):
            raise _Unencodable(f"{what} {name} is not from an allowed module")
        index = self.names.get(name)
        if index is None:
            index = self.names[name] = len(self.names)
        return index

    def value(self, value: Any) -> Any:
        kind = type(value)
        if kind in _PRIMITIVES:
            if kind is int and not _INT_RANGE[0] <= value < _INT_RANGE[1]:
                return [fmt.BIGINT, str(value)]
            return value
        ref = self.memo.get(id(value))
        if ref is not None:
            return [fmt.REF, ref]
        if id(value) in self.busy:
            raise _Unencodable(f"a cycle through an immutable {kind.__name__} cannot be encoded")
        start = len(self.alive)
        if kind is dict:
            self.register(value)
            return self.packed(self.items(value, [fmt.DICT]), start)
        if kind is list:
            self.register(value)
            return self.packed(self.each(value, [fmt.LIST]), start)
        if kind is tuple or kind is frozenset:
            return self.packed(self.immutable(value, fmt.TUPLE if kind is tuple else fmt.FROZENSET), start)
        if kind is set:
            self.register(value)
            return self.packed(self.each(_ordered(value), [fmt.SET]), start)
        return self.packed(self.other(value, kind), start)

    def packed(self, node: Any, start: int) -> Any:
        """``node``, or its MessagePack bytes when it is large (``PACK`` objects numbered within it, or ``PACK``
        items): the encoded state is the same bytes, but the walk holds a compact copy of what it has done instead
        of the nested lists, which take several times the memory of their encoding."""
        if len(self.alive) - start < PACK and (type(node) is not list or len(node) < PACK):
            return node
        return msgspec.Raw(msgspec.msgpack.encode(node))

    # The loops below inline the common case (a value stored as itself) to save a call per item: most of a large
    # projection is strings and numbers. They build a container's node, ``head`` then the items; once the items
    # walked so far hold ``PACK`` numbered objects they are encoded and dropped (:meth:`flush`), so that a wide
    # container (every node of a cluster, every pod) is never held as nested lists all at once.
    def each(self, values: Iterable[Any], head: list[Any]) -> Any:
        out, done, skip = head, _Done(), len(head)
        append, value, plain, alive = out.append, self.value, self.plain, self.alive
        mark = len(alive)
        try:
            for item in values:
                if type(item) in plain:
                    append(item)
                    continue
                append(value(item))
                if len(alive) - mark >= PACK:
                    out = done.flush(out)
                    append, mark = out.append, len(alive)
        except _Unencodable as exc:
            exc.path.append(f"[{done.count + len(out) - skip}]")
            raise
        return done.node(out)

    def items(self, mapping: Mapping[Any, Any], head: list[Any]) -> Any:
        out, done = head, _Done()
        append, value, plain, alive = out.append, self.value, self.plain, self.alive
        mark = len(alive)
        key: Any = None
        try:
            for key, item in mapping.items():
                append(key if type(key) in plain else value(key))
                append(item if type(item) in plain else value(item))
                if len(alive) - mark >= PACK:
                    out = done.flush(out)
                    append, mark = out.append, len(alive)
        except _Unencodable as exc:
            exc.path.append(f"[{key!r}]")
            raise
        return done.node(out)

    def immutable(self, value: Any, tag: int) -> Any:
        self.busy.add(id(value))
        try:
            node = self.each(_ordered(value) if tag == fmt.FROZENSET else value, [tag])
        finally:
            self.busy.discard(id(value))
        self.register(value)
        return node

    def other(self, value: Any, kind: type) -> Any:
        if isinstance(value, enum.Enum):
            return [fmt.ENUM, self.name_of(kind, "class"), value.name]
        if isinstance(value, msgspec.Struct):
            fields = value.__struct_fields__
            node = [fmt.STRUCT, self.name_of(kind, "class")]
            self.busy.add(id(value))
            try:
                node.extend(self.attributes(value, fields))
            finally:
                self.busy.discard(id(value))
            self.register(value)
            return node
        if kind is fractions.Fraction:
            return [fmt.FRACTION, value.numerator, value.denominator]
        if kind is decimal.Decimal:
            return [fmt.DECIMAL, str(value)]
        if kind is collections.deque:
            self.register(value)
            return self.each(value, [fmt.DEQUE, value.maxlen])
        if kind is collections.OrderedDict or kind is collections.Counter:
            self.register(value)
            return self.items(value, [fmt.ODICT if kind is collections.OrderedDict else fmt.COUNTER])
        if kind is collections.defaultdict:
            self.register(value)
            factory = value.default_factory
            return self.items(value, [fmt.DDICT, None if factory is None else self.value(factory)])
        if isinstance(value, type):
            return [fmt.TYPE, self.name_of(value, "class")]
        if kind is types.FunctionType:
            module = sys.modules.get(value.__module__)
            if getattr(module, value.__qualname__, None) is not value:
                raise _Unencodable(f"function {value.__qualname__} is not a module-level function")
            return [fmt.FUNCTION, self.name_of(value, "function")]
        if kind is types.MethodType:
            node = [fmt.METHOD, self.value(value.__self__), value.__func__.__name__]
            self.register(value)
            return node
        return self.instance(value, kind)

    def instance(self, value: Any, kind: type) -> Any:
        builtin = next(
            (b for b in (dict, list, tuple, set, str, int, bytes, float) if isinstance(value, b)), None
        )
        if builtin not in (None, dict, list) or not (
            hasattr(value, "__dict__") or hasattr(kind, "__slots__")
        ):
            what = f"a subclass of {builtin.__name__}" if builtin else "an object with no attributes to store"
            raise _Unencodable(f"{kind.__module__}.{kind.__qualname__} is {what}")
        tag = fmt.OBJECT if builtin is None else fmt.SUBDICT if builtin is dict else fmt.SUBLIST
        node: list[Any] = [tag, self.name_of(kind, "class")]
        self.register(value)
        slots = self.slots.get(kind)
        if slots is None:
            slots = self.slots[kind] = slot_names(kind)
        attributes = self.fields(getattr(value, "__dict__", None) or {})
        if slots:
            attributes.extend(self.attributes(value, [s for s in slots if hasattr(value, s)]))
        if tag == fmt.OBJECT:
            node.extend(attributes)
            return node
        # the attributes, then the items (set through the base class: no overridden method runs)
        node.append(attributes)
        return self.items(dict(value), node) if tag == fmt.SUBDICT else self.each(list(value), node)

    def fields(self, attributes: Mapping[str, object]) -> list[Any]:
        """An object's ``__dict__`` as name, value, name, value, … (the fast path of :meth:`attributes`)."""
        out: list[Any] = []
        append, value, plain = out.append, self.value, self.plain
        name = ""
        try:
            for name, item in attributes.items():
                append(name)
                append(item if type(item) in plain else value(item))
        except _Unencodable as exc:
            exc.path.append(f".{name}")
            raise
        return out

    def attributes(self, value: Any, names: Iterable[str], skip: Collection[str] = ()) -> list[Any]:
        out: list[Any] = []
        for name in names:
            if name in skip:
                continue
            try:
                out.append(name)
                out.append(self.value(getattr(value, name)))
            except _Unencodable as exc:
                exc.path.append(f".{name}")
                raise
        return out


class _Done:
    """The items of a node already encoded (:meth:`_Encoder.each`): MessagePack bytes without their array header."""

    __slots__ = ("count", "parts")

    def __init__(self) -> None:
        self.count = 0
        self.parts: list[bytes] = []

    def flush(self, out: list[Any]) -> list[Any]:
        """Encode the items in ``out`` and keep them; a new empty list for the next ones."""
        encoded = msgspec.msgpack.encode(out)
        self.parts.append(encoded[_array_header_size(len(out)) :])
        self.count += len(out)
        return []

    def node(self, out: list[Any]) -> Any:
        """The node: ``out`` itself when nothing was flushed, else the whole array encoded."""
        if not self.parts:
            return out
        self.flush(out)
        return msgspec.Raw(b"".join([_array_header(self.count), *self.parts]))


def _array_header_size(length: int) -> int:
    return 1 if length < 16 else 3 if length < 2**16 else 5


def _array_header(length: int) -> bytes:
    """A MessagePack array's header as msgspec writes it (the smallest form)."""
    if length < 16:
        return bytes([0x90 | length])
    if length < 2**16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


def _ordered(values: Iterable[Any]) -> list[Any]:
    """A set's items in a stable order (sorted when they sort), so equal states encode to equal bytes."""
    items = list(values)
    try:
        return sorted(items)
    except TypeError:
        return items


def _encode(anchors: list[str], overlays: list[Any], root: Any, encoder: _Encoder) -> list[Any]:
    """The state's bytes as consecutive parts (buffers): the parts of it the walk already encoded are passed on as
    they are rather than copied into one string."""
    names = sorted(encoder.names, key=encoder.names.__getitem__)
    parts: list[Any] = []
    _stream([FORMAT, names, code_fingerprint(names), anchors, overlays, root], parts)
    return parts


def _stream(node: Any, parts: list[Any]) -> None:
    if type(node) is msgspec.Raw:
        parts.append(node)
    elif type(node) is list and _holds_raw(node):
        parts.append(_array_header(len(node)))
        for item in node:
            _stream(item, parts)
    else:
        parts.append(msgspec.msgpack.encode(node))


def _holds_raw(node: list[Any]) -> bool:
    return any(type(item) is msgspec.Raw or (type(item) is list and _holds_raw(item)) for item in node)


def _fail(exc: _Unencodable, prefix: str = "") -> StateCodecError:
    path = prefix + "".join(reversed(exc.path))
    return StateCodecError(f"{path or '$'}: {exc.reason}")


def _walked(walk: Callable[[_Encoder], list[Any]], allowed: Collection[str]) -> list[Any]:
    """``walk`` with ints stored as themselves, or, when one does not fit MessagePack, with every int checked."""
    try:
        try:
            return walk(_Encoder(allowed, _PLAIN_INTS))
        except OverflowError:
            return walk(_Encoder(allowed, _PLAIN))
    except RecursionError:
        raise StateCodecError("the object graph is nested too deeply") from None


def dumps(value: Any, *, allowed: Collection[str] = ()) -> bytes:
    """``value``'s object graph as bytes (``allowed``: more module names whose classes may be stored)."""

    def walk(encoder: _Encoder) -> list[Any]:
        try:
            root = encoder.value(value)
        except _Unencodable as exc:
            raise _fail(exc) from None
        return _encode([], [], root, encoder)

    return b"".join(_walked(walk, allowed))


def _frame(data: bytes, allowed: Collection[str]) -> tuple[Decoder, list[Any], list[Any], Any]:
    try:
        frame = msgspec.msgpack.decode(data)
    except msgspec.DecodeError as exc:
        raise StateCodecError(f"not a state: {exc}") from None
    if not isinstance(frame, list) or len(frame) != 6 or frame[0] != FORMAT:
        raise StateCodecError(f"not a state of format {FORMAT}")
    _, names, code, anchors, overlays, root = frame
    if not isinstance(names, list) or not isinstance(anchors, list) or not isinstance(overlays, list):
        raise StateCodecError("not a state: malformed header")
    decoder = Decoder(names, allowed)  # resolves every name first: an unknown class is refused as such
    if code != code_fingerprint(names):
        raise StateCodecError(
            "made by other code: the modules its classes come from have changed since (a state is loaded only by the"
            " code that made it)"
        )
    return decoder, anchors, overlays, root


def _decoding(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except StateCodecError:
        raise
    except RecursionError:
        raise StateCodecError("the state is nested too deeply") from None
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StateCodecError(f"malformed state: {type(exc).__name__}: {exc}") from None


def loads(data: bytes, *, allowed: Collection[str] = ()) -> Any:
    """The object graph ``dumps`` encoded (a :class:`StateCodecError` for anything else)."""

    def run() -> Any:
        decoder, _, _, root = _frame(data, allowed)
        return decoder.value(root)

    return _decoding(run)


def _anchor_paths(keep: Iterable[str], overlay: Iterable[str]) -> tuple[list[str], list[str]]:
    """The objects overlaid (the root "", ``overlay`` and every object on the way to a kept path) and the kept
    paths."""
    kept = sorted(set(keep))
    prefixes = {"", *overlay}
    for path in kept:
        parts = path.split(".")
        prefixes.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(prefixes), kept


def _at(root: Any, path: str) -> Any:
    value = root
    for part in path.split(".") if path else ():
        value = getattr(value, part)
    return value


def export_state(
    root: Any, keep: Iterable[str] = (), *, overlay: Iterable[str] = (), allowed: Collection[str] = ()
) -> bytes:
    """``root``'s state, without the values at the ``keep`` paths (taken from a fresh instance on restore); the
    objects at the ``overlay`` paths are not replaced on restore but have their attributes set."""
    return b"".join(export_state_parts(root, keep, overlay=overlay, allowed=allowed))


def export_state_parts(
    root: Any, keep: Iterable[str] = (), *, overlay: Iterable[str] = (), allowed: Collection[str] = ()
) -> list[Any]:
    """:func:`export_state` as consecutive buffers (joined, the same bytes), for a writer that sends them one after
    the other: the state is then never held twice."""
    prefixes, kept = _anchor_paths(keep, overlay)
    anchors = [*prefixes, *kept]

    def walk(encoder: _Encoder) -> list[Any]:
        for path in anchors:
            encoder.register(_at(root, path))
        overlays: list[Any] = []
        path = ""
        try:
            for path in prefixes:
                obj = _at(root, path)
                children = {p.rsplit(".", 1)[-1] for p in anchors if p and p.rpartition(".")[0] == path}
                names = [
                    *getattr(obj, "__dict__", ()),
                    *(s for s in slot_names(type(obj)) if hasattr(obj, s)),
                ]
                overlays.append(
                    [encoder.name_of(type(obj), "class"), *encoder.attributes(obj, names, children)]
                )
        except _Unencodable as exc:
            raise _fail(exc, path) from None
        return _encode(anchors, overlays, None, encoder)

    return _walked(walk, allowed)


def restore_state(
    data: bytes,
    fresh: Any,
    keep: Iterable[str] = (),
    *,
    overlay: Iterable[str] = (),
    allowed: Collection[str] = (),
) -> None:
    """Overlay the state ``export_state`` encoded onto ``fresh`` (built from the same configuration)."""
    prefixes, kept = _anchor_paths(keep, overlay)

    def run() -> None:
        decoder, anchors, overlays, _ = _frame(data, allowed)
        if anchors != [*prefixes, *kept] or len(overlays) != len(prefixes):
            raise StateCodecError("the state was exported with other kept paths")
        decoder.memo.extend(_at(fresh, path) for path in anchors)
        for path, overlay in zip(prefixes, overlays, strict=True):
            target = _at(fresh, path)
            if decoder.cls(overlay[0], object) is not type(target):
                raise StateCodecError(
                    f"{path or '$'}: the state is of another class than {type(target).__name__}"
                )
            decoder.assign(target, overlay, 1)

    _decoding(run)
