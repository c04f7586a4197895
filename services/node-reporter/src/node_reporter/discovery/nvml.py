"""NVIDIA GPUs as NVML reports them: a thin adapter over ``pynvml`` returning plain records.

Responsibility: ``query`` asks NVML (package ``nvidia-ml-py``, imported only when called) for every GPU's index, minor
number, UUID, name, total memory, PCI bus id and the error counters health is judged on, and the driver version.
``NvmlAnswer`` is plain data: it round-trips through JSON (``encode_answer``/``decode_answer``), so answers recorded
on a GPU machine replay in tests and the mapping to Koordinator objects is tested without a GPU.

No GPU is not an error: without the package, the driver's library or any GPU, ``query`` returns no records and a
``reason`` saying why. A failure on one GPU's optional counter (``NOT_SUPPORTED`` on older or consumer GPUs) leaves
that field ``None``; a GPU NVML reports as lost is recorded with ``lost``.

Health rule (``gpu_health``, pure): a GPU is unhealthy when NVML reports it lost, when retired pages are pending a
reset (``nvmlDeviceGetRetiredPagesPendingStatus``, pre-Ampere), or when row remapping failed or is pending a reset
(``nvmlDeviceGetRemappedRows``, Ampere and later). Unknown counters do not make a GPU unhealthy. XID events need a
long-lived event loop and are not part of this snapshot.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import msgspec

__all__ = ["GpuRecord", "NvmlAnswer", "decode_answer", "encode_answer", "gpu_health", "query"]

T = TypeVar("T")


class GpuRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    index: int
    minor: int | None  # /dev/nvidia<minor>; None when NVML cannot tell
    uuid: str
    name: str
    memory_total: int  # bytes
    pci_bus_id: str  # as NVML spells it: 00000000:1B:00.0
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    lost: bool = False


class NvmlAnswer(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    devices: tuple[GpuRecord, ...] = ()
    driver_version: str = ""
    reason: str = ""  # why there are no devices (or why some are missing)


def encode_answer(answer: NvmlAnswer) -> bytes:
    return msgspec.json.format(msgspec.json.encode(answer), indent=2)


def decode_answer(data: bytes | str) -> NvmlAnswer:
    return msgspec.json.decode(data, type=NvmlAnswer)


def gpu_health(record: GpuRecord) -> tuple[bool, str]:
    """(healthy, why not) of one GPU."""
    if record.lost:
        return False, "NVML reports the GPU lost"
    if record.retired_pages_pending:
        return False, "retired pages are pending a GPU reset"
    if record.remapped_rows_failure:
        return False, "row remapping failed"
    if record.remapped_rows_pending:
        return False, "remapped rows are pending a GPU reset"
    return True, ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _device(nvml: Any, index: int) -> GpuRecord:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def optional(call: Callable[[], T]) -> T | None:
        try:
            return call()
        except nvml.NVMLError_NotSupported:
            return None

    lost = False
    try:
        pending = optional(lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
        rows = optional(lambda: nvml.nvmlDeviceGetRemappedRows(handle))
    except nvml.NVMLError_GpuIsLost:
        pending, rows, lost = None, None, True
    return GpuRecord(
        index=index,
        minor=optional(lambda: int(nvml.nvmlDeviceGetMinorNumber(handle))),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        name=_text(nvml.nvmlDeviceGetName(handle)),
        memory_total=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        retired_pages_pending=None if pending is None else pending == nvml.NVML_FEATURE_ENABLED,
        remapped_rows_pending=None if rows is None else bool(rows[2]),
        remapped_rows_failure=None if rows is None else bool(rows[3]),
        lost=lost,
    )


def query(nvml: ModuleType | Any = None) -> NvmlAnswer:
    """Every GPU NVML sees, by index; ``nvml`` defaults to the ``pynvml`` module."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return NvmlAnswer(reason="the NVML bindings (package nvidia-ml-py) are not installed")
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return NvmlAnswer(reason=f"NVML is not available: {exc}")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        count = int(nvml.nvmlDeviceGetCount())
        devices: list[GpuRecord] = []
        skipped: list[str] = []
        for i in range(count):
            try:
                devices.append(_device(nvml, i))
            except nvml.NVMLError as exc:
                skipped.append(f"GPU {i}: {exc}")
        reason = "; ".join(skipped) if skipped else ("" if count else "NVML reports no GPU")
        return NvmlAnswer(devices=tuple(devices), driver_version=driver, reason=reason)
    except nvml.NVMLError as exc:
        return NvmlAnswer(reason=f"NVML query failed: {exc}")
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
