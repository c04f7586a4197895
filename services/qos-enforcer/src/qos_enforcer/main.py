"""qos-enforcer process: wiring only."""

from allot_runtime.entry import service_main
from qos_enforcer.processor import QosEnforcer


def main() -> None:
    service_main("qos-enforcer", QosEnforcer)
