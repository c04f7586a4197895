"""``allot bench e2e``'s peak memory: ``VmHWM`` read from ``/proc/<pid>/status``, per process of the stack."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from allot_sim.bench.e2e import peak_rss_mib, vm_hwm_kib

STATUS = """Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
VmPeak:\t  612345 kB
VmSize:\t  600000 kB
VmHWM:\t  307200 kB
VmRSS:\t  250000 kB
Threads:\t3
"""


def test_the_peak_resident_set_is_read_from_vmhwm() -> None:
    assert vm_hwm_kib(STATUS) == 307200


def test_a_status_without_vmhwm_has_no_peak() -> None:
    assert vm_hwm_kib("Name:\tkthreadd\nState:\tS (sleeping)\n") is None
    assert vm_hwm_kib("") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_each_name_gets_the_largest_peak_of_its_live_processes() -> None:
    own = vm_hwm_kib(Path(f"/proc/{os.getpid()}/status").read_text())
    assert own is not None and own > 0
    gone = 2**22 + 1  # above the kernel's default pid_max: no such process
    peaks = peak_rss_mib({"me": [os.getpid(), gone], "nobody": [gone]})
    assert set(peaks) == {"me"}
    assert peaks["me"] == pytest.approx(own / 1024, abs=0.2)
