"""Placement configuration: defaults, presets, validation paths, round trip, content-derived version."""

from __future__ import annotations

import pytest

from allot_placement import ConfigError, PlacementConfig


def test_defaults() -> None:
    cfg = PlacementConfig()
    assert cfg.policy == "koordinator"
    assert (cfg.node_fit.strategy, cfg.numa.strategy, cfg.device.strategy) == (
        "LeastAllocated",
        "LeastAllocated",
        "MostAllocated",
    )
    assert dict(cfg.device.resources) == {
        "koordinator.sh/fpga": 1,
        "koordinator.sh/gpu-memory": 1,
        "koordinator.sh/gpu-memory-ratio": 1,
        "koordinator.sh/rdma": 1,
    }
    assert cfg.default_cpu_bind_policy == "FullPCPUs"
    assert PlacementConfig.from_dict({}) == cfg == PlacementConfig.from_dict(None)


@pytest.mark.parametrize(
    ("policy", "strategies"),
    [
        ("binpack", ("MostAllocated",) * 3),
        ("spread", ("LeastAllocated",) * 3),
        ("koordinator", ("LeastAllocated", "LeastAllocated", "MostAllocated")),
    ],
    ids=["binpack", "spread", "koordinator"],
)
def test_presets(policy: str, strategies: tuple[str, ...]) -> None:
    cfg = PlacementConfig.from_dict({"policy": policy})
    assert (cfg.node_fit.strategy, cfg.numa.strategy, cfg.device.strategy) == strategies


def test_explicit_sections_override_presets() -> None:
    cfg = PlacementConfig.from_dict(
        {"policy": "binpack", "scoring": {"deviceShare": {"strategy": "LeastAllocated", "weight": 3}}}
    )
    assert (cfg.node_fit.strategy, cfg.device.strategy, cfg.device.weight) == (
        "MostAllocated",
        "LeastAllocated",
        3,
    )


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"policy": "magic"}, "policy"),
        ({"scoring": {"deviceShare": {"strategy": "Packed"}}}, "scoring.deviceShare.strategy"),
        ({"scoring": {"nodeResourcesFit": {"weight": -1}}}, "scoring.nodeResourcesFit.weight"),
        (
            {"scoring": {"nodeResourcesFitPlus": {"resources": {"nvidia.com/gpu": {"strategy": "Fancy"}}}}},
            "scoring.nodeResourcesFitPlus.resources[nvidia.com/gpu].strategy",
        ),
        (
            {"scoring": {"scarceResourceAvoidance": {"resources": "nvidia.com/gpu"}}},
            "scoring.scarceResourceAvoidance.resources",
        ),
        ({"cpu": {"defaultBindPolicy": "Whole"}}, "cpu.defaultBindPolicy"),
        ({"explain": {"topScores": "three"}}, "explain.topScores"),
        (
            {"fragmentation": {"typicalPods": [{"gpuCount": 1, "gpuMilli": 1500}]}},
            "fragmentation.typicalPods[0].gpuMilli",
        ),
        ({"sccoring": {}}, "sccoring"),
    ],
    ids=[
        "policy",
        "strategy",
        "weight",
        "fit-plus-strategy",
        "scarce-list",
        "bind-policy",
        "top-scores",
        "typical-pod-milli",
        "unknown-key",
    ],
)
def test_invalid_config_paths(raw: dict, path: str) -> None:
    with pytest.raises(ConfigError) as exc:
        PlacementConfig.from_dict(raw)
    assert [e.path for e in exc.value.errors] == [path]
    assert PlacementConfig.validate(raw)[0].path == path


def test_round_trip_and_version() -> None:
    raw = {
        "policy": "binpack",
        "scoring": {
            "nodeResourcesFitPlus": {
                "weight": 2,
                "resources": {"nvidia.com/gpu": {"strategy": "MostAllocated", "weight": 2}},
            },
            "scarceResourceAvoidance": {"resources": ["nvidia.com/gpu"]},
        },
        "seed": 7,
    }
    cfg = PlacementConfig.from_dict(raw)
    assert PlacementConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.version.startswith("allot-placement/1+")
    assert cfg.version == PlacementConfig.from_dict(cfg.to_dict()).version
    assert cfg.version != PlacementConfig().version


def test_numa_nodes_strategy_is_its_own_setting() -> None:
    # Koordinator's numaScoringStrategy: NUMA nodes within a node and the default NUMA allocate strategy
    assert PlacementConfig().numa_nodes.strategy == "LeastAllocated"
    assert PlacementConfig.from_dict({"policy": "binpack"}).numa_nodes.strategy == "MostAllocated"
    node_only = PlacementConfig.from_dict({"scoring": {"nodeNUMAResource": {"strategy": "MostAllocated"}}})
    assert node_only.numa_nodes.strategy == "LeastAllocated"
    assert "numaNodes" not in node_only.to_dict()["scoring"]  # unset: the version stays what it was
    packed = PlacementConfig.from_dict(
        {"scoring": {"numaNodes": {"strategy": "MostAllocated", "resources": {"cpu": 1}}}}
    )
    assert (packed.numa_nodes.strategy, dict(packed.numa_nodes.resources)) == ("MostAllocated", {"cpu": 1})
    assert PlacementConfig.from_dict(packed.to_dict()) == packed
    assert packed.version != PlacementConfig().version
    assert (
        PlacementConfig.validate({"scoring": {"numaNodes": {"weight": 2}}})[0].path
        == "scoring.numaNodes.weight"
    )
