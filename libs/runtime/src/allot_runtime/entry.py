"""The common ``main()`` of every service: load settings, build the processor, run, exit with a clear code.

The processor is built from the *effective* configuration: the config file (``ALLOT_CONFIG_FILE``) with what the
service adds to it (``prepare``: the binder's ``mode``), in the canonical form it is recorded in the log as
(``config.applied``, :mod:`allot_runtime.recorded_config`), plus the instance's ``scope``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Sequence

from allot_contracts.errors import Deposed, InvalidInput
from allot_contracts.jsonvalue import JsonObject
from allot_runtime import settings as settings_mod
from allot_runtime.metrics import CollectorFactory
from allot_runtime.processor import Processor
from allot_runtime.recorded_config import AppliedConfig, normalised
from allot_runtime.service import Extra, Observer, run_service

Prepare = Callable[[JsonObject], JsonObject]


def effective_config(settings: settings_mod.ServiceSettings, prepare: Prepare | None = None) -> AppliedConfig:
    """The configuration a service decides under (and records): its file, with what ``prepare`` adds, canonical."""
    config = settings.config()
    if prepare is not None:
        config = prepare(config)
    return AppliedConfig(config=normalised(config), source=settings.config_file)


def service_main(
    service: str,
    build: Callable[[JsonObject], Processor],
    *,
    observers: Sequence[Observer] = (),
    extras: Sequence[Extra] = (),
    collectors: Sequence[CollectorFactory] = (),
    scheduler: bool = False,
    prepare: Prepare | None = None,
) -> None:
    try:
        settings = settings_mod.load(service)
        applied = effective_config(settings, prepare)
        config = applied.config
        if settings.instance:
            if not getattr(build, "SCOPED", False):
                raise InvalidInput(
                    [("ALLOT_INSTANCE", f"{service} runs as a single instance; unset ALLOT_INSTANCE")]
                )
            config = {**config, "scope": {"node": settings.instance}}
        build(config)  # validate the config before connecting anywhere
    except (InvalidInput, ValueError) as exc:  # the engines' config errors are ValueErrors naming the field
        print(f"allot-{service}: invalid configuration: {exc}", file=sys.stderr)
        sys.exit(2)
    code = 0
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                run_service(
                    settings,
                    lambda: build(config),
                    observers=observers,
                    extras=extras,
                    collectors=collectors,
                    scheduler=scheduler,
                    config=applied,
                )
            )
    except* InvalidInput as group:  # e.g. NATS refused the credentials: retrying with the same cannot help
        code = _say(service, group, 2)
    except* (
        Deposed
    ) as group:  # the lock or the Lease is lost: a supervisor restarts this process as a standby
        code = max(code, _say(service, group, 1))
    if code:
        sys.exit(code)


def _say(service: str, group: BaseExceptionGroup[Exception], code: int) -> int:
    """Each of ``group``'s errors in one line on stderr (no traceback: an expected end); ``code``, the exit status."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            _say(service, exc, code)
        else:
            print(f"allot-{service}: {exc}", file=sys.stderr)
    return code
