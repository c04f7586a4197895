"""``allot bench e2e``: peak memory read from ``/proc/<pid>/status`` (``VmHWM``) per process of the stack, and the
replicated cluster and burst it applies (every name distinct)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from allot_intake.errors import UsageError
from allot_sim.bench.e2e import device_allocator_config, peak_rss_mib, vm_hwm_kib

STATUS = """Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
VmPeak:\t  612345 kB
VmSize:\t  600000 kB
VmHWM:\t  307200 kB
VmRSS:\t  250000 kB
Threads:\t3
"""


def test_the_peak_resident_set_is_read_from_vmhwm() -> None:
    assert vm_hwm_kib(STATUS) == 307200


def test_a_status_without_vmhwm_has_no_peak() -> None:
    assert vm_hwm_kib("Name:\tkthreadd\nState:\tS (sleeping)\n") is None
    assert vm_hwm_kib("") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_each_name_gets_the_largest_peak_of_its_live_processes() -> None:
    own = vm_hwm_kib(Path(f"/proc/{os.getpid()}/status").read_text())
    assert own is not None and own > 0
    gone = 2**22 + 1  # above the kernel's default pid_max: no such process
    peaks = peak_rss_mib({"me": [os.getpid(), gone], "nobody": [gone]})
    assert set(peaks) == {"me"}
    assert peaks["me"] == pytest.approx(own / 1024, abs=0.2)


POD_CSV = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
"""
NODE_CSV = """sn,cpu_milli,memory_mib,gpu,model
openb-node-0001,64000,262144,2,V100M16
openb-node-0002,96000,786432,8,G2
"""


def test_a_burst_longer_than_the_pod_list_names_every_copy_apart(tmp_path: Path) -> None:
    from allot_sim.bench.openb_docs import name_of, pod_docs

    (tmp_path / "pods.csv").write_text(POD_CSV)
    names = [name_of(d) for d in pod_docs(tmp_path / "pods.csv", 5)]
    assert names == [
        "openb-pod-0000",
        "openb-pod-0001",
        "openb-pod-0000-r1",
        "openb-pod-0001-r1",
        "openb-pod-0000-r2",
    ]
    prefixed = [name_of(d) for d in pod_docs(tmp_path / "pods.csv", 3, prefix="r100-")]
    assert prefixed == ["r100-openb-pod-0000-0", "r100-openb-pod-0001-1", "r100-openb-pod-0000-2"]


def test_the_cluster_replicated_to_a_node_count_names_every_copy_apart(tmp_path: Path) -> None:
    from allot_sim.bench.openb_docs import cluster_docs, name_of

    (tmp_path / "nodes.csv").write_text(NODE_CSV)
    nodes = [name_of(d) for d in cluster_docs(tmp_path / "nodes.csv", 5) if d.get("kind") == "Node"]
    assert nodes == [
        "openb-node-0001",
        "openb-node-0002",
        "openb-node-0001-r1",
        "openb-node-0002-r1",
        "openb-node-0001-r2",
    ]
    assert len(cluster_docs(tmp_path / "nodes.csv")) == 4  # as read: two Nodes, two Devices


def test_snapshot_exports_are_read_from_the_services_logs_and_placed_in_phases() -> None:
    from allot_sim.bench._pauses import overlapping, parse, summary

    lines = [
        '{"ts": "2026-11-28T05:33:09.087Z", "level": "info", "msg": "device-allocator: snapshot at position 24652 '
        '(14708270 bytes, export 3096 ms)"}',
        '{"ts": "2026-11-28T05:33:10.000Z", "level": "info", "msg": "device-allocator started"}',
        "not json at all, snapshot at position",
        '{"ts": "2026-11-28T05:34:00.000Z", "level": "info", "msg": "device-allocator: snapshot at position 34652 '
        '(15708270 bytes, export 20 ms) encoded and written by a forked process in 3000 ms, peak RSS 480 MiB"}',
    ]
    found = parse("device-allocator", lines)
    assert len(found) == 2 and found[0].ms == 3096 and found[0].bytes == 14708270
    forked = found[1]
    assert (forked.ms, forked.forked_ms, forked.forked_rss_mib) == (20, 3000, 480)
    assert overlapping([forked], forked.ended - 3.5, forked.ended) == {"device-allocator": 20}, (
        "the fork, not after"
    )
    assert overlapping([forked], forked.ended - 2.9, forked.ended) == {}, (
        "the child encodes, the service decides"
    )
    found = found[:1]
    ended = found[0].ended
    assert overlapping(found, ended - 1.0, ended + 5) == {
        "device-allocator": 1000
    }  # the phase began mid-export
    assert overlapping(found, ended + 0.1, ended + 5) == {}
    assert summary(found) == {
        "device-allocator": {
            "count": 1,
            "max_ms": 3096,
            "total_ms": 3096,
            "max_bytes": 14708270,
            "forked_max_ms": 0,
            "forked_peak_rss_mib": 0,
        }
    }
    assert summary([*found, forked])["device-allocator"]["forked_peak_rss_mib"] == 480


@pytest.mark.parametrize("policy", ["koordinator", "binpack", "gpupacking"])
def test_the_stack_and_the_engine_alone_are_given_the_same_placement_policy(
    tmp_path: Path, policy: str
) -> None:
    from allot_placement import PlacementConfig
    from allot_runtime.settings import read_config_file
    from device_allocator.processor import DeviceAllocator

    path = device_allocator_config(tmp_path / "stack", policy)
    # the file where the supervisor finds it, as the service reads it (ALLOT_CONFIG_FILE)
    assert path == tmp_path / "stack" / "config" / "device-allocator.yaml"
    stack = DeviceAllocator(read_config_file(path)).config
    assert stack == PlacementConfig.from_dict(
        {"policy": policy}
    )  # what ``_throughput`` gives the engine alone
    assert device_allocator_config(tmp_path / "stack", policy) == path  # a kept state directory runs again


def test_a_state_directory_with_its_own_device_allocator_config_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config" / "device-allocator.yaml"
    config.parent.mkdir()
    config.write_text("policy: spread\npreemption: false\n")
    with pytest.raises(UsageError, match="device-allocator config of its own"):
        device_allocator_config(tmp_path, "koordinator")
    assert config.read_text() == "policy: spread\npreemption: false\n"  # the user's file is left as it was
