"""node-reporter process: wiring only.

Kubernetes mode (``ALLOT_KUBE_MODE=kubernetes``) adds the list-watch of Nodes, Devices and NodeResourceTopologies
(``adapters/kube.py``) as an extra task next to the processor's consumer.
"""

import os

from allot_runtime.entry import service_main
from node_reporter.processor import NodeReporter


def main() -> None:
    extras = []
    if os.environ.get("ALLOT_KUBE_MODE") == "kubernetes":
        from node_reporter.adapters.kube import kube_watch

        extras.append(kube_watch)
    service_main("node-reporter", NodeReporter, extras=extras)
