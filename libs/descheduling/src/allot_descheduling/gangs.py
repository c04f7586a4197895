"""A gang's migration policy, one rule for every descheduler plugin that moves pods (LowNodeLoad, GPUDefrag).

A gang moves whole or not at all. Whether the descheduler may move it is the gang's policy: the annotation
``descheduler.allot.dev/gang-migration: Whole`` (or ``Skip``) on its members, else the plugin's ``gangMigration``
arg (``Skip`` by default: a gang member stays where it is). The gang may move only when every member's policy is
``Whole`` and no member is held back; :func:`gang_refusal` says why not. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from allot_contracts.issues import FieldIssue
from allot_descheduling.fields import one_of

__all__ = ["ANN_GANG_MIGRATION", "SKIP", "WHOLE", "gang_moves_whole", "gang_refusal", "parse_gang_migration"]

ANN_GANG_MIGRATION: Final = "descheduler.allot.dev/gang-migration"
WHOLE: Final = "Whole"
SKIP: Final = "Skip"


def gang_moves_whole(annotations: Mapping[str, str], default: bool) -> bool:
    """The gang's policy, as its member states it (``descheduler.allot.dev/gang-migration: Whole`` or ``Skip``),
    else the plugin's ``gangMigration``."""
    stated = annotations.get(ANN_GANG_MIGRATION)
    return default if stated not in (WHOLE, SKIP) else stated == WHOLE


def gang_refusal(gang: str, members: Iterable[tuple[str, bool, str]]) -> tuple[str, str]:
    """Why gang ``gang`` may not move whole as ``(code, reason)``, ``("", "")`` when it may; ``members``: each
    member's ``(key, whole, held)``, ``whole`` its policy and ``held`` why it may not move ("" when it may).
    ``GangMember``: a member's policy keeps the gang where it is; ``GangMemberHeld``: a member may not move."""
    listed = sorted(members)
    for key, whole, _ in listed:
        if not whole:
            return "GangMember", (
                f"a member of gang {gang}: a gang is moved whole or not at all, and member {key} does not allow it"
                f" ({ANN_GANG_MIGRATION}, else gangMigration, is not {WHOLE})"
            )
    for key, _, held in listed:
        if held:
            return "GangMemberHeld", (
                f"a member of gang {gang}: a gang is moved whole or not at all, and member {key} may not move: {held}"
            )
    return "", ""


def parse_gang_migration(data: Mapping[str, object], path: str, issues: list[FieldIssue]) -> bool:
    """A plugin's ``gangMigration`` (``Skip`` | ``Whole``, default ``Skip``) at ``path``: whether gangs move whole."""
    gang = data.get("gangMigration", SKIP)
    one_of(gang, (WHOLE, SKIP), f"{path}.gangMigration", issues, f"supported: {SKIP}, {WHOLE}")
    return bool(gang == WHOLE)
