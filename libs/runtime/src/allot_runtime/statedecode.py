"""The decoding half of the state codec (:mod:`allot_runtime.statecodec`): the numbered nodes of an encoded state
turned back into objects. A class or function is looked up only in modules already imported whose names are allowed
(:func:`resolve`); nothing is imported, and no constructor other than a ``Struct``'s runs."""

from __future__ import annotations

import collections
import decimal
import enum
import fractions
import sys
import types
from collections.abc import Collection, Iterable
from typing import Any

import msgspec

from allot_runtime.stateformat import (
    BIGINT,
    BUILTIN_TYPES,
    COUNTER,
    DDICT,
    DECIMAL,
    DEQUE,
    DICT,
    ENUM,
    FRACTION,
    FROZENSET,
    FUNCTION,
    LIST,
    METHOD,
    OBJECT,
    ODICT,
    REF,
    SET,
    STRUCT,
    SUBDICT,
    SUBLIST,
    TUPLE,
    TYPE,
    StateCodecError,
    allowed_module,
    slot_names,
)


class Decoder:
    def __init__(self, names: list[Any], allowed: Collection[str]) -> None:
        self.memo: list[Any] = []
        self.classes = [resolve(name, allowed) for name in names]

    def value(self, node: Any) -> Any:
        if type(node) is not list:
            return node
        tag = node[0]
        if tag == REF:
            return self.memo[node[1]]
        if tag == DICT:
            out: dict[Any, Any] = {}
            self.memo.append(out)
            self.fill(out, node, 1)
            return out
        if tag == LIST:
            items: list[Any] = []
            self.memo.append(items)
            items.extend(self.each(node, 1))
            return items
        if tag in (TUPLE, FROZENSET):
            built = (tuple if tag == TUPLE else frozenset)(self.each(node, 1))
            self.memo.append(built)
            return built
        if tag == SET:
            members: set[Any] = set()
            self.memo.append(members)
            members.update(self.each(node, 1))
            return members
        return self.other(tag, node)

    def each(self, node: list[Any], start: int) -> list[Any]:
        value = self.value
        return [item if type(item) is not list else value(item) for item in node[start:]]

    def fill(self, out: Any, node: list[Any], start: int) -> None:
        if (len(node) - start) % 2:
            raise StateCodecError("a mapping with an odd number of items")
        value = self.value
        for index in range(start, len(node), 2):
            key = node[index]
            if type(key) is list:
                key = value(key)
            item = node[index + 1]
            out[key] = item if type(item) is not list else value(item)

    def other(self, tag: Any, node: list[Any]) -> Any:
        if tag == OBJECT:
            cls = self.cls(node[1], object)
            obj = cls.__new__(cls)
            self.memo.append(obj)
            self.assign(obj, node, 2)
            return obj
        if tag in (SUBDICT, SUBLIST):
            return self.subclass(tag, node)
        if tag == STRUCT:
            cls = self.cls(node[1], msgspec.Struct)
            fields = dict(self.pairs(node, 2))
            unknown = set(fields) - set(cls.__struct_fields__)
            if unknown:
                raise StateCodecError(f"{cls.__qualname__} has no field {sorted(unknown)[0]}")
            struct = cls(**fields)
            self.memo.append(struct)
            return struct
        if tag == ENUM:
            member = self.cls(node[1], enum.Enum)[node[2]]
            return member
        if tag in (ODICT, COUNTER, DDICT):
            return self.mapping(tag, node)
        if tag == DEQUE:
            queue: collections.deque[Any] = collections.deque(maxlen=node[1])
            self.memo.append(queue)
            queue.extend(self.value(item) for item in node[2:])
            return queue
        if tag == TYPE:
            return self.cls(node[1], object)
        if tag == FUNCTION:
            function = self.classes[node[1]]
            if not isinstance(function, types.FunctionType):
                raise StateCodecError(f"{function!r} is not a function")
            return function
        if tag == METHOD:
            method = getattr(self.value(node[1]), node[2])
            if not isinstance(method, types.MethodType):
                raise StateCodecError(f"{node[2]} is not a method")
            self.memo.append(method)
            return method
        if tag == BIGINT:
            return int(node[1])
        if tag == FRACTION:
            return fractions.Fraction(int(node[1]), int(node[2]))
        if tag == DECIMAL:
            return decimal.Decimal(str(node[1]))
        raise StateCodecError(f"unknown node tag {tag!r}")

    def subclass(self, tag: int, node: list[Any]) -> Any:
        cls = self.cls(node[1], dict if tag == SUBDICT else list)
        obj = cls.__new__(cls)
        self.memo.append(obj)
        self.assign(obj, [None, *node[2]], 1)
        if tag == SUBDICT:
            items: dict[Any, Any] = {}
            self.fill(items, node, 3)
            dict.update(obj, items)
        else:
            list.extend(obj, [self.value(item) for item in node[3:]])
        return obj

    def mapping(self, tag: int, node: list[Any]) -> Any:
        if tag == DDICT:
            out: Any = collections.defaultdict()
            self.memo.append(out)
            factory = self.value(node[1])
            if factory is not None and not callable(factory):
                raise StateCodecError("a defaultdict factory that is not callable")
            out.default_factory = factory
            self.fill(out, node, 2)
            return out
        out = collections.OrderedDict() if tag == ODICT else collections.Counter()
        self.memo.append(out)
        self.fill(out, node, 1)
        return out

    def cls(self, index: Any, base: type) -> Any:
        found = self.classes[index]
        if not isinstance(found, type) or not issubclass(found, base):
            raise StateCodecError(f"{found!r} is not a {base.__name__}")
        return found

    def pairs(self, node: list[Any], start: int) -> Iterable[tuple[str, Any]]:
        if (len(node) - start) % 2:
            raise StateCodecError("attributes with an odd number of items")
        for index in range(start, len(node), 2):
            name = node[index]
            if type(name) is not str or (name.startswith("__") and name.endswith("__")):
                raise StateCodecError(f"attribute name {name!r} refused")
            item = node[index + 1]
            yield name, item if type(item) is not list else self.value(item)

    def assign(self, obj: Any, node: list[Any], start: int) -> None:
        attributes = getattr(obj, "__dict__", None)
        if attributes is not None and not slot_names(type(obj)):  # the common case: set them all at once
            attributes.update(self.pairs(node, start))
            return
        for name, item in self.pairs(node, start):
            object.__setattr__(obj, name, item)


def resolve(name: Any, allowed: Collection[str]) -> Any:
    """The class or function ``module:qualname`` from an already-imported allowed module (nothing is imported)."""
    if type(name) is not str or ":" not in name:
        raise StateCodecError(f"class name {name!r} is malformed")
    if name in BUILTIN_TYPES:
        return BUILTIN_TYPES[name]
    module_name, _, qualname = name.partition(":")
    if not allowed_module(module_name, allowed):
        raise StateCodecError(f"class {name} is not from an allowed module")
    found: Any = sys.modules.get(module_name)
    if found is None:
        raise StateCodecError(f"class {name}: module {module_name} is not loaded")
    for part in qualname.split("."):
        if part.startswith("__") or not hasattr(found, part):
            raise StateCodecError(f"class {name} does not exist")
        found = getattr(found, part)
    if not isinstance(found, type | types.FunctionType) or getattr(found, "__qualname__", None) != qualname:
        raise StateCodecError(f"{name} is not a class or function")
    return found
