"""What a decider's process loads to start: the log and its service shell, not the signing or tracing libraries."""

import subprocess
import sys

import pytest

from allot_stack.pipeline import PROCESSORS

SERVICES = [service.replace("-", "_") for service, _ in PROCESSORS]


@pytest.mark.parametrize("package", SERVICES)
def test_a_service_start_imports_neither_cryptography_nor_opentelemetry(package: str) -> None:
    code = (
        "import sys\n"
        f"import {package}.main\n"
        "import allot_eventstore, allot_eventstore.postgres, allot_eventstore.verify\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'cryptography', 'opentelemetry'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
