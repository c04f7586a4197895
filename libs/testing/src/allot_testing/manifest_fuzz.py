"""Manifests of every kind Allot accepts, broken the way careless or hostile clients break them: for fuzzing the doors.

The seeds are the valid upstream-shaped objects of the repository (the examples and the conformance corpus, each
admitted by the door before it is used), a few per kind; the workload kinds without an example are made from the
Deployment one. A case is a seed with one to four mutations, each at a path drawn from the object:

- ``replace``: a value of any type (scalars of every type, NaN and infinities, integers beyond 64 bits, lists and maps,
  maps with integer keys);
- ``delete``: the field is removed;
- ``quantity``: a quantity at the edge (``1e30``, ``-1``, ``NaN``, ``1Ei``, ``0.5``, ``1e-30``, too many digits);
- ``huge``: a string of 300 characters to 3 MiB;
- ``deep``: the value nested 8 to 200 levels deep;
- ``unicode``: any text, control characters and NUL included;
- ``swap``: a map becomes a list of its values, a list a map, a scalar a one-item list;
- ``unknown``: a field nobody knows is added next to it.

Used by the door fuzz tests (tests/unit/test_fuzz_manifests.py); hypothesis shrinks a failing case to the smallest
mutation that breaks the door.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import yaml
from hypothesis import strategies as st

from allot_contracts.jsonvalue import JsonObject

__all__ = ["JUNK", "KindKey", "as_yaml", "manifests", "mutated", "seeds"]

KindKey = tuple[str, str]
_DUMPER: Final = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when the wheel has it: much faster
PER_KIND: Final = 4
QUANTITY_EDGES: Final = (
    "1e30",
    "-1",
    "-0.001",
    "NaN",
    "Inf",
    "1Ei",
    "9Pi",
    "1000001",
    "0.5",
    "1e-30",
    "1e31",
    "0.0000000001m",
    "99999999999999999999999999999",
    "1.5.5",
    "",
    " 1 ",
    "1Ki ",
    "+1",
)
_SCALARS: Final = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(QUANTITY_EDGES),
)
JUNK: Final = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=8) | st.integers(-3, 3), inner, max_size=3)
    ),
    max_leaves=8,
)
_OPS: Final = ("replace", "delete", "quantity", "huge", "deep", "unicode", "swap", "unknown")


def _kind(body: Mapping[str, object]) -> KindKey:
    return (str(body.get("apiVersion", "")), str(body.get("kind", "")))


@functools.lru_cache(maxsize=4)
def seeds(root: Path) -> dict[KindKey, tuple[JsonObject, ...]]:
    """A few valid documents per kind from the examples and the conformance corpus under ``root`` (the repository),
    each admitted by a fresh door (so a seed is valid on its own)."""
    from allot_intake.documents import (
        parse_documents,  # the CLI is what is fuzzed; imported when seeds are made
    )
    from allot_intake.manifests import Door

    found: dict[KindKey, list[JsonObject]] = {}
    paths = sorted([*root.glob("examples/**/*.yaml"), *root.glob("tests/conformance/**/*.yaml")])
    for path in paths:
        if ".expected." in path.name or ".config." in path.name:
            continue
        try:
            docs = parse_documents(path.read_text(), str(path))
        except Exception:  # noqa: BLE001 - a file that is not a scenario is not a seed
            continue
        for doc in docs:
            chosen = found.setdefault(_kind(doc.body), [])
            if len(chosen) < PER_KIND and not Door(quotas=set()).check(doc).issues:
                chosen.append(copy.deepcopy(doc.body))
    for deployment in found.get(("apps/v1", "Deployment"), [])[:1]:
        for api_version, kind in (("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet"), ("batch/v1", "Job")):
            found.setdefault((api_version, kind), []).append(
                {**copy.deepcopy(deployment), "apiVersion": api_version, "kind": kind}
            )
    return {key: tuple(docs) for key, docs in sorted(found.items())}


def _paths(node: Any, depth: int = 0) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) of a document, the root's keys included; not below 12 levels (a seed is shallow)."""
    if depth > 12:
        return
    if isinstance(node, dict):
        for key, child in node.items():
            yield node, key
            yield from _paths(child, depth + 1)
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield node, index
            yield from _paths(child, depth + 1)


def _swapped(value: Any) -> Any:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    return [value]


@st.composite
def _mutation(draw: st.DrawFn, value: Any) -> tuple[str, Any]:
    """``(op, new value)`` for a value; ``("delete", None)`` removes it."""
    op = draw(st.sampled_from(_OPS))
    if op == "replace":
        return op, draw(JUNK)
    if op == "quantity":
        return op, draw(st.sampled_from(QUANTITY_EDGES))
    if op == "huge":
        return op, "x" * draw(st.sampled_from((300, 70_000, 300_000, 3 * 2**20 + 1)))
    if op == "deep":
        nested = value
        for _ in range(draw(st.sampled_from((8, 63, 66, 200)))):
            nested = {"a": nested} if draw(st.booleans()) else [nested]
        return op, nested
    if op == "unicode":
        return op, draw(st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40))
    if op == "swap":
        return op, _swapped(value)
    return op, value


@st.composite
def mutated(draw: st.DrawFn, original: JsonObject) -> tuple[JsonObject, list[str]]:
    """A copy of ``original`` with one to four mutations, and the mutations made (any JSON-like map: a manifest, an
    event payload, a wire envelope)."""
    body = copy.deepcopy(original)
    made: list[str] = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        places = list(_paths(body))
        if not places:
            break
        container, key = draw(st.sampled_from(places))
        op, value = draw(_mutation(container[key]))
        made.append(f"{op} at {key!r}")
        if op == "delete":
            del container[key]
        elif op == "unknown" and isinstance(container, dict):
            container[f"zz{draw(st.text(max_size=6))}"] = draw(JUNK)
        else:
            container[key] = value
    return body, made


@st.composite
def manifests(draw: st.DrawFn, root: Path) -> tuple[KindKey, JsonObject, list[str]]:
    """A mutated seed: ``(kind of the seed, body, the mutations made)``."""
    pool = seeds(root)
    kind = draw(st.sampled_from(sorted(pool)))
    body, made = draw(mutated(draw(st.sampled_from(pool[kind]))))
    return kind, body, made


def as_yaml(body: Mapping[str, object]) -> str:
    """The document as a file holds it (what ``allot apply -f`` reads)."""
    return yaml.dump(body, Dumper=_DUMPER, allow_unicode=True, sort_keys=False, width=2**30)
