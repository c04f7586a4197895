"""gang-coordinator process: wiring only."""

from allot_runtime.entry import service_main
from gang_coordinator.observe import gang_metrics
from gang_coordinator.processor import GangCoordinator


def main() -> None:
    service_main("gang-coordinator", GangCoordinator, collectors=[gang_metrics])
