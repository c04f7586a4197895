"""A device-allocator snapshot leaves the placement engine's memos out: a restored service starts with them empty,
with one engine shared by its parts as before, and decides what the live one decides."""

from __future__ import annotations

from allot_placement.engine import PlacementEngine
from allot_runtime.processor import Host
from allot_testing.processor_contract import ProcessorContract
from device_allocator.processor import DeviceAllocator


class _Placement(ProcessorContract):
    processor = DeviceAllocator
    workload = ("examples/placement/01-gpu-cpu-memory-one-numa.yaml",)


def _live() -> Host:
    """A device-allocator that decided the workload, checked against what was recorded."""
    contract = _Placement()
    recorded = contract.recorded()[0]
    host = Host(DeviceAllocator({}))
    for record, outputs in contract.triggers(recorded):
        contract.decides_as_recorded(host, recorded, record, outputs)
    return host


def test_the_memos_are_filled_by_deciding_and_left_out_of_the_snapshot() -> None:
    live = _live()
    engine = live.processor.engine
    assert any(len(getattr(engine, memo)) for memo in ("_memo", "_admit_memo")), "deciding filled no memo"
    state = live.export_state()
    emptied = Host(DeviceAllocator({}))
    emptied.restore_state(state)
    for memo in PlacementEngine.MEMOS:
        setattr(engine, memo, getattr(emptied.processor.engine, memo))
    assert live.export_state() == state, "the snapshot changed when the memos were emptied"


def test_a_restored_engine_is_one_object_shared_by_the_processor_s_parts() -> None:
    live = _live()
    restored = Host(DeviceAllocator({}))
    restored.restore_state(live.export_state())
    processor = restored.processor
    assert processor.nodes.engine is processor.engine
    assert processor.reservations.engine is processor.engine
    assert processor.preemptions.engine is processor.engine
    assert all(
        not getattr(processor.engine, memo).__len__() for memo in ("_memo", "_admit_memo", "_static_memo")
    )
    assert restored.digest() == live.digest()
