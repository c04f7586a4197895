"""The descheduler, pure: Koordinator's ``DeschedulerConfiguration`` and one LowNodeLoad round over the nodes'
NodeMetrics (which nodes are hot, which idle, which pods move where, and why each other pod does not), and one
GPUDefrag round (the fewest migrations that let waiting GPU pods fit, scored by FGD fragmentation).
User-facing behaviour: docs/descheduling.md; where it runs: docs/adr/0009-descheduler.md."""

from allot_descheduling.config import (
    AnomalyCondition,
    DeschedulerConfig,
    DeschedulerConfigError,
    LowNodeLoadArgs,
    NodePool,
    Profile,
    parse_config,
)
from allot_descheduling.defrag import (
    DefragInput,
    DefragLimits,
    DefragOutcome,
    GpuNode,
    GpuPod,
    Measure,
    PendingGpuPod,
    plan_round,
)
from allot_descheduling.defrag_args import DefragArgs, gang_moves_whole
from allot_descheduling.lownodeload import (
    Caps,
    Detector,
    Move,
    NodeFit,
    NodeInput,
    PodInput,
    RoundOutcome,
    run_round,
)
from allot_descheduling.plugins import is_descheduler_config

__all__ = [
    "AnomalyCondition",
    "Caps",
    "DefragArgs",
    "DefragInput",
    "DefragLimits",
    "DefragOutcome",
    "DeschedulerConfig",
    "DeschedulerConfigError",
    "Detector",
    "GpuNode",
    "GpuPod",
    "LowNodeLoadArgs",
    "Measure",
    "Move",
    "NodeFit",
    "NodeInput",
    "NodePool",
    "PendingGpuPod",
    "PodInput",
    "Profile",
    "RoundOutcome",
    "gang_moves_whole",
    "is_descheduler_config",
    "parse_config",
    "plan_round",
    "run_round",
]
