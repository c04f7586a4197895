"""gang-coordinator holds to the processor contract (docs/adr/0012-processor-contract.md) over the gang examples."""

from __future__ import annotations

from allot_testing.processor_contract import ProcessorContract
from gang_coordinator.processor import GangCoordinator


class TestGangCoordinatorContract(ProcessorContract):
    processor = GangCoordinator
    workload = ("examples/gangs/01-gang-of-four.yaml", "examples/gangs/02-gang-preemption.yaml")
    bad_config = {"queue": {"nope": 1}}
    bad_field = "queue.nope"
