"""Koordinator's KubeSchedulerConfiguration as Allot's config: mapped onto the services' decision configs, with
every unknown field named and no traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_placement.config import PlacementConfig
from allot_quota.config import QuotaConfig
from allot_runtime.schedconfig import SchedulerConfigError, translate
from allot_runtime.settings import ServiceSettings

KOORD = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: koord-scheduler
  resourceNamespace: koordinator-system
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 60
profiles:
  - schedulerName: koord-scheduler
    plugins:
      queueSort:
        disabled: [{name: "*"}]
        enabled: [{name: Coscheduling}]
      preFilter:
        enabled: [{name: SchedulingHint}, {name: DeviceShare}]
      score:
        enabled:
          - {name: NodeNUMAResource, weight: 2}
          - {name: DeviceShare, weight: 3}
          - {name: NodeResourcesFitPlus, weight: 4}
          - {name: ScarceResourceAvoidance, weight: 5}
        disabled:
          - {name: NodeResourcesFit}
    pluginConfig:
      - name: NodeNUMAResource
        args:
          apiVersion: kubescheduler.config.k8s.io/v1
          kind: NodeNUMAResourceArgs
          defaultCPUBindPolicy: SpreadByPCPUs
          scoringStrategy: {type: MostAllocated, resources: [{name: cpu, weight: 1}, {name: memory, weight: 2}]}
      - name: DeviceShare
        args:
          kind: DeviceShareArgs
          allocator: autopilot
          scoringStrategy: {type: LeastAllocated, resources: [{name: koordinator.sh/gpu-memory-ratio, weight: 1}]}
          gpuShareUnsupportedModels: [{vendor: huawei, model: Ascend-310P3-300I-DUO}]
          gpuSharedResourceTemplatesConfig: {configMapNamespace: koordinator-system, configMapName: gpu-templates}
      - name: NodeResourcesFitPlus
        args:
          resources:
            nvidia.com/gpu: {type: MostAllocated, weight: 2}
            cpu: {type: LeastAllocated, weight: 1}
      - name: ScarceResourceAvoidance
        args: {resources: [nvidia.com/gpu]}
      - name: ElasticQuota
        args:
          kind: ElasticQuotaArgs
          quotaGroupNamespace: koordinator-system
          delayEvictTime: 300s
          monitorAllQuotas: true
          enableQueueHint: true
      - name: Coscheduling
        args: {kind: CoschedulingArgs, defaultTimeout: 5m, controllerWorkers: 2}
      - name: Reservation
        args: {kind: ReservationArgs, enablePreemption: true, gcDurationSeconds: 86400}
      - name: SchedulingHint
        args: {kind: SchedulingHintArgs, maxHintNodes: 100}
      - name: LoadAwareScheduling
        args:
          kind: LoadAwareSchedulingArgs
          usageThresholds: {cpu: 70, memory: 95}
          resourceWeights: {cpu: 1, memory: 1}
          allowCustomizeEstimation: true
          prodUsageIncludeSys: true
          dominantResourceWeight: 2
          estimatedSecondsAfterInitialized: 60
"""


def test_koordinators_profile_maps_onto_the_services() -> None:
    result = translate(yaml.safe_load(KOORD))
    assert result.scheduler_name == "koord-scheduler"
    placement = PlacementConfig.from_dict(result.services["device-allocator"])
    assert (placement.numa.strategy, placement.numa.weight, dict(placement.numa.resources)) == (
        "MostAllocated",
        2,
        {"cpu": 1, "memory": 2},
    )
    assert (placement.device.strategy, placement.device.weight) == ("LeastAllocated", 3)
    assert placement.gpu_share_unsupported_models == (("huawei", "Ascend-310P3-300I-DUO"),)
    assert placement.node_fit.weight == 0  # disabled score plugin
    assert placement.default_cpu_bind_policy == "SpreadByPCPUs"
    assert placement.fit_plus_weight == 4
    assert dict(placement.fit_plus)["nvidia.com/gpu"].strategy == "MostAllocated"
    assert (placement.scarce_weight, placement.scarce) == (5, ("nvidia.com/gpu",))
    load_aware = placement.load_aware  # LoadAwareSchedulingArgs: every field upstream defines is acted on
    assert dict(load_aware.usage_thresholds) == {"cpu": 70, "memory": 95}
    assert load_aware.allow_customize_estimation and load_aware.prod_usage_include_sys
    assert (load_aware.dominant_resource_weight, load_aware.estimated_seconds_after_initialized) == (2, 60)
    quota = QuotaConfig.from_dict(result.services["quota-manager"])
    assert (quota.delay_evict_seconds, quota.monitor_all_quotas) == (300, True)
    assert result.services["gang-coordinator"] == {
        "defaultTimeoutSeconds": 300,
        "retryInitialBackoffSeconds": 2,
        "retryMaxBackoffSeconds": 60,
    }
    warned = {w.path for w in result.warnings}
    assert {
        "leaderElection",
        "profiles[0].plugins",
        "profiles[0].pluginConfig[1].args.allocator",
        "profiles[0].pluginConfig[1].args.gpuSharedResourceTemplatesConfig",
        "profiles[0].pluginConfig[4].args.enableQueueHint",
        "profiles[0].pluginConfig[5].args.controllerWorkers",
        "profiles[0].pluginConfig[6].args.enablePreemption",
        "profiles[0].pluginConfig[7].args.maxHintNodes",
    } <= warned
    assert not any(w.startswith("profiles[0].pluginConfig[8]") for w in warned)  # LoadAwareScheduling


@pytest.mark.parametrize(
    ("mutate", "path", "says"),
    [
        (lambda d: d.update(percentageOfNodes=50), "percentageOfNodes", "unknown field"),
        (lambda d: d["profiles"][0]["pluginConfig"][4]["args"].update(delayEvict="1s"),
         "profiles[0].pluginConfig[4].args.delayEvict", "unknown field"),
        (lambda d: d["profiles"][0]["plugins"]["score"]["enabled"].append({"name": "GPUMagic"}),
         "profiles[0].plugins.score.enabled[4].name", "unknown plugin; known: AzureDiskLimits, "),
        (lambda d: d["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"].update(
            type="RequestedToCapacityRatio"),
         "profiles[0].pluginConfig[0].args.scoringStrategy.type", "not supported"),
        (lambda d: d["profiles"].append({"schedulerName": "second"}), "profiles", "exactly one profile"),
        (lambda d: d.update(apiVersion="kubescheduler.config.k8s.io/v1alpha1"), "apiVersion", "must be one of"),
    ],
    ids=["top-level typo", "plugin args typo", "unknown plugin", "unsupported strategy", "two profiles",
         "old apiVersion"],
)  # fmt: skip
def test_a_wrong_field_is_named(mutate: Any, path: str, says: str) -> None:
    doc = yaml.safe_load(KOORD)
    mutate(doc)
    with pytest.raises(SchedulerConfigError) as error:
        translate(doc)
    assert any(i.path == path and says in i.message for i in error.value.issues), error.value.issues


def test_a_service_reads_its_part_and_a_bad_file_is_a_clear_error(tmp_path: Path) -> None:
    from allot_contracts.errors import InvalidInput

    good = tmp_path / "koord.yaml"
    good.write_text(KOORD)
    config = ServiceSettings(service="quota-manager", database_url="x", config_file=str(good)).config()
    assert config["quotaGroupNamespace"] == "koordinator-system"
    bad = tmp_path / "bad.yaml"
    bad.write_text(KOORD.replace("podMaxBackoffSeconds", "podMaxBackofSeconds"))
    with pytest.raises(InvalidInput, match="podMaxBackofSeconds: unknown field"):
        ServiceSettings(service="quota-manager", database_url="x", config_file=str(bad)).config()


def test_allot_sim_run_reports_a_bad_config_without_a_traceback(tmp_path: Path, capsys: Any) -> None:
    from allot_cli.main import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(KOORD.replace("defaultCPUBindPolicy", "defaultCpuBindPolicy"))
    scenario = tmp_path / "empty.yaml"
    scenario.write_text("")
    with pytest.raises(SystemExit) as exit_code:
        main(["sim", "run", str(scenario), "--config", str(bad)])
    assert exit_code.value.code not in (0, None)
    err = capsys.readouterr().err
    assert "profiles[0].pluginConfig[0].args.defaultCpuBindPolicy: unknown field" in err
    assert "Traceback" not in err


def test_numa_scoring_strategy_is_the_numa_nodes_strategy() -> None:
    """NodeNUMAResourceArgs' numaScoringStrategy (NUMA nodes within a node, the default NUMA allocate strategy) is
    acted on, apart from scoringStrategy (the node score)."""
    raw = yaml.safe_load(KOORD)
    args = raw["profiles"][0]["pluginConfig"][0]["args"]
    args["numaScoringStrategy"] = {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}]}
    result = translate(raw)
    placement = PlacementConfig.from_dict(result.services["device-allocator"])
    assert (placement.numa_nodes.strategy, dict(placement.numa_nodes.resources)) == (
        "MostAllocated",
        {"cpu": 1},
    )
    assert placement.numa.strategy == "MostAllocated"  # scoringStrategy, the node score
    assert not any("numaScoringStrategy" in w.path for w in result.warnings)
    assert PlacementConfig.from_dict(
        translate(yaml.safe_load(KOORD)).services["device-allocator"]
    ).numa_nodes == (PlacementConfig().numa_nodes)
