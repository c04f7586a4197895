"""qos-enforcer holds to the processor contract (docs/adr/0012-processor-contract.md) over co-location examples."""

from __future__ import annotations

from allot_testing.processor_contract import ProcessorContract
from qos_enforcer.processor import QosEnforcer


class TestQosEnforcerContract(ProcessorContract):
    processor = QosEnforcer
    workload = (
        "examples/colocation/01-load-aware.yaml",
        "examples/colocation/02-batch-overcommit.yaml",
        "examples/colocation/04-numa-batch-and-amplification.yaml",
    )
    bad_config = {"nope": 1}
    bad_field = "nope"
