"""qos-enforcer process: wiring only.

The processor decides the plans; a per-node instance (``ALLOT_INSTANCE``) also runs the node agent
(``adapters/agent.py``) as an extra task, which applies them on this node and records what it did.
"""

from allot_runtime.entry import service_main
from qos_enforcer.adapters.agent import node_agent
from qos_enforcer.processor import QosEnforcer


def main() -> None:
    service_main("qos-enforcer", QosEnforcer, extras=[node_agent])
