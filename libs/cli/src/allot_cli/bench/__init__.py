"""``allot bench`` subcommands: one module each, exporting ``register(subparsers)``."""

import json
from collections.abc import Mapping


def report(result: Mapping[str, object], *, as_json: bool, sort_keys: bool = False) -> None:
    """Print a benchmark's result: one JSON object (keys sorted), or aligned ``key  value`` lines in the result's
    order (sorted with ``sort_keys``)."""
    if as_json:
        print(json.dumps(result, sort_keys=True))
        return
    width = max(len(k) for k in result)
    for key, value in sorted(result.items()) if sort_keys else result.items():
        print(f"{key:<{width}}  {value}")
