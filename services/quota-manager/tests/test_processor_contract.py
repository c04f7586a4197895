"""quota-manager holds to the processor contract (docs/adr/0012-processor-contract.md) over the quota examples."""

from __future__ import annotations

from allot_testing.processor_contract import ProcessorContract
from quota_manager.processor import QuotaManager


class TestQuotaManagerContract(ProcessorContract):
    processor = QuotaManager
    workload = ("examples/quota/01-borrow-and-wait.yaml", "examples/quota/02-reclaim.yaml")
    bad_config = {"monitorAllQuotas": "sometimes"}
    bad_field = "monitorAllQuotas"
