"""``allot bench`` subcommands: one module each, exporting ``register(subparsers)``."""

import json
from collections.abc import Mapping


def report(result: Mapping[str, object], *, as_json: bool) -> None:
    """Print a benchmark's result: one JSON object, or aligned ``key  value`` lines."""
    if as_json:
        print(json.dumps(result, sort_keys=True))
        return
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
