"""node-reporter holds to the processor contract (docs/adr/0012-processor-contract.md) over co-location examples."""

from __future__ import annotations

from allot_testing.processor_contract import ProcessorContract
from node_reporter.processor import NodeReporter


class TestNodeReporterContract(ProcessorContract):
    processor = NodeReporter
    workload = ("examples/colocation/01-load-aware.yaml", "examples/placement/05-gpu-rdma-joint-vf.yaml")
    bad_config = {"scope": {"node": 7}}
    bad_field = "scope.node"
