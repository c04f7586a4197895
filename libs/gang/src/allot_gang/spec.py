"""Gang settings as values: what a pod or a PodGroup declares, the effective settings, and conflicts.

Responsibility: the typed result of parsing (``PodInfo``, ``PodGroupInfo``), the settings a gang runs with
(``GangSettings``), how they are derived from what was declared plus configuration defaults
(``settings_from``), and how a later declaration is checked against the settings already in force
(``conflicts``).

Invariants:
- A declaration keeps only the settings that were *explicitly* given (``Explicit``), each with the field path it
  came from, so a conflict names the exact annotation.
- "First declaration wins": a gang's settings come from the first pod (or the PodGroup) that declared it. A later
  declaration that explicitly states a different value for any setting is refused with that setting's path; a
  later declaration that leaves a setting out inherits it. Nothing is silently overridden.
- ``groups`` is always stored sorted and contains the gang itself.
"""

from __future__ import annotations

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.gang import (
    GROUPS,
    MATCH_POLICY,
    MIN_AVAILABLE,
    MODE,
    TOTAL_NUMBER,
    WAITING_TIME,
    Explicit,
    PodGroupInfo,
    SettingValue,
)

from ._keys import format_duration
from .config import GangConfig

__all__ = [
    "Explicit",
    "GangSettings",
    "PodGroupInfo",
    "PodInfo",
    "SettingValue",
    "conflicts",
    "settings_from",
]


class GangSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The settings a gang runs with. ``wait_us`` is the waiting time in microseconds (never capped)."""

    min_available: int
    total_number: int
    mode: str
    match_policy: str
    wait_us: int
    groups: tuple[str, ...]
    min_resources: dict[str, int] = msgspec.field(default_factory=dict)

    def value(self, field: str) -> SettingValue:
        table: dict[str, SettingValue] = {
            MIN_AVAILABLE: self.min_available,
            TOTAL_NUMBER: self.total_number,
            MODE: self.mode,
            WAITING_TIME: self.wait_us,
            GROUPS: self.groups,
            MATCH_POLICY: self.match_policy,
        }
        return table[field]


class PodInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a pod manifest says about gangs. ``gang_id`` is None for a plain pod.

    ``declares`` is True when the pod carries min-available (a lightweight gang declaration); otherwise a gang pod
    only references its gang (whose settings must come from a PodGroup or from another pod). The gang engine's own
    projection of a pod, distinct from the quota engine's ``PodInfo`` (quota and requests) and node-reporter's (cgroup
    limits): each holds only what its decisions read.
    """

    key: str
    namespace: str
    name: str
    gang_id: str | None = None
    explicit: tuple[Explicit, ...] = ()
    priority: int = 0
    sub_priority: int = 0
    node_name: str = ""
    phase: str = ""

    @property
    def declares(self) -> bool:
        return any(e.field == MIN_AVAILABLE for e in self.explicit)


def _explicit(explicit: tuple[Explicit, ...], field: str) -> SettingValue | None:
    for e in explicit:
        if e.field == field:
            return e.value
    return None


def settings_from(
    gang_id: str,
    explicit: tuple[Explicit, ...],
    cfg: GangConfig,
    min_resources: dict[str, int] | None = None,
) -> GangSettings:
    """Effective settings of a gang declared with ``explicit`` settings; missing ones take the defaults:
    total-number = min-available, mode and match policy from the configuration, waiting time = the configured
    default timeout, groups = the gang alone."""
    min_available = _explicit(explicit, MIN_AVAILABLE)
    total = _explicit(explicit, TOTAL_NUMBER)
    mode = _explicit(explicit, MODE)
    policy = _explicit(explicit, MATCH_POLICY)
    wait = _explicit(explicit, WAITING_TIME)
    groups = _explicit(explicit, GROUPS)
    assert isinstance(min_available, int), "a declaration always has min-available"
    return GangSettings(
        min_available=min_available,
        total_number=total if isinstance(total, int) else min_available,
        mode=mode if isinstance(mode, str) else cfg.default_mode,
        match_policy=policy if isinstance(policy, str) else cfg.default_match_policy,
        wait_us=wait if isinstance(wait, int) else cfg.default_timeout_us,
        groups=tuple(sorted(groups)) if isinstance(groups, tuple) else (gang_id,),
        min_resources=dict(sorted((min_resources or {}).items())),
    )


def _show(field: str, value: SettingValue) -> str:
    if field == WAITING_TIME and isinstance(value, int):
        return format_duration(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    return str(value)


def conflicts(
    explicit: tuple[Explicit, ...], settings: GangSettings, gang_id: str, declared_by: str
) -> list[FieldIssue]:
    """Errors for every explicitly given setting that differs from the settings already in force."""
    errors: list[FieldIssue] = []
    for e in explicit:
        current = settings.value(e.field)
        mine = tuple(sorted(e.value)) if isinstance(e.value, tuple) else e.value
        if mine != current:
            errors.append(
                FieldIssue(
                    path=e.path,
                    message=(
                        f"conflicts with gang {gang_id} as declared by {declared_by}: "
                        f"{e.field} is {_show(e.field, current)}"
                    ),
                    value=_show(e.field, mine),
                )
            )
    return errors
