"""A quota object quota-manager refuses is a decision the user reads: `allot sim run` and `allot decisions` print it,
with the tree's reason, instead of the object silently missing from the tree."""

from __future__ import annotations

from pathlib import Path

from allot_sim.scenario import run
from allot_views.decisions import decisions

QUOTAS = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: team, namespace: a}
spec: {min: {cpu: "1"}, max: {cpu: "2"}}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: team, namespace: b}
spec: {min: {cpu: "1"}, max: {cpu: "2"}}
---
apiVersion: quota.koordinator.sh/v1alpha1
kind: ElasticQuotaProfile
metadata: {name: gpu, namespace: a}
spec:
  quotaName: team
  nodeSelector: {matchLabels: {pool: gpu}}
"""


def test_a_refused_quota_and_profile_are_decision_lines_with_the_trees_reason(tmp_path: Path) -> None:
    """A quota name is unique across namespaces (upstream's quota topology check refuses the second with "AddQuota
    quota already exist"), and a profile may not take over a quota it does not manage."""
    scenario = tmp_path / "quotas.yaml"
    scenario.write_text(QUOTAS)
    sim, _, refused = run(str(scenario), config={})
    assert refused == 0  # the door cannot know: the tree decides
    lines = {line["pod"]: line for line in decisions(sim.store.events) if line["outcome"] == "Rejected"}
    assert set(lines) == {"ElasticQuota/b/team", "ElasticQuotaProfile/a/gpu"}
    quota, profile = lines["ElasticQuota/b/team"], lines["ElasticQuotaProfile/a/gpu"]
    assert quota["message"] == "metadata.name: AddQuota quota already exist:team"
    assert quota["codes"] == ["Duplicate"] and quota["stage"] == "quota-manager"
    assert profile["message"].startswith(
        "spec.quotaName: quota team already exists and is not managed by profile"
    )
    assert profile["codes"] == ["Duplicate"]
