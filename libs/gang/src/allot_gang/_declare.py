"""Declaring gangs: a pod's lightweight declaration, PodGroup create/update/delete, gang-group consistency.

Responsibility: the "first declaration wins" rule (see ``spec``) applied to the engine state, and the consistency
of gang groups: every initialized gang of a gang group lists exactly the same ``groups``.

Invariants: a declaration that would break either rule changes nothing and returns ``FieldIssue``s naming the
field; a PodGroup is the authority for its gang (it may update minMember, timeout, mode, policy and total-number at
any time, and ``groups`` only while the gang has no members); a PodGroup cannot take over a gang declared by pod
annotations.
"""

from __future__ import annotations

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.gang import GROUPS

from . import _keys as k
from ._core import Core
from .actions import Action
from .spec import PodGroupInfo, PodInfo, conflicts, settings_from
from .state import HELD, IN_FLIGHT, PENDING, Gang

__all__ = ["apply_pod_group", "declare_pod", "delete_pod_group", "group_conflicts"]


def declare_pod(core: Core, info: PodInfo) -> list[FieldIssue]:
    """Create or join the gang a valid pod names; errors when its explicit settings conflict."""
    assert info.gang_id is not None
    gang = core.st.gangs.get(info.gang_id)
    if not info.declares:
        if gang is None:
            core.st.gangs[info.gang_id] = Gang(id=info.gang_id)
        return []
    if gang is not None and gang.settings is not None:
        return conflicts(info.explicit, gang.settings, gang.id, gang.declared_by)
    settings = settings_from(info.gang_id, info.explicit, core.cfg)
    path = next((e.path for e in info.explicit if e.field == GROUPS), k.ann_path(k.ANN_GROUPS))
    errors = group_conflicts(core, info.gang_id, settings.groups, path)
    if errors:
        return errors
    if gang is None:
        gang = core.st.gangs[info.gang_id] = Gang(id=info.gang_id)
    gang.settings, gang.source, gang.declared_by = settings, "annotations", f"pod {info.key}"
    core.attach(gang)
    return []


def group_conflicts(core: Core, gang_id: str, groups: tuple[str, ...], path: str) -> list[FieldIssue]:
    """Every gang of a gang group must list the same groups; an error naming the first disagreeing gang."""
    for other_id in sorted(core.st.gangs):
        other = core.st.gangs[other_id]
        if other_id == gang_id or other.settings is None:
            continue
        if (other_id in groups or gang_id in other.settings.groups) and other.settings.groups != groups:
            return [
                FieldIssue(
                    path=path,
                    value="[" + ", ".join(groups) + "]",
                    message=f"gang {gang_id} would be grouped with [{', '.join(groups)}] but gang {other_id} "
                    f"(declared by {other.declared_by}) is grouped with [{', '.join(other.settings.groups)}]; "
                    "every gang of a gang group must list the same groups",
                )
            ]
    return []


def apply_pod_group(core: Core, info: PodGroupInfo) -> list[FieldIssue]:
    """Create or update the gang of a PodGroup (the PodGroup is the authority for its settings)."""
    gid = info.gang_id
    settings = settings_from(gid, info.explicit, core.cfg, info.min_resources)
    gang = core.st.gangs.get(gid)
    groups_path = next((e.path for e in info.explicit if e.field == GROUPS), k.ann_path(k.ANN_GROUPS))
    if gang is not None and gang.settings is not None and gang.source == "annotations":
        return [
            FieldIssue(
                path="metadata.name",
                value=info.name,
                message=f"gang {gid} is already declared by {gang.declared_by}; a PodGroup cannot "
                "take over a gang whose pods carry its settings",
            )
        ]
    if (
        gang is not None
        and gang.settings is not None
        and gang.members
        and gang.settings.groups != settings.groups
    ):
        return [
            FieldIssue(
                path=groups_path,
                value=",".join(settings.groups),
                message="cannot change while the gang has members",
            )
        ]
    errors = group_conflicts(core, gid, settings.groups, groups_path)
    if errors:
        return errors
    old_group = core.group_of(gang) if gang is not None else None
    if gang is None:
        gang = core.st.gangs[gid] = Gang(id=gid)
    gang.settings, gang.source, gang.declared_by = settings, "PodGroup", f"PodGroup {gid}"
    core.attach(gang)
    if old_group is not None and old_group.id != k.group_id_of(settings.groups):
        core.prune(old_group.id, [], "pod group changed groups")
    return []


def delete_pod_group(core: Core, gid: str) -> list[Action]:
    """Forget a PodGroup: its members (if any) wait again; holds of an in-flight attempt or held members go."""
    gang = core.st.gangs.get(gid)
    if gang is None or gang.source != "PodGroup":
        return []
    out: list[Action] = []
    group = core.group_of(gang)
    if group is not None:
        if group.state == IN_FLIGHT:
            core.abandon(group, out, "pod group deleted")
        held = core.members_in(group, HELD)
        core.release(group.id, held, "pod group deleted", out)
        core.set_state(held, PENDING)
    if gang.members:
        gang.settings, gang.source, gang.declared_by, gang.wait_started_at = None, "", "", None
        gang.wait_stopped = False
    else:
        del core.st.gangs[gid]
    if group is not None:
        core.mark(group.id)
        core.prune(group.id, out, "pod group deleted")
    return out
