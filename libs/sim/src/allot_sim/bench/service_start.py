"""One service's start as ``allot bench restart`` times it, run as its own process:
``python -m allot_sim.bench.service_start URL SERVICE INSTANCE SNAPSHOTS``.

It imports what the service's process imports (its entry module, ``<package>.main``: ``allot_runtime.service`` and
its own processor, not the other services'), sets the collector as the service's process does
(:func:`allot_runtime.memory.configure`), then restores the newest snapshot at or before the checkpoint (when
``SNAPSHOTS`` is 1) and folds the log up to the checkpoint, as ``ProcessorRuntime.rebuild_projection`` does: the
service is ready there. Only then is the projection's digest computed (the service logs it after it is ready), for
the benchmark to check. It prints one JSON line (seconds of the imports and of the rebuild, when it was ready on the
monotonic clock and the CPU seconds the process had used by then, the projection's digest, the position restored
from) and leaves at once, as a started service would go on without tearing its projection down. Its reads of the
log are bounded as the service's (``ALLOT_DB_READ_TIMEOUT``): a database that stops answering ends the start with
an error naming it, not a wait without end.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import asyncio  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402


def processor_class(service: str) -> Any:
    """Import the service's entry module (what its process imports) and return its processor class."""
    package = service.replace("-", "_")
    importlib.import_module(f"{package}.main")
    module = importlib.import_module(f"{package}.processor")
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and value.__module__ == module.__name__
            and getattr(value, "name", None) == service
        ):
            return value
    raise LookupError(f"no processor named {service} in {module.__name__}")


async def start(url: str, service: str, instance: str, snapshots: bool) -> dict[str, Any]:
    from allot_eventstore.bounds import DB_READ_TIMEOUT_VARIABLE
    from allot_eventstore.postgres import PostgresEventStore
    from allot_runtime import memory
    from allot_runtime.processor import Host
    from allot_runtime.recorded_config import config_hash
    from allot_runtime.replay import rebuild
    from allot_runtime.settings import db_bounds, db_read_timeout
    from allot_runtime.snapshots import restore

    factory = processor_class(service)
    memory.configure()
    imported = time.perf_counter()
    node = instance.split("@", 1)[1] if "@" in instance else ""
    config: dict[str, Any] = {"scope": {"node": node}} if node else {}

    def build() -> Host:
        return Host(factory(config), name=instance)

    # bounded as the service's own store (allot_runtime.service), from its settings: the commands' bounded_store
    # reads the same variable, but importing allot_stack would add to the imports measured
    read_timeout, write_timeout = db_bounds(db_read_timeout(os.environ))
    store = PostgresEventStore.connect(
        url,
        pool_size=2,
        read_timeout=read_timeout,
        write_timeout=write_timeout,
        timeouts_from=DB_READ_TIMEOUT_VARIABLE,
    )
    try:
        checkpoint = await store.get_checkpoint(instance)
        if snapshots:  # the benchmark's services run under the default configuration
            host, after, _ = await restore(build, store, config_hash=config_hash({}), until=checkpoint)
        else:
            host, after = build(), 0
        await rebuild(host, store, until=checkpoint, after=after)
    finally:
        await store.close()
    ready, ready_at, ready_cpu = time.perf_counter(), time.monotonic(), time.process_time()
    return {
        "import_s": imported - STARTED,
        "rebuild_s": ready - imported,
        "ready_at": ready_at,
        "ready_cpu_s": ready_cpu,
        "digest": host.digest(),
        "from": after,
    }


def main() -> None:
    url, service, instance, snapshots = sys.argv[1:5]
    result = asyncio.run(start(url, service, instance, snapshots == "1"))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
