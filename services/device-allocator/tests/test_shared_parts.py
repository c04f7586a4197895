"""The device-allocator holds the repeated parts of the pods, nodes and devices it keeps once (``Parts``). That a
restored service holds the same state byte for byte, sharing included, is the processor contract's snapshot test."""

from __future__ import annotations

import itertools

from allot_intake.documents import load_documents
from allot_intake.manifests import to_input
from allot_sim.simulator import Simulation


def test_pods_and_devices_of_one_shape_are_held_with_one_copy_of_their_parts() -> None:
    sim = Simulation()
    for doc in load_documents("examples/placement/02-gpus-one-pcie.yaml"):
        sim.apply(to_input(doc))
    processor = sim.host("device-allocator").processor
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
