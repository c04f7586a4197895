"""What Koordinator's webhooks do to a pod because of its elastic quota, done at the door.

Responsibility: the quota side of pod admission that needs the quotas and ElasticQuotaProfiles recorded before the
pod (the door learns them in order, as upstream's webhooks learn them from their informers):

- a pod naming a parent quota (labelled ``is-parent``, a tree root, or the root) is refused with the pod webhook's
  message (pkg/webhook/elasticquota/pod_check.go ``ValidateAddPod``);
- a pod whose quota belongs to a separate quota tree gets the tree's ElasticQuotaProfile ``nodeSelector`` as a
  required node affinity, appended to each of its node selector terms, as the pod mutating webhook does
  (pkg/webhook/pod/mutating/multi_quota_tree_affinity.go): the pods of a tree run on the tree's nodes.

The pod's quota is its ``quota.scheduling.koordinator.sh/name`` label, else the quota named after its namespace, else
the quota whose ``namespaces`` annotation lists the namespace; a quota's tree is its ``tree-id`` label, else its
parent's (the quota webhook copies it down on create). Pure bookkeeping; nothing here raises for bad input.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field

from allot_contracts.issues import FieldIssue, label_path
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.pod import Pod
from allot_contracts.objects.quota import (
    LABEL_POD_QUOTA,
    ROOT_QUOTA,
    ProfileSpec,
    QuotaSpec,
    parent_quota_message,
)

__all__ = ["QuotaView"]


@dataclass
class QuotaView:
    """The quotas and profiles known at the door, as far as pods are concerned."""

    quotas: dict[str, QuotaSpec] = field(default_factory=dict)  # name -> spec
    profiles: dict[str, ProfileSpec] = field(default_factory=dict)  # "<namespace>/<name>" -> spec

    def note_quota(self, spec: QuotaSpec) -> None:
        self.quotas[spec.name] = spec

    def forget_quota(self, name: str) -> None:
        self.quotas.pop(name, None)

    def note_profile(self, spec: ProfileSpec) -> None:
        self.profiles[spec.key] = spec

    def is_parent(self, name: str) -> bool:
        spec = self.quotas.get(name)
        if name == ROOT_QUOTA or any(p.quota_name == name for p in self.profiles.values()):
            return True
        return spec is not None and (spec.is_parent or spec.is_root)

    def parent_issue(self, pod: Pod) -> FieldIssue | None:
        """The pod webhook's refusal of a pod naming a parent quota, or None."""
        if not pod.quota or not self.is_parent(pod.quota):
            return None
        return FieldIssue(
            path=label_path(LABEL_POD_QUOTA),
            code="Forbidden",
            value=pod.quota,
            message=parent_quota_message(pod.quota, pod.name),
        )

    def _quota_of(self, manifest: Mapping[str, object]) -> str:
        meta = manifest.get("metadata") if isinstance(manifest.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        assert isinstance(labels, dict)
        namespace = str(meta.get("namespace") or "default")
        label = labels.get(LABEL_POD_QUOTA)
        if isinstance(label, str) and label in self.quotas:
            return label
        named = self.quotas.get(namespace)
        if named is not None and named.namespace == namespace:
            return namespace
        bound = sorted(q.name for q in self.quotas.values() if namespace in q.namespaces)
        return bound[0] if bound else ""

    def _tree_id(self, quota: str) -> str:
        seen: set[str] = set()
        while quota and quota not in seen:
            seen.add(quota)
            for profile in self.profiles.values():
                if profile.quota_name == quota:
                    return profile.tree_id
            spec = self.quotas.get(quota)
            if spec is None:
                return ""
            if spec.tree_id:
                return spec.tree_id
            quota = spec.parent if spec.parent != ROOT_QUOTA else ""
        return ""

    def tree_selector(self, manifest: Mapping[str, object]) -> Mapping[str, JsonValue] | None:
        """The nodeSelector of the profile whose tree the pod's quota belongs to, or None."""
        tree = self._tree_id(self._quota_of(manifest))
        if not tree:
            return None
        for key in sorted(self.profiles):
            profile = self.profiles[key]
            if profile.tree_id == tree and profile.node_selector:
                return profile.node_selector
        return None

    def with_tree_affinity(self, manifest: JsonObject) -> JsonObject:
        """The pod manifest with its quota tree's node selector added to its required node affinity (unchanged when
        its quota is in the default tree, or when the manifest is too malformed to extend: the pod parser says
        why)."""
        selector = self.tree_selector(manifest)
        if selector is None or not isinstance(manifest.get("spec"), dict):
            return manifest
        match_labels = selector.get("matchLabels")
        requirements: list[JsonValue] = [
            {"key": k, "operator": "In", "values": [v]}
            for k, v in (match_labels.items() if isinstance(match_labels, dict) else ())
        ]
        expressions = selector.get("matchExpressions")
        requirements += [
            {
                k: v
                for k, v in (
                    ("key", e.get("key")),
                    ("operator", e.get("operator")),
                    ("values", e.get("values")),
                )
                if v
            }
            for e in (expressions if isinstance(expressions, list) else ())
            if isinstance(e, dict)
        ]
        out = copy.deepcopy(manifest)
        node = out["spec"]
        for key in ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"):
            if not isinstance(node, dict):
                return manifest
            if node.get(key) is None:
                node[key] = {}
            node = node[key]
        if not isinstance(node, dict):
            return manifest
        terms = node.get("nodeSelectorTerms")
        if not terms:
            node["nodeSelectorTerms"] = [{"matchExpressions": requirements}]
        elif isinstance(terms, list):
            for term in terms:
                if isinstance(term, dict):
                    existing = term.get("matchExpressions")
                    term["matchExpressions"] = [
                        *(existing if isinstance(existing, list) else ()),
                        *requirements,
                    ]
        else:
            return manifest
        return out
