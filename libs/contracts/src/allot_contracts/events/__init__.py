"""The event catalogue: every fact Allot records, as msgspec tagged-union Structs.

Responsibility: define the payload of every event type, its stable tag (``<kind>.<action>.v<N>``), the union used to
decode payloads, and the mapping from tag to type name and schema version.

Registering an event: define its class (a tagged ``Event`` subclass) in the module of its stream kind and name it in
that module's ``__all__``; that is the one registration. This package re-exports every module's ``__all__`` and
builds :data:`AnyEvent` and the tag index from them (a test fails for a tagged class left out of ``__all__``). A
new catalogue module gets its star import below.

Invariants (schema evolution, see docs/adr/0004-event-contracts.md):
- Tags are explicit, never class names or import paths, and match ``^[a-z_]+\\.[a-z_]+\\.v\\d+$``.
- Fields are only ever added, with defaults; a field's type or meaning never changes. A breaking change gets a new
  tag (``….v2``) and an upcaster in :mod:`allot_contracts.upcasters`.
- No ``array_like`` and no ``forbid_unknown_fields`` on events, so that old readers skip new fields.
- Payloads carry JSON builtins only (no floats in decision data) so they hash and compare byte for byte.

The first token of a tag is the *stream kind*; it names the NATS subject ``<prefix>.events.<kind>.<action>``.
Input events (what users or a Kubernetes watch applied) are produced by ``api``; every other event is produced by
the service that decided it. Which service consumes what is drawn in docs/architecture.md.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any, Literal, Union

from allot_contracts.events._base import Event, FieldIssue, ObjectRef
from allot_contracts.events.cluster import *  # noqa: F403
from allot_contracts.events.descheduling import *  # noqa: F403
from allot_contracts.events.enactment import *  # noqa: F403
from allot_contracts.events.gangs import *  # noqa: F403
from allot_contracts.events.infra import *  # noqa: F403
from allot_contracts.events.inputs import *  # noqa: F403
from allot_contracts.events.leases import *  # noqa: F403
from allot_contracts.events.migration_enactment import *  # noqa: F403
from allot_contracts.events.nodeside import *  # noqa: F403
from allot_contracts.events.pods import *  # noqa: F403
from allot_contracts.events.preemption import *  # noqa: F403
from allot_contracts.events.qos import *  # noqa: F403
from allot_contracts.events.quota import *  # noqa: F403
from allot_contracts.events.reservation_enactment import *  # noqa: F403
from allot_contracts.events.reservations import *  # noqa: F403
from allot_contracts.events.security import *  # noqa: F403
from allot_contracts.events.snapshots import *  # noqa: F403

# Every catalogue module of the package (each is star-imported above), in name order.
_CATALOGUE = tuple(
    importlib.import_module(f"{__name__}.{info.name}")
    for info in pkgutil.iter_modules(__path__)  # noqa: F405 (the package's own path)
    if not info.name.startswith("_")
)


def split_tag(tag: str) -> tuple[str, int]:
    """``"pod.placed.v1"`` → ``("pod.placed", 1)``."""
    name, _, version = tag.rpartition(".")
    if not name or not version.startswith("v") or not version[1:].isdigit():
        raise ValueError(f"not an event tag: {tag!r}")
    return name, int(version[1:])


_VERSION_DIGITS = re.compile(
    r"[1-9][0-9]{0,8}\Z"
)  # a tag's version as tags write it: no leading 0, no other digits


def type_pattern(entry: str) -> tuple[Literal["kind", "type", "tag"], str] | None:
    """What a pattern of event types names: a kind (``pod.*`` → ``("kind", "pod")``), a type (``pod.placed``) or one
    version of a type (``pod.placed.v2``, its tag); None when it is none of these. Subscription filters and
    ``allot events tail --type`` read patterns this one way."""
    parts = entry.split(".")
    if not all(parts):
        return None
    if len(parts) == 2:
        return ("kind", parts[0]) if parts[1] == "*" else ("type", entry)
    version = parts[-1][1:]
    if len(parts) == 3 and parts[2][:1] == "v" and parts[1] != "*" and _VERSION_DIGITS.match(version):
        return "tag", entry
    return None


def _collect() -> dict[str, type[Event]]:
    """Every event class of the catalogue modules by tag, in module order and then in order of ``__all__``."""
    out: dict[str, type[Event]] = {}
    for module in _CATALOGUE:
        for name in module.__all__:
            cls = getattr(module, name)
            if not (isinstance(cls, type) and issubclass(cls, Event)):
                continue  # a value type events carry (ObjectRef, QosPlan, ...)
            tag = cls.__struct_config__.tag
            assert isinstance(tag, str)
            if tag in out:
                raise RuntimeError(f"duplicate event tag {tag}")
            out[tag] = cls
    return out


_BY_TAG: dict[str, type[Event]] = _collect()
# The union the log decodes payloads with (msgspec picks the class by the ``type`` tag). Built from the catalogue,
# so it is a value for decoders, not a type for annotations: annotate with ``Event``.
AnyEvent: Any = Union[tuple(_BY_TAG.values())]  # noqa: UP007
ALL_EVENT_TYPES: tuple[str, ...] = tuple(sorted(split_tag(t)[0] for t in _BY_TAG))
_NEWEST: dict[str, int] = {}
for _name, _version in map(split_tag, _BY_TAG):
    _NEWEST[_name] = max(_version, _NEWEST.get(_name, 0))


def newest_version(name: str) -> int | None:
    """The newest version of the event type ``name`` (``pod.placed`` → 2); None for a type Allot does not record.
    Versions 1 to it are the tags a log of this Allot can hold (older ones written before an upgrade)."""
    return _NEWEST.get(name)


def event_class(tag: str) -> type[Event]:
    """The Struct class of a tag (``KeyError`` when unknown)."""
    return _BY_TAG[tag]


def tag_of(event: Event) -> str:
    tag = type(event).__struct_config__.tag
    assert isinstance(tag, str)
    return tag


_TYPE_NAMES: dict[type, str] = {}  # event class -> its type name (the classes are a fixed set), as asked for


def type_of(event: Event) -> str:
    """The event type name without version: ``"pod.placed"``."""
    name = _TYPE_NAMES.get(type(event))
    if name is None:
        name = _TYPE_NAMES[type(event)] = split_tag(tag_of(event))[0]
    return name


__all__ = [
    "ALL_EVENT_TYPES",
    "AnyEvent",
    "Event",
    "FieldIssue",
    "ObjectRef",
    "event_class",
    "newest_version",
    "split_tag",
    "tag_of",
    "type_of",
    "type_pattern",
    *(name for module in _CATALOGUE for name in module.__all__),
]
