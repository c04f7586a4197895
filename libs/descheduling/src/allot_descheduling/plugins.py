"""What a ``DeschedulerConfiguration`` may name: its ``apiVersion``, the extension points of a profile's
``plugins`` and the plugins Allot runs. A name outside these is refused with the accepted ones listed, so a typo
never turns descheduling off silently. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from allot_contracts.issues import FieldIssue, checked_object
from allot_descheduling.fields import unknown

__all__ = [
    "API_VERSION",
    "GPU_DEFRAG",
    "LOW_NODE_LOAD",
    "MIGRATION",
    "POINTS",
    "balance_plugins",
    "is_descheduler_config",
    "type_meta",
]

API_VERSION: Final = "descheduler/v1alpha2"  # the one version upstream's descheduler registers
LOW_NODE_LOAD: Final = "LowNodeLoad"
GPU_DEFRAG: Final = "GPUDefrag"
MIGRATION: Final = "MigrationController"
# upstream's extension points and the plugins Allot runs at each
POINTS: Final = {
    "deschedule": (),
    "balance": (LOW_NODE_LOAD, GPU_DEFRAG),
    "evict": (MIGRATION,),
    "filter": (),
}
_ALL: Final = (LOW_NODE_LOAD, GPU_DEFRAG, MIGRATION)


def is_descheduler_config(data: Any, *, by_keys: bool = True) -> bool:
    """Whether a config file holds a ``DeschedulerConfiguration``: its kind, an ``apiVersion`` of the descheduler's
    group, or (``by_keys``) its own keys — so that whatever is wrong in it is reported as the descheduler's, not as
    another config's unknown keys."""
    if not isinstance(data, dict):
        return False
    version = data.get("apiVersion")
    return (
        data.get("kind") == "DeschedulerConfiguration"
        or (isinstance(version, str) and version.startswith("descheduler/"))
        or (by_keys and ("deschedulingInterval" in data or "profiles" in data))
    )


def type_meta(data: Mapping[str, object], path: str, kind: str, issues: list[FieldIssue]) -> None:
    """``apiVersion`` and ``kind`` at ``path``, both optional: when given, upstream's."""
    for key, wanted, why in (
        ("apiVersion", API_VERSION, f"supported: {API_VERSION}"),
        ("kind", kind, f"must be {kind}"),
    ):
        given = data.get(key)
        if given is not None and given != wanted:
            issues.append(FieldIssue(path=f"{path}{key}", code="NotSupported", message=why, value=str(given)))


def _names(raw: Any, path: str, point: str, issues: list[FieldIssue], *, disabled: bool) -> set[str]:
    """The plugin names of one ``enabled`` / ``disabled`` list; each unknown one is an issue."""
    if raw is None:
        return set()
    if not isinstance(raw, list):
        issues.append(FieldIssue(path=path, message="must be a list of {name: ...}"))
        return set()
    names: set[str] = set()
    allowed = POINTS[point] + (("*",) if disabled else ())
    for i, entry in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(entry, dict):
            issues.append(FieldIssue(path=where, message="must be {name: ...}"))
            continue
        unknown(entry, frozenset({"name"}), f"{where}.", issues)
        name = entry.get("name")
        if name in allowed:
            names.add(str(name))
            continue
        if name in _ALL:
            home = next(p for p, runs in POINTS.items() if name in runs)
            why = f"{name} is a {home} plugin, not a {point} one"
        elif not (
            disabled or allowed
        ):  # nothing runs here: enabling anything is a mistake Allot cannot honour
            why = f"Allot runs no {point} plugin; supported plugins: {', '.join(_ALL)}"
        else:
            why = f"unknown {point} plugin; supported: {', '.join(allowed)}"
        issues.append(FieldIssue(path=f"{where}.name", code="NotSupported", message=why, value=str(name)))
    return names


def balance_plugins(raw: Any, path: str, issues: list[FieldIssue]) -> dict[str, bool | None]:
    """Per balance plugin (LowNodeLoad, GPUDefrag), whether a profile's ``plugins`` enable it (True), disable it
    (False) or do not say (None); every unknown extension point or plugin name is an issue naming the accepted
    ones."""
    plugins = checked_object(raw, path, issues)
    unknown(plugins, frozenset(POINTS), f"{path}.", issues)
    balance: tuple[set[str], set[str]] = (set(), set())
    for point in sorted(set(plugins) & set(POINTS)):
        sets = checked_object(plugins[point], f"{path}.{point}", issues)
        unknown(sets, frozenset({"enabled", "disabled"}), f"{path}.{point}.", issues)
        enabled = _names(sets.get("enabled"), f"{path}.{point}.enabled", point, issues, disabled=False)
        disabled = _names(sets.get("disabled"), f"{path}.{point}.disabled", point, issues, disabled=True)
        if point == "balance":
            balance = (enabled, disabled)
    enabled, disabled = balance
    return {
        name: False if name in disabled or "*" in disabled else True if name in enabled else None
        for name in POINTS["balance"]
    }
