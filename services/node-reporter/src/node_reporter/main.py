"""node-reporter process: wiring only.

Kubernetes mode (``ALLOT_KUBE_MODE=kubernetes``) adds the list-watch of Nodes, Devices, NodeResourceTopologies and
NodeMetrics (``adapters/kube.py``) as an extra task next to the processor's consumer. A per-node instance
(``ALLOT_INSTANCE=<node>``) adds the agent (``adapters/agent.py``: discovery, heartbeat, NodeMetric sampling) unless
``ALLOT_AGENT=off``.
"""

import os
import sys

from allot_contracts.errors import InvalidInput
from allot_runtime import settings
from allot_runtime.entry import service_main
from node_reporter.processor import NodeReporter


def main() -> None:
    extras = []
    if os.environ.get("ALLOT_KUBE_MODE") == "kubernetes":
        from node_reporter.adapters.kube import kube_watch

        extras.append(kube_watch)
    if os.environ.get("ALLOT_INSTANCE") and os.environ.get("ALLOT_AGENT", "on") != "off":
        from node_reporter.adapters.agent import agent, parse_agent_config

        try:  # refuse a bad agent section before connecting anywhere
            loaded = settings.load("node-reporter")
            parse_agent_config(loaded.config().get("agent"), kubernetes=loaded.kube_mode == "kubernetes")
        except InvalidInput as exc:
            print(f"allot-node-reporter: invalid configuration: {exc}", file=sys.stderr)
            sys.exit(2)
        extras.append(agent)
    service_main("node-reporter", NodeReporter, extras=extras)
