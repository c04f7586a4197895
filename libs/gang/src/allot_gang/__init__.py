"""allot_gang: pure gang scheduling (coscheduling) for Allot.

Declaring gangs (PodGroups and pod annotations), waiting for members, admitting whole gang groups, Strict and
NonStrict failure handling, timeouts driven by recorded timer ticks, PodGroup phases, and the queue order with
anti-starvation used by the device-allocator. No IO, no clock, no randomness: see ``engine`` for the contract and
``docs/gang.md`` for the user-facing description.
"""

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.duration import parse_go_duration

from ._keys import format_time, seconds
from .actions import (
    Action,
    GroupAdmitted,
    GroupReady,
    GroupRetryAt,
    GroupTimedOut,
    MemberWaiting,
    PassThrough,
    Rejected,
    ReleaseHolds,
    action_from_dict,
)
from .config import GangConfig, QueueConfig
from .engine import GangEngine
from .errors import ConfigError
from .predicate import is_satisfied
from .queue import Blocked, QueueItem, QueueState, Step, less, order, plan, record
from .status import phase
from .validate import goes_alone

__all__ = [
    "Action",
    "Blocked",
    "ConfigError",
    "FieldIssue",
    "GangConfig",
    "GangEngine",
    "GroupAdmitted",
    "GroupReady",
    "GroupRetryAt",
    "GroupTimedOut",
    "MemberWaiting",
    "PassThrough",
    "QueueConfig",
    "QueueItem",
    "QueueState",
    "Rejected",
    "ReleaseHolds",
    "Step",
    "action_from_dict",
    "format_time",
    "goes_alone",
    "is_satisfied",
    "less",
    "order",
    "parse_go_duration",
    "phase",
    "plan",
    "record",
    "seconds",
]
