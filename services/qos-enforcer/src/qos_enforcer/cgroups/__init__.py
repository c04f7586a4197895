"""Node-side cgroup enforcement for qos-enforcer: hierarchy detection, kubelet cgroup paths, the v1/v2 knob
mapping, and a writer that verifies every write by reading it back.

- :mod:`.mode`: unified / legacy / hybrid detection from mountinfo or the root's layout.
- :mod:`.paths`: pod and container cgroup directories for the cgroupfs and systemd drivers (pure).
- :mod:`.knobs`: the one mapping table from Koordinator's knobs to v1/v2 files and formats, and planning (pure).
- :mod:`.writer`: applying a plan below an allowed base, read-back verification, drift detection (IO).
"""

from qos_enforcer.cgroups.knobs import (
    KNOBS,
    CpuQuota,
    Settings,
    UnsupportedKnob,
    Write,
    plan,
    shares_to_weight,
)
from qos_enforcer.cgroups.mode import CgroupError, CgroupLayout, CgroupMode, detect, parse_mountinfo
from qos_enforcer.cgroups.paths import container_cgroup, pod_cgroup, qos_cgroup
from qos_enforcer.cgroups.writer import Applied, CgroupWriter

__all__ = [
    "KNOBS",
    "Applied",
    "CgroupError",
    "CgroupLayout",
    "CgroupMode",
    "CgroupWriter",
    "CpuQuota",
    "Settings",
    "UnsupportedKnob",
    "Write",
    "container_cgroup",
    "detect",
    "parse_mountinfo",
    "plan",
    "pod_cgroup",
    "qos_cgroup",
    "shares_to_weight",
]
