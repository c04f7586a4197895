"""device-allocator process: wiring only."""

from allot_runtime.entry import service_main
from device_allocator.observe import observe_scheduling, placement_metrics
from device_allocator.processor import DeviceAllocator


def main() -> None:
    service_main(
        "device-allocator",
        DeviceAllocator,
        observers=[observe_scheduling],
        collectors=[placement_metrics],
        scheduler=True,
    )
