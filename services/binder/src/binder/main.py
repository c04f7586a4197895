"""binder process: wiring only."""

from allot_runtime.entry import service_main
from binder.processor import Binder


def main() -> None:
    service_main("binder", Binder)
