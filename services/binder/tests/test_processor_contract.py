"""binder holds to the processor contract (docs/adr/0012-processor-contract.md) over placement and gang examples."""

from __future__ import annotations

from allot_testing.processor_contract import ProcessorContract
from binder.processor import Binder


class TestBinderContract(ProcessorContract):
    processor = Binder
    workload = (
        "examples/placement/01-gpu-cpu-memory-one-numa.yaml",
        "examples/gangs/02-gang-preemption.yaml",
    )
    bad_config = {"modes": "standalone"}
    bad_field = "modes"
