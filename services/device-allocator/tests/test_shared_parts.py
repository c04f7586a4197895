"""The device-allocator holds the repeated parts of the pods, nodes and devices it keeps once (``Parts``): it decides
what was recorded, and its snapshot holds the table of parts, so a restored service holds the same state."""

from __future__ import annotations

import itertools

from allot_runtime.processor import Host
from allot_testing.processor_contract import ProcessorContract
from device_allocator.processor import DeviceAllocator


class _Placement(ProcessorContract):
    processor = DeviceAllocator
    workload = ("examples/placement/02-gpus-one-pcie.yaml",)


def _live() -> Host:
    """A device-allocator that decided the workload, checked against what was recorded."""
    contract = _Placement()
    recorded = contract.recorded()[0]
    host = Host(DeviceAllocator({}))
    for record, outputs in contract.triggers(recorded):
        contract.decides_as_recorded(host, recorded, record, outputs)
    return host


def test_pods_and_devices_of_one_shape_are_held_with_one_copy_of_their_parts() -> None:
    processor = _live().processor
    pods = list(processor.pods.values())
    alike = [(a, b) for a, b in itertools.combinations(pods, 2) if a.containers == b.containers]
    assert alike, "the workload has no two pods of one shape"
    assert all(a.containers is b.containers and a.namespace is b.namespace for a, b in alike)
    devices = [
        device
        for state in processor.engine._nodes.values()
        if state.inventory is not None
        for device in state.inventory.devices.get("gpu", ())
    ]
    assert len(devices) > 1
    assert all(device.resources is devices[0].resources for device in devices)


def test_the_snapshot_holds_the_parts_so_a_restored_service_shares_as_the_live_one() -> None:
    contract = _Placement()
    recorded = contract.recorded()[0]
    triggers = list(contract.triggers(recorded))
    half = len(triggers) // 2
    live, restarted = Host(DeviceAllocator({})), Host(DeviceAllocator({}))
    for record, outputs in triggers[:half]:
        contract.decides_as_recorded(live, recorded, record, outputs)
    assert len(live.processor.parts), "nothing was held"
    restarted.restore_state(live.export_state())
    assert len(restarted.processor.parts) == len(live.processor.parts)
    for record, outputs in triggers[half:]:
        contract.decides_as_recorded(live, recorded, record, outputs)
        contract.decides_as_recorded(restarted, recorded, record, outputs)
    # which values are one object is part of the state's bytes: a snapshot check compares them
    assert restarted.export_state() == live.export_state()
    assert restarted.digest() == live.digest()
