"""The descheduler, pure: Koordinator's ``DeschedulerConfiguration`` and one LowNodeLoad round over the nodes'
NodeMetrics (which nodes are hot, which idle, which pods move where, and why each other pod does not).
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
    "DeschedulerConfig",
    "DeschedulerConfigError",
    "Detector",
    "LowNodeLoadArgs",
    "Move",
    "NodeFit",
    "NodeInput",
    "NodePool",
    "PodInput",
    "Profile",
    "RoundOutcome",
    "is_descheduler_config",
    "parse_config",
    "run_round",
]
