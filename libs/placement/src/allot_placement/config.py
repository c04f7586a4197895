"""Placement configuration: named scoring policies, their weights, and engine knobs.

Responsibility: parse and validate the placement section of a YAML/JSON config (``allot sim run --config``, the
device-allocator settings) into an immutable ``PlacementConfig``; render it back (``to_dict``) so that a decision can
record exactly which configuration produced it (``version`` is derived from the content).

Shape (camelCase keys, every key optional; ``PlacementConfig()`` is the documented default)::

    policy: koordinator           # preset: koordinator | binpack | spread | fgd | bestfit | dotproduct |
                                  #         gpupacking | gpuclustering | random
    scoring:
      nodeResourcesFit:  {strategy: LeastAllocated, weight: 1, resources: {cpu: 1, memory: 1}}
      nodeNUMAResource:  {strategy: LeastAllocated, weight: 1, resources: {cpu: 1, memory: 1}}
      numaNodes:         {strategy: LeastAllocated, resources: {cpu: 1, memory: 1}}   # NUMA nodes within a node
      deviceShare:       {strategy: MostAllocated, weight: 1,
                          resources: {koordinator.sh/gpu-memory-ratio: 1, koordinator.sh/gpu-memory: 1,
                                      koordinator.sh/rdma: 1, koordinator.sh/fpga: 1}}
      nodeResourcesFitPlus:    {weight: 1, resources: {nvidia.com/gpu: {strategy: MostAllocated, weight: 2}}}
      scarceResourceAvoidance: {weight: 1, resources: [nvidia.com/gpu]}
    cpu: {defaultBindPolicy: FullPCPUs}
    devices: {gpuShareUnsupportedModels: [{vendor: nvidia, model: T4}]}
    fragmentation: {typicalPods: [{cpuMilli: 8000, gpuCount: 1, gpuMilli: 500, gpuModels: [], weight: 120}, ...]}
    seed: 0                       # the random policy's and the hash tie-break's seed
    tieBreak: name                # equal scores: lowest node name, or 'hash' (keyed by seed and pod)
    explain: {topScores: 3, maxNodeReasons: 16}
    percentageOfNodesToScore: 100 # feasible-node budget: 100 = score every node, 0 = adaptive (allot_placement.budget)
    loadAware: {usageThresholds: {cpu: 65, memory: 95}, ...}   # LoadAwareSchedulingArgs, see allot_placement.loadaware

``numaNodes`` is Koordinator's NodeNUMAResourceArgs ``numaScoringStrategy``: it ranks NUMA nodes within a node (the
topology hints' score) and is the default NUMA allocate strategy (cpusets pack with MostAllocated);
``nodeNUMAResource`` (``scoringStrategy``) scores the node. A preset sets the strategies first; explicit sections
then override individual fields. ``policy`` other than koordinator/binpack/spread selects a cluster-level GPU policy
(``gpu_policy``) that replaces the deviceShare score, see ``allot_placement.policies``. Errors are ``FieldIssue``
with the config path; ``from_dict`` raises ``ConfigError`` carrying all of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import msgspec

from allot_contracts.errors import InvalidConfig
from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_placement.loadaware import LoadAwareArgs
from allot_placement.loadaware import parse_args as parse_load_aware

__all__ = ["ENGINE_VERSION", "ConfigError", "FitPlusResource", "PlacementConfig", "Strategy", "TypicalPod"]

ENGINE_VERSION = "allot-placement/1"
STRATEGIES = ("LeastAllocated", "MostAllocated")
GPU_POLICIES = ("", "fgd", "bestfit", "dotproduct", "gpupacking", "gpuclustering", "random")
PRESETS = ("koordinator", "binpack", "spread", *[p for p in GPU_POLICIES if p])


class ConfigError(InvalidConfig):
    """An invalid placement config; ``errors`` (``issues``) lists every problem with its path."""

    def __init__(self, errors: list[FieldIssue]) -> None:
        super().__init__(errors)
        self.errors = errors


class Strategy(msgspec.Struct, frozen=True, kw_only=True):
    strategy: str
    weight: int
    resources: tuple[tuple[str, int], ...]


class FitPlusResource(msgspec.Struct, frozen=True, kw_only=True):
    strategy: str
    weight: int


class TypicalPod(msgspec.Struct, frozen=True, kw_only=True):
    """One shape of the typical-pod distribution the fragmentation measure is taken against."""

    cpu_milli: int
    gpu_count: int
    gpu_milli: int
    gpu_models: tuple[str, ...] = ()
    weight: int = 1

    def as_config(self) -> dict[str, int | list[str]]:
        """The shape as an entry of the config's ``fragmentation.typicalPods``."""
        return {
            "cpuMilli": self.cpu_milli,
            "gpuCount": self.gpu_count,
            "gpuMilli": self.gpu_milli,
            "gpuModels": list(self.gpu_models),
            "weight": self.weight,
        }


_DEVICE_WEIGHTS = ((n.FPGA, 1), (n.GPU_MEMORY, 1), (n.GPU_MEMORY_RATIO, 1), (n.RDMA, 1))
_CPU_MEM = ((n.CPU, 1), (n.MEMORY, 1))


def _preset(policy: str) -> dict[str, str]:
    if policy in GPU_POLICIES:  # the paper's policies score alone (node and NUMA weights 0)
        return {"node": "LeastAllocated", "numa": "LeastAllocated", "device": "MostAllocated", "weight": "0"}
    if policy == "binpack":
        return {"node": "MostAllocated", "numa": "MostAllocated", "device": "MostAllocated"}
    if policy == "spread":
        return {"node": "LeastAllocated", "numa": "LeastAllocated", "device": "LeastAllocated"}
    return {"node": "LeastAllocated", "numa": "LeastAllocated", "device": "MostAllocated"}


class PlacementConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Immutable, validated placement configuration. ``PlacementConfig()`` gives the defaults."""

    policy: str = "koordinator"
    node_fit: Strategy = Strategy(strategy="LeastAllocated", weight=1, resources=_CPU_MEM)
    numa: Strategy = Strategy(strategy="LeastAllocated", weight=1, resources=_CPU_MEM)
    numa_nodes: Strategy = Strategy(strategy="LeastAllocated", weight=1, resources=_CPU_MEM)
    device: Strategy = Strategy(strategy="MostAllocated", weight=1, resources=_DEVICE_WEIGHTS)
    fit_plus_weight: int = 1
    fit_plus: tuple[tuple[str, FitPlusResource], ...] = ()
    scarce_weight: int = 1
    scarce: tuple[str, ...] = ()
    default_cpu_bind_policy: str = "FullPCPUs"
    gpu_share_unsupported_models: tuple[tuple[str, str], ...] = ()
    typical_pods: tuple[TypicalPod, ...] = ()
    seed: int = 0
    tie_break: str = "name"
    top_scores: int = 3
    max_node_reasons: int = 16
    percentage_of_nodes_to_score: int = 100
    load_aware: LoadAwareArgs = LoadAwareArgs()

    @property
    def gpu_policy(self) -> str:
        """The cluster-level GPU policy replacing deviceShare scoring ("" = Koordinator pipeline)."""
        return self.policy if self.policy in GPU_POLICIES else ""

    @property
    def version(self) -> str:
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
        return f"{ENGINE_VERSION}+{digest}"

    @classmethod
    def validate(cls, d: Any) -> list[FieldIssue]:
        errors: list[FieldIssue] = []
        _parse(d, errors)
        return errors

    @classmethod
    def from_dict(cls, d: Any) -> PlacementConfig:
        errors: list[FieldIssue] = []
        cfg = _parse(d, errors)
        if errors or cfg is None:
            raise ConfigError(errors)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        def strat(s: Strategy) -> dict[str, Any]:
            return {"strategy": s.strategy, "weight": s.weight, "resources": dict(s.resources)}

        return {
            "policy": self.policy,
            "scoring": {
                "nodeResourcesFit": strat(self.node_fit),
                "nodeNUMAResource": strat(self.numa),
                # only when set: the version of a configuration that does not use it stays what it was
                **(
                    {"numaNodes": {k: v for k, v in strat(self.numa_nodes).items() if k != "weight"}}
                    if self.numa_nodes != _numa_nodes(self.policy)
                    else {}
                ),
                "deviceShare": strat(self.device),
                "nodeResourcesFitPlus": {
                    "weight": self.fit_plus_weight,
                    "resources": {k: {"strategy": v.strategy, "weight": v.weight} for k, v in self.fit_plus},
                },
                "scarceResourceAvoidance": {"weight": self.scarce_weight, "resources": list(self.scarce)},
            },
            "cpu": {"defaultBindPolicy": self.default_cpu_bind_policy},
            "devices": {
                "gpuShareUnsupportedModels": [
                    {"vendor": v, "model": m} for v, m in self.gpu_share_unsupported_models
                ]
            },
            "fragmentation": {"typicalPods": [t.as_config() for t in self.typical_pods]},
            "seed": self.seed,
            "tieBreak": self.tie_break,
            "explain": {"topScores": self.top_scores, "maxNodeReasons": self.max_node_reasons},
            # only when set: the version of a configuration that does not use them stays what it was
            **(
                {"percentageOfNodesToScore": self.percentage_of_nodes_to_score}
                if self.percentage_of_nodes_to_score != 100
                else {}
            ),
            **({"loadAware": self.load_aware.to_dict()} if self.load_aware != LoadAwareArgs() else {}),
        }


# --- parsing --------------------------------------------------------------------------------------------------------


def _section(
    d: Mapping[str, object], key: str, path: str, allowed: set[str], errors: list[FieldIssue]
) -> dict[str, Any]:
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        errors.append(FieldIssue(path=f"{path}{key}", message="must be a mapping"))
        return {}
    for extra in sorted(set(v) - allowed):
        errors.append(
            FieldIssue(
                path=f"{path}{key}.{extra}", message=f"unknown key; supported: {', '.join(sorted(allowed))}"
            )
        )
    return v


def _int(v: Any, path: str, errors: list[FieldIssue], lo: int = 0, default: int = 0) -> int:
    if v is None:
        return default
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        errors.append(FieldIssue(path=path, message=f"must be an integer >= {lo}"))
        return default
    return v


def _strategy(raw: dict[str, Any], base: Strategy, path: str, errors: list[FieldIssue]) -> Strategy:
    s = raw.get("strategy", base.strategy)
    if s not in STRATEGIES:
        errors.append(
            FieldIssue(
                path=f"{path}.strategy", message=f"unknown strategy {s!r}; one of {', '.join(STRATEGIES)}"
            )
        )
        s = base.strategy
    res = base.resources
    if raw.get("resources") is not None:
        r = raw["resources"]
        if not isinstance(r, dict):
            errors.append(
                FieldIssue(path=f"{path}.resources", message="must map resource names to integer weights")
            )
        else:
            res = tuple(
                (str(k), _int(r[k], f"{path}.resources[{k}]", errors, lo=1, default=1)) for k in sorted(r)
            )
    return Strategy(
        strategy=str(s),
        weight=_int(raw.get("weight"), f"{path}.weight", errors, default=base.weight),
        resources=res,
    )


def _numa_nodes(policy: str) -> Strategy:
    return Strategy(strategy=_preset(policy)["numa"], weight=1, resources=_CPU_MEM)


_TOP_KEYS = {
    "policy",
    "scoring",
    "cpu",
    "devices",
    "fragmentation",
    "seed",
    "tieBreak",
    "explain",
    "loadAware",
    "percentageOfNodesToScore",
}
_SCORING_KEYS = {
    "nodeResourcesFit",
    "nodeNUMAResource",
    "numaNodes",
    "deviceShare",
    "nodeResourcesFitPlus",
    "scarceResourceAvoidance",
}


def _parse(d: Any, errors: list[FieldIssue]) -> PlacementConfig | None:
    if d is None:
        d = {}
    if not isinstance(d, dict):
        errors.append(FieldIssue(path="", message="placement config must be a mapping"))
        return None
    for extra in sorted(set(d) - _TOP_KEYS):
        errors.append(
            FieldIssue(path=extra, message=f"unknown key; supported: {', '.join(sorted(_TOP_KEYS))}")
        )
    policy = d.get("policy", "koordinator")
    if policy not in PRESETS:
        errors.append(
            FieldIssue(path="policy", message=f"unknown policy {policy!r}; one of {', '.join(PRESETS)}")
        )
        policy = "koordinator"
    scoring = _section(d, "scoring", "", _SCORING_KEYS, errors)
    node_fit, numa, numa_nodes, device = _strategies(scoring, str(policy), errors)
    fp = _section(scoring, "nodeResourcesFitPlus", "scoring.", {"weight", "resources"}, errors)
    fit_plus = _fit_plus(fp.get("resources") or {}, errors)
    sc = _section(scoring, "scarceResourceAvoidance", "scoring.", {"weight", "resources"}, errors)
    scarce = sc.get("resources") or []
    if not isinstance(scarce, list) or not all(isinstance(x, str) for x in scarce):
        errors.append(
            FieldIssue(path="scoring.scarceResourceAvoidance.resources", message="must be a list of names")
        )
        scarce = []
    bind = _bind_policy(_section(d, "cpu", "", {"defaultBindPolicy"}, errors), errors)
    models = _unsupported_models(_section(d, "devices", "", {"gpuShareUnsupportedModels"}, errors), errors)
    typical = _fragmentation(_section(d, "fragmentation", "", {"typicalPods"}, errors), errors)
    if policy == "fgd" and not typical:
        errors.append(
            FieldIssue(
                path="fragmentation.typicalPods",
                message=f"policy {policy} needs the typical-pod distribution (see docs/placement.md)",
            )
        )
    ex = _section(d, "explain", "", {"topScores", "maxNodeReasons"}, errors)
    tie = d.get("tieBreak", "name")
    if tie not in ("name", "hash"):
        errors.append(
            FieldIssue(
                path="tieBreak", message="one of 'name' (lowest node name) or 'hash' (keyed by seed and pod)"
            )
        )
        tie = "name"
    return PlacementConfig(
        policy=str(policy),
        node_fit=node_fit,
        numa=numa,
        numa_nodes=numa_nodes,
        device=device,
        fit_plus_weight=_int(fp.get("weight"), "scoring.nodeResourcesFitPlus.weight", errors, default=1),
        fit_plus=fit_plus,
        scarce_weight=_int(sc.get("weight"), "scoring.scarceResourceAvoidance.weight", errors, default=1),
        scarce=tuple(sorted(set(scarce))),
        default_cpu_bind_policy=bind,
        gpu_share_unsupported_models=models,
        typical_pods=typical,
        seed=_int(d.get("seed"), "seed", errors),
        tie_break=str(tie),
        top_scores=_int(ex.get("topScores"), "explain.topScores", errors, default=3),
        max_node_reasons=_int(ex.get("maxNodeReasons"), "explain.maxNodeReasons", errors, default=16),
        percentage_of_nodes_to_score=_percentage(d.get("percentageOfNodesToScore"), errors),
        load_aware=parse_load_aware(d.get("loadAware"), "loadAware", errors),
    )


def _strategies(
    scoring: Mapping[str, object], policy: str, errors: list[FieldIssue]
) -> tuple[Strategy, Strategy, Strategy, Strategy]:
    """The node-fit, node-NUMA, NUMA-node and device-share strategies: the preset's, overridden field by field."""
    preset = _preset(policy)
    sk = {"strategy", "weight", "resources"}
    base_weight = int(preset.get("weight", "1"))
    node_fit = _strategy(
        _section(scoring, "nodeResourcesFit", "scoring.", sk, errors),
        Strategy(strategy=preset["node"], weight=base_weight, resources=_CPU_MEM),
        "scoring.nodeResourcesFit",
        errors,
    )
    numa = _strategy(
        _section(scoring, "nodeNUMAResource", "scoring.", sk, errors),
        Strategy(strategy=preset["numa"], weight=base_weight, resources=_CPU_MEM),
        "scoring.nodeNUMAResource",
        errors,
    )
    numa_nodes = _strategy(
        _section(scoring, "numaNodes", "scoring.", {"strategy", "resources"}, errors),
        _numa_nodes(policy),
        "scoring.numaNodes",
        errors,
    )
    device = _strategy(
        _section(scoring, "deviceShare", "scoring.", sk, errors),
        Strategy(strategy=preset["device"], weight=1, resources=_DEVICE_WEIGHTS),
        "scoring.deviceShare",
        errors,
    )
    return node_fit, numa, numa_nodes, device


def _fit_plus(fpr: object, errors: list[FieldIssue]) -> tuple[tuple[str, FitPlusResource], ...]:
    """``scoring.nodeResourcesFitPlus.resources``: a strategy and weight per resource name."""
    if not isinstance(fpr, dict):
        errors.append(FieldIssue(path="scoring.nodeResourcesFitPlus.resources", message="must be a mapping"))
        return ()
    fit_plus: list[tuple[str, FitPlusResource]] = []
    for k in sorted(fpr):
        p = f"scoring.nodeResourcesFitPlus.resources[{k}]"
        v = fpr[k] if isinstance(fpr[k], dict) else {}
        s = v.get("strategy", v.get("type", "MostAllocated"))
        if s not in STRATEGIES:
            errors.append(
                FieldIssue(
                    path=f"{p}.strategy", message=f"unknown strategy {s!r}; one of {', '.join(STRATEGIES)}"
                )
            )
            continue
        fit_plus.append(
            (
                str(k),
                FitPlusResource(
                    strategy=str(s), weight=_int(v.get("weight"), f"{p}.weight", errors, lo=1, default=1)
                ),
            )
        )
    return tuple(fit_plus)


def _bind_policy(cpu: Mapping[str, object], errors: list[FieldIssue]) -> str:
    default = PlacementConfig().default_cpu_bind_policy
    bind = cpu.get("defaultBindPolicy", default)
    if not isinstance(bind, str) or bind not in n.CPU_BIND_POLICIES:
        errors.append(FieldIssue(path="cpu.defaultBindPolicy", message=f"unknown bind policy {bind!r}"))
        return default
    return bind


def _unsupported_models(dev: Mapping[str, object], errors: list[FieldIssue]) -> tuple[tuple[str, str], ...]:
    """``devices.gpuShareUnsupportedModels``: the (vendor, model) pairs whose GPUs are never shared."""
    models = []
    listed = dev.get("gpuShareUnsupportedModels") or []
    if not isinstance(listed, list):
        errors.append(
            FieldIssue(path="devices.gpuShareUnsupportedModels", message="must be a list of {vendor, model}")
        )
        listed = []
    for i, m in enumerate(listed):
        if not isinstance(m, dict) or not isinstance(m.get("model"), str):
            errors.append(
                FieldIssue(path=f"devices.gpuShareUnsupportedModels[{i}]", message="needs vendor and model")
            )
            continue
        models.append((str(m.get("vendor") or ""), m["model"]))
    return tuple(sorted(models))


def _percentage(v: Any, errors: list[FieldIssue]) -> int:
    if v is None:
        return 100
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 100:
        errors.append(
            FieldIssue(
                path="percentageOfNodesToScore",
                message=f"must be an integer from 0 to 100 (0 = adaptive, 100 = score every node), got {v!r}",
            )
        )
        return 100
    return v


def _fragmentation(fr: dict[str, Any], errors: list[FieldIssue]) -> tuple[TypicalPod, ...]:
    out: list[TypicalPod] = []
    raw = fr.get("typicalPods") or []
    if not isinstance(raw, list):
        errors.append(FieldIssue(path="fragmentation.typicalPods", message="must be a list"))
        raw = []
    for i, t in enumerate(raw):
        p = f"fragmentation.typicalPods[{i}]"
        if not isinstance(t, dict):
            errors.append(FieldIssue(path=p, message="must be a mapping"))
            continue
        models = t.get("gpuModels") or []
        if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
            errors.append(FieldIssue(path=f"{p}.gpuModels", message="must be a list of model names"))
            models = []
        count = _int(t.get("gpuCount"), f"{p}.gpuCount", errors)
        milli = _int(t.get("gpuMilli"), f"{p}.gpuMilli", errors)
        if milli > 1000:
            errors.append(FieldIssue(path=f"{p}.gpuMilli", message="is per GPU: at most 1000"))
        out.append(
            TypicalPod(
                cpu_milli=_int(t.get("cpuMilli"), f"{p}.cpuMilli", errors),
                gpu_count=count,
                gpu_milli=milli if count else 0,
                gpu_models=tuple(sorted(models)),
                weight=_int(t.get("weight"), f"{p}.weight", errors, lo=1, default=1),
            )
        )
    return tuple(out)
