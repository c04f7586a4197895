"""quota-manager process: wiring only."""

from allot_runtime.entry import service_main
from quota_manager.observe import quota_metrics
from quota_manager.processor import QuotaManager


def main() -> None:
    service_main("quota-manager", QuotaManager, collectors=[quota_metrics])
