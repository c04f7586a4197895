"""``QuotaEngine``: the elastic-quota state machine the quota-manager, the simulator and replay drive.

Design
------
The engine is a pure, in-memory state fed by commands that mirror the events of the log, in log order:

    apply_quota / delete_quota, apply_profile / delete_profile      objects (validated; invalid ones change nothing)
    set_nodes / upsert_node / delete_node                            capacity (tree totals)
    add_pending / remove_pending, assign / unassign / remove_pod     pod accounting (request / used)
    overuse_revoke(now)                                              a timer tick; ``now`` is data (seconds)

and answers questions whose results are decisions made of JSON builtins: ``admit``, ``waiting_admissions``,
``preemption_victims``, ``overuse_revoke``, plus views (``runtime``, ``tree_view``, ``snapshot``,
``status_annotations``). No IO, no clock, no randomness; every order is a documented total order (quota
name; pod priority, then arrival, then key). Feeding the same commands to a fresh engine re-derives every
decision, and ``digest()`` hashes the inputs-derived state (not caches) to check it.

The pod half of the API (resolution, accounting, admission, preemption) lives in ``accounting.py``. Pods are
identified by ``"<namespace>/<name>"``. A pod enters the accounting as *pending* (it counts in its
quota's request, which drives runtime) and becomes *assigned* at Reserve (it counts in used). Calls are
idempotent: assigning an assigned pod, unassigning an unknown pod, removing a removed pod are no-ops.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.inventory import NodeInfo as Node
from allot_contracts.resources import format_resource_list
from allot_quota import views
from allot_quota.accounting import PodAccounting
from allot_quota.config import QuotaConfig
from allot_quota.decisions import Eviction
from allot_quota.model import (
    DEFAULT_QUOTA,
    ROOT_QUOTA,
    SYSTEM_QUOTA,
    QuotaSpec,
)
from allot_quota.profiles import NodeInfo, ProfileSpec, node_info, profile_root, profile_totals
from allot_quota.reclaim import revoke_overuse, track_overuse
from allot_quota.tree import Hierarchy, PodEntry
from allot_quota.validation import check_delete, check_removable, check_topology, inherit_tree_id

__all__ = ["ENGINE_VERSION", "QuotaEngine"]

ENGINE_VERSION = "allot-quota/1"


class QuotaEngine(PodAccounting):
    def __init__(self, config: QuotaConfig | None = None) -> None:
        self.config = config or QuotaConfig()
        self._h = Hierarchy(self.config)
        ns = self.config.quota_group_namespace
        self._h.add(
            QuotaSpec(name=ROOT_QUOTA, namespace=ns, is_parent=True, allow_lent=False, unlimited=True)
        )
        self._h.add(QuotaSpec(name=SYSTEM_QUOTA, namespace=ns, max=dict(self.config.system_quota_max)))
        self._h.add(QuotaSpec(name=DEFAULT_QUOTA, namespace=ns, max=dict(self.config.default_quota_max)))
        self._pods: dict[str, PodEntry] = {}
        self._seq = 0
        self._nodes: dict[str, NodeInfo] = {}
        self._holders: dict[
            str, int
        ] = {}  # resource -> how many nodes list it (the total keeps those listed)
        self._profiles: dict[str, ProfileSpec] = {}
        self._ns_index: dict[str, str] = {}
        self._over_since: dict[str, int] = {}

    @property
    def hierarchy(self) -> Hierarchy:
        """The underlying forest (read-mostly; for views, benchmarks and tests)."""
        return self._h

    # ------------------------------------------------------------------ quotas
    def validate_quota(self, spec: QuotaSpec) -> list[FieldIssue]:
        """What ``apply_quota`` would refuse, without applying anything."""
        return check_topology(self._h, inherit_tree_id(self._h, spec), self.config)

    def apply_quota(self, spec: QuotaSpec) -> list[FieldIssue]:
        """Create or update an ElasticQuota (read at the door); returns the validation errors (none: applied).
        A child without a tree-id label joins its parent's tree."""
        spec = inherit_tree_id(self._h, spec)
        errors = check_topology(self._h, spec, self.config)
        if errors:
            return errors
        self._put(spec)
        return []

    def validate_delete(self, namespace: str, name: str) -> list[FieldIssue]:
        """What ``delete_quota`` would refuse, without deleting anything."""
        return check_delete(self._h, namespace, name)

    def delete_quota(self, namespace: str, name: str) -> list[FieldIssue]:
        errors = check_delete(self._h, namespace, name)
        if not errors:
            self._h.remove(name)
            self._over_since.pop(name, None)
            self._reindex()
        return errors

    def _put(self, spec: QuotaSpec) -> None:
        node = self._h.nodes.get(spec.name)
        old_namespaces = node.spec.namespaces if node is not None else ()
        if node is None:
            self._h.add(spec)
        elif node.spec != spec:
            self._h.replace(spec)
        if spec.namespaces or old_namespaces:
            self._reindex()

    def _reindex(self) -> None:
        self._ns_index = {
            ns: n for n in sorted(self._h.nodes, reverse=True) for ns in self._h.nodes[n].spec.namespaces
        }

    # ------------------------------------------------------------------ profiles and nodes
    def _plan_profile(
        self, profile: ProfileSpec
    ) -> tuple[ProfileSpec | None, QuotaSpec | None, list[FieldIssue]]:
        existing = self._h.nodes.get(profile.quota_name)
        if existing is not None and existing.spec.profile != profile.key:
            msg = f"quota {profile.quota_name} already exists and is not managed by profile {profile.key}"
            err = FieldIssue(path="spec.quotaName", code="Duplicate", value=profile.quota_name, message=msg)
            return None, None, [err]
        old = self._profiles.get(profile.key)
        if old is not None and old.quota_name != profile.quota_name:
            node = self._h.nodes[old.quota_name]
            errors = check_removable(old.quota_name, len(node.children), len(node.pods))
            if errors:
                return None, None, errors
        spec = profile_root(profile, profile_totals(profile, self._nodes)[0])
        errors = check_topology(self._h, spec, self.config)
        return (None, None, errors) if errors else (profile, spec, [])

    def validate_profile(self, profile: ProfileSpec) -> list[FieldIssue]:
        """What ``apply_profile`` would refuse, without applying anything."""
        return self._plan_profile(profile)[2]

    def apply_profile(self, profile_in: ProfileSpec) -> list[FieldIssue]:
        """Create or update an ElasticQuotaProfile and the root quota of its tree."""
        profile, spec, errors = self._plan_profile(profile_in)
        if profile is None or spec is None:
            return errors
        old = self._profiles.get(profile.key)
        if old is not None and old.quota_name != profile.quota_name:
            self._h.remove(old.quota_name)
        self._profiles[profile.key] = profile
        self._put(spec)
        return []

    def delete_profile(self, namespace: str, name: str) -> list[FieldIssue]:
        key = f"{namespace}/{name}"
        profile = self._profiles.get(key)
        if profile is None:
            msg = f"elastic quota profile {key} not found"
            return [FieldIssue(path="metadata.name", code="NotFound", value=name, message=msg)]
        node = self._h.nodes[profile.quota_name]
        errors = check_removable(profile.quota_name, len(node.children), len(node.pods))
        if errors:
            return errors
        self._h.remove(profile.quota_name)
        del self._profiles[key]
        self._reindex()
        return []

    def set_nodes(self, nodes: Sequence[Node]) -> None:
        """Replace the whole node set."""
        self._nodes = {}
        for node in nodes:
            info = node_info(node)
            self._nodes[info.name] = info
        self._sync_capacity()

    def upsert_node(self, node: Node) -> None:
        info = node_info(node)
        old = self._nodes.get(info.name)
        self._nodes[info.name] = info
        self._sync_capacity(changed=(old, info))

    def node_allocatable(self, name: str) -> dict[str, int] | None:
        """A registered node's allocatable resources (canonical integers), or None."""
        info = self._nodes.get(name)
        return dict(info.allocatable) if info is not None else None

    def delete_node(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is not None:
            self._sync_capacity(changed=(old, None))

    def _sync_capacity(self, changed: tuple[NodeInfo | None, NodeInfo | None] | None = None) -> None:
        """The cluster's total allocatable (and the profiles' roots) after a node change: one node's difference
        when ``changed`` says which (old, new), else summed afresh. A resource no node lists any more is dropped."""
        if changed is None:
            total: dict[str, int] = {}
            self._holders = {}
            for name in sorted(self._nodes):
                for k, v in self._nodes[name].allocatable.items():
                    total[k] = total.get(k, 0) + v
                    self._holders[k] = self._holders.get(k, 0) + 1
        else:
            old, new = changed
            total = dict(self._h.cluster_total)
            for k, v in old.allocatable.items() if old is not None else ():
                total[k] -= v
                self._holders[k] -= 1
                if not self._holders[k]:
                    del total[k], self._holders[k]
            for k, v in new.allocatable.items() if new is not None else ():
                total[k] = total.get(k, 0) + v
                self._holders[k] = self._holders.get(k, 0) + 1
        self._h.cluster_total = total
        for key in sorted(self._profiles):
            profile = self._profiles[key]
            self._put(profile_root(profile, profile_totals(profile, self._nodes)[0]))

    def overuse_revoke(
        self, now: int | datetime, *, dry_run: bool = False, spare: Iterable[str] = ()
    ) -> list[Eviction]:
        """Pods to give back because their quota stayed over its runtime longer than ``delayEvictTime``; never the
        pods of ``spare`` (evictions Kubernetes refused: others are chosen in their place).

        Advances the per-quota "over since" clocks (part of the state); with ``dry_run`` the same evictions are
        computed and the state is left unchanged (for a pure decide step, applied later without ``dry_run``)."""
        if isinstance(now, datetime):
            if now.tzinfo is None:
                raise ValueError("now must be timezone-aware (or an int of seconds)")
            now = int(now.timestamp())
        clocks = dict(self._over_since) if dry_run else self._over_since
        return revoke_overuse(self._h, self.config, now, clocks, frozenset(spare))

    def observe_overuse(self, now: int) -> None:
        """Advance the "over since" clocks to ``now`` (seconds) without evicting anything: a quota newly over its
        runtime starts its delay, one no longer over forgets it. Call it after every input; ask for the due
        evictions with ``overuse_revoke(now, dry_run=True)`` and apply them, then ``restart_overuse``."""
        track_overuse(self._h, self.config, now, self._over_since)

    def restart_overuse(self, quota: str) -> None:
        """After giving pods back, a quota that is still over its runtime waits a full delay again."""
        self._over_since.pop(quota, None)

    def revoke_deadline(self) -> int | None:
        """When (seconds since the epoch) the next over-use eviction may fall due: the earliest "over since" plus
        ``delayEvictTime`` plus one second; ``None`` when no quota is over its runtime (or revoke is off). The
        caller delivers that time back through ``overuse_revoke`` (a recorded timer event)."""
        if not (self.config.monitor_all_quotas and self.config.enable_runtime_quota) or not self._over_since:
            return None
        return min(self._over_since.values()) + self.config.delay_evict_seconds + 1

    # ------------------------------------------------------------------ views
    def runtime(self, name: str) -> dict[str, str]:
        return format_resource_list(self._h.runtime(name))

    def tree_view(self) -> list[views.QuotaRow]:
        return views.tree_view(self._h)

    def snapshot(self) -> views.Snapshot:
        return views.snapshot(self._h)

    def status_annotations(self, name: str) -> dict[str, str]:
        return views.status_annotations(self._h, name)

    def status_patch(self, name: str) -> JsonObject:
        return views.status_patch(self._h, name)

    def state(self) -> dict[str, object]:
        """The engine's state as JSON builtins (inputs only; derived numbers are recomputed from it)."""
        return {
            "engine": ENGINE_VERSION,
            "config": self.config.to_dict(),
            "quotas": [self._h.nodes[n].spec.to_state() for n in sorted(self._h.nodes)],
            "profiles": [self._profiles[k].to_state() for k in sorted(self._profiles)],
            "nodes": [self._nodes[n].to_state() for n in sorted(self._nodes)],
            "pods": [
                {**e.info.to_state(), "quota": e.quota, "assigned": e.assigned, "seq": e.seq}
                for _, e in sorted(self._pods.items())
            ],
            "seq": self._seq,
            "over_since": dict(sorted(self._over_since.items())),
        }

    def digest(self) -> str:
        blob = json.dumps(self.state(), sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()
