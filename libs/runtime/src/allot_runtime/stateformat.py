"""The vocabulary of the state encoding (:mod:`allot_runtime.statecodec`) shared by its encoder and decoder: the
format version, the node tags, which modules a state may name, the builtin types it may hold, and how a class's slots
are found."""

from __future__ import annotations

import collections
import hashlib
import sys
from collections.abc import Collection, Iterable
from pathlib import Path

__all__ = [
    "ALLOWED_PREFIXES", "BUILTIN_TYPES", "COUNTER", "DDICT", "DECIMAL", "DEQUE", "DICT", "ENUM", "FORMAT", "FRACTION",
    "FROZENSET", "FUNCTION", "BIGINT", "LIST", "METHOD", "OBJECT", "ODICT", "REF", "SET", "STRUCT", "SUBDICT", "SUBLIST",
    "StateCodecError", "TUPLE", "TYPE", "allowed_module", "code_fingerprint", "slot_names",
]  # fmt: skip

FORMAT = 2  # the version of this encoding; a snapshot of another format is not loaded (2: with the code fingerprint)

# node tags: every non-primitive value is a list whose first item is one of these
REF, LIST, TUPLE, DICT, SET, FROZENSET, DEQUE, ODICT, DDICT, COUNTER = range(10)
ENUM, STRUCT, OBJECT, TYPE, FUNCTION, METHOD, BIGINT, FRACTION, DECIMAL, SUBDICT, SUBLIST = range(10, 21)

ALLOWED_PREFIXES: tuple[str, ...] = (
    "allot_",
    "binder",
    "device_allocator",
    "gang_coordinator",
    "node_reporter",
    "qos_enforcer",
    "quota_manager",
    "reservation_manager",
)
BUILTIN_TYPES: dict[str, type] = {
    f"{t.__module__}:{t.__qualname__}": t
    for t in (
        int,
        float,
        str,
        bytes,
        bool,
        list,
        tuple,
        dict,
        set,
        frozenset,
        type(None),
        collections.deque,
        collections.OrderedDict,
        collections.Counter,
        collections.defaultdict,
    )
}


class StateCodecError(ValueError):
    """A state that cannot be encoded (with the path of the value), or bytes that are not a state of this format."""


def allowed_module(module: str, extra: Collection[str]) -> bool:
    root = module.split(".", 1)[0]
    return root.startswith(ALLOWED_PREFIXES[0]) or root in ALLOWED_PREFIXES[1:] or root in extra


_SLOTS: dict[type, list[str]] = {}


def slot_names(cls: type) -> list[str]:
    """Every slot of ``cls`` and its bases (mangled as Python stores them), remembered per class."""
    found = _SLOTS.get(cls)
    if found is None:
        found = _SLOTS[cls] = _find_slots(cls)
    return found


def _find_slots(cls: type) -> list[str]:
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        slots = klass.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__"):
                continue
            if slot.startswith("__") and not slot.endswith("__"):
                slot = f"_{klass.__name__.lstrip('_')}{slot}"
            if slot not in names:
                names.append(slot)
    return names


_SOURCE_DIGESTS: dict[str, str] = {}


def _source_digest(module: str) -> str:
    """The SHA-256 of a loaded module's source file (``-`` when it has none), computed once per process."""
    found = _SOURCE_DIGESTS.get(module)
    if found is None:
        path = getattr(sys.modules.get(module), "__file__", None)
        try:
            found = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else "-"
        except OSError:
            found = "-"
        _SOURCE_DIGESTS[module] = found
    return found


def code_fingerprint(names: Iterable[str]) -> str:
    """A digest of the source of every module a state's classes and functions come from. A state is loaded only by
    the same code that made it: a class whose fields changed between releases would otherwise be rebuilt with the
    old fields and fail (or decide differently) later."""
    modules = sorted({name.split(":", 1)[0] for name in names if name not in BUILTIN_TYPES})
    return hashlib.sha256("\n".join(f"{m} {_source_digest(m)}" for m in modules).encode()).hexdigest()
