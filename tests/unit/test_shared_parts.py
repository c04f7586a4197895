"""The services that keep every pod they read (device-allocator, quota-manager) hold the repeated parts of those pods
once, and the device-allocator those of the Nodes and Devices too (``allot_contracts.objects.sharing.Parts``). That a
restored service holds the same state byte for byte, sharing included, is the processor contract's snapshot test."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from allot_intake.documents import load_documents
from allot_intake.manifests import to_input
from allot_sim.simulator import Simulation


def _processor(service: str) -> Any:
    sim = Simulation()
    for doc in load_documents("examples/placement/02-gpus-one-pcie.yaml"):
        sim.apply(to_input(doc))
    return sim.host(service).processor


@pytest.mark.parametrize("service", ["device-allocator", "quota-manager"])
def test_pods_of_one_shape_are_held_with_one_copy_of_their_parts(service: str) -> None:
    pods = list(_processor(service).pods.values())
    alike = [(a, b) for a, b in itertools.combinations(pods, 2) if a.containers == b.containers]
    assert alike, "the workload has no two pods of one shape"
    assert all(a.containers is b.containers and a.namespace is b.namespace for a, b in alike)


def test_the_devices_of_one_model_are_held_with_one_copy_of_their_resources() -> None:
    devices = [
        device
        for state in _processor("device-allocator").engine._nodes.values()
        if state.inventory is not None
        for device in state.inventory.devices.get("gpu", ())
    ]
    assert len(devices) > 1
    assert all(device.resources is devices[0].resources for device in devices)
