"""node-reporter process: wiring only."""

from allot_runtime.entry import service_main
from node_reporter.processor import NodeReporter


def main() -> None:
    service_main("node-reporter", NodeReporter)
