"""``allot schema``: the JSON Schema of every event and of the wire envelope, for subscribers in any language."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from allot_contracts.schema import export_schemas


def cmd_schema(args: argparse.Namespace) -> int:
    schemas = export_schemas()
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, schema in schemas.items():
            (out / f"{name}.json").write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        print(f"wrote {len(schemas)} schemas to {out}")
        return 0
    print(json.dumps(schemas, indent=2, sort_keys=True))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("schema", help="print (or write) the JSON Schemas of all events")
    p.add_argument("--out", help="directory to write one <type>.json per event plus envelope.json")
    p.set_defaults(func=cmd_schema)
