"""device-allocator holds to the processor contract (docs/adr/0012-processor-contract.md) over placement, gang
preemption, co-location (node side) and reservation examples."""

from __future__ import annotations

from allot_testing.processor_contract import ProcessorContract
from device_allocator.processor import DeviceAllocator


class TestDeviceAllocatorContract(ProcessorContract):
    processor = DeviceAllocator
    workload = (
        "examples/placement/01-gpu-cpu-memory-one-numa.yaml",
        "examples/placement/05-gpu-rdma-joint-vf.yaml",
        "examples/placement/06-hami-shared-gpu.yaml",
        "examples/gangs/02-gang-preemption.yaml",
        "examples/colocation/02-batch-overcommit.yaml",
        "examples/colocation/03-heartbeat-lost.yaml",
        "examples/reservation/01-reserve-for-owner.yaml",
    )
    bad_config = {"preemption": "sometimes"}
    bad_field = "preemption"
