"""``allot demo``: the dev stack with a real workload, end to end, non-interactively.

Starts a fresh stack (its own state directory), applies ``examples/demo/cluster.yaml`` and ``pods.yaml``, shows the
pods (one waits for quota), finishes a training job (``finish-training.yaml``) so the waiting pod is admitted and
placed, verifies the whole log with ``allot replay --verify``, stops the stack and prints a summary. Exit code 0 only
if every pod ended Bound and the verification is clean.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from allot_cli.files import file_name
from allot_intake.errors import InputError, UsageError
from allot_runtime.flags import seconds


def examples_dir() -> Path:
    for base in [Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents]:
        candidate = base / "examples" / "demo"
        if (candidate / "cluster.yaml").exists():
            return candidate
    raise UsageError("cannot find examples/demo (run from the repository, or pass --examples DIR)")


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def cmd_demo(args: argparse.Namespace) -> int:
    from allot_cli.commands.get import print_table
    from allot_cli.commands.replay import run as replay
    from allot_cli.commands.stack import Progress, print_summary
    from allot_cli.files import check_output
    from allot_intake.documents import load_documents
    from allot_intake.manifests import admit_all, to_input
    from allot_stack.apply import record
    from allot_stack.control import start_stack, stop_stack
    from allot_stack.listing import load_view, pods_rows

    examples = Path(args.examples) if args.examples else examples_dir()
    if args.state_dir:  # created if missing, in a directory that exists, as `allot up --state-dir`
        check_output(Path(args.state_dir), flag="--state-dir", directory=True)
    state_dir = Path(args.state_dir) if args.state_dir else Path(tempfile.mkdtemp(prefix="allot-demo-"))
    os.environ["ALLOT_STATE_DIR"] = str(state_dir)
    started = time.monotonic()
    verify_code = 1
    rows: list[dict[str, Any]] = []
    try:
        _step(f"starting the dev stack in {state_dir} (PostgreSQL, NATS JetStream, relay, seven services)")
        stack = start_stack(state_dir, timeout=args.timeout, reporter=Progress())
        print_summary(stack)

        def apply(name: str) -> None:
            path = str(examples / name)
            docs = load_documents(path)
            problems = list(admit_all(docs))
            if problems:
                raise InputError("\n".join(problems))
            asyncio.run(
                record(
                    stack["database_url"],
                    [to_input(d) for d in docs],
                    wait=True,
                    wait_each=False,
                    timeout=args.timeout,
                )
            )

        _step(
            "applying examples/demo/cluster.yaml: two GPU nodes with Koordinator Device objects, a CPU node, a quota"
        )
        apply("cluster.yaml")
        _step(
            "applying examples/demo/pods.yaml: training, a shared-GPU notebook (HAMi-core), inference, batch"
        )
        apply("pods.yaml")
        print_table(pods_rows(asyncio.run(load_view())), ["pod", "phase", "node", "devices", "quota", "qos"])
        _step("train-llama-1 finishes (examples/demo/finish-training.yaml): its quota and GPUs are returned")
        apply("finish-training.yaml")
        view = asyncio.run(load_view())
        rows = pods_rows(view)
        print_table(rows, ["pod", "phase", "node", "devices", "quota", "qos"])
        _step("allot replay --verify: hash chain, every decision re-derived, live projections vs the log")
        verify_code = asyncio.run(
            replay(
                argparse.Namespace(
                    verify=True, expect_head=None, until=None, config_dir=None, no_live=False, json=False
                )
            )
        )
    finally:
        _step("stopping the stack")
        stop_stack(state_dir, reporter=Progress())
        if not args.keep and not args.state_dir:
            shutil.rmtree(state_dir, ignore_errors=True)
    bound = [r for r in rows if r["phase"] == "Bound"]
    ok = bool(rows) and len(bound) == len(rows) and verify_code == 0
    print("\n== summary")
    print(f"pods bound:        {len(bound)}/{len(rows)}")
    print("replay --verify:   " + ("clean" if verify_code == 0 else "FAILED"))
    print(f"elapsed:           {time.monotonic() - started:.1f}s")
    if args.keep or args.state_dir:
        print(f"state kept in:     {state_dir}")
    print("demo " + ("succeeded" if ok else "FAILED"), file=sys.stderr if not ok else sys.stdout)
    return 0 if ok else 1


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("demo", help="run the dev stack with a demo workload end to end, then stop it")
    p.add_argument(
        "--examples", type=file_name, help="directory with cluster.yaml, pods.yaml, finish-training.yaml"
    )
    p.add_argument(
        "--state-dir", type=file_name, help="keep the stack's data here (default: a temporary directory)"
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary state directory")
    p.add_argument("--timeout", type=seconds, default=180.0)
    p.set_defaults(func=cmd_demo)
