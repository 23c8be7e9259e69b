"""The simulator's own memory on this machine: whether a schedule fits in what the system
can give before it is built, and the process settings a large simulation runs under
(small pages, the cycle collector paused)."""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Any

from sim.errors import RingsimError
from sim.scenario.config import Scenario
from sim.units import fmt_bytes

BYTES_PER_OP = 130
"""Peak memory of a simulation per operation of its schedule (the schedule, the times and
the trace together), with room to spare: a forward ring of 4096 GPUs, 33.5M operations,
peaks at 2911 MB (87 bytes an operation; bench/speed/simulate.py), and at 4161 MB before the
record let go of its sources."""


def check_fits(scheme: Any, scenario: Scenario) -> None:
    """RingsimError, one line, where the schedule cannot fit in the memory this machine has
    available (rather than the system stopping the process part way)."""
    if scheme.count_ops is None:
        return
    free = available_memory_bytes()
    ops = scheme.count_ops(scenario)
    need = ops * BYTES_PER_OP
    if free is not None and need > free:
        raise RingsimError(f"{scheme.name} on {scenario.n_gpus} GPUs is {ops:,} operations: simulating it takes "
                           f"about {fmt_bytes(need, '.1f')}, and this machine has {fmt_bytes(free, '.1f')} "
                           f"available; use fewer GPUs or a machine with more memory")


def available_memory_bytes() -> int | None:
    """Memory the system can give this process without swapping (Linux: MemAvailable),
    or None where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


_pages_lock = threading.Lock()


_pages_users = 0


_pages_before: bool | None = None


@contextlib.contextmanager
def small_pages():
    """NumPy asks Linux for huge pages for every large array (madvise); on a VM whose
    host takes freed memory back (the balloon's free page reporting works on blocks of
    huge-page size and up), each huge page is then memory the host must supply afresh,
    where small pages reuse what the guest freed. Measured on a 2-core VM of the kind
    these benchmarks run on, a forward ring of 4096 GPUs, the first call in a fresh
    process: 6.8 s with small pages and 7.8 s with huge ones in one run of
    `bench/speed/simulate.py --huge-pages`; in three pairs of fresh processes, taken in turn,
    6.9-7.1 s against 8.1-8.9 s, of which system time 4.0-4.3 s against 6.9-7.4 s. A
    simulation writes its arrays once, so it loses little to the smaller pages
    wherever they cost no more. The setting is the process's: simulations on several
    threads (a dashboard server's) share it, the first one in turns it off and the last
    one out restores it."""
    global _pages_users, _pages_before
    setting = madvise_setter()
    if setting is None:
        yield
        return
    with _pages_lock:
        if _pages_users == 0:
            _pages_before = setting(False)
        _pages_users += 1
    try:
        yield
    finally:
        with _pages_lock:
            _pages_users -= 1
            if _pages_users == 0 and _pages_before is not None:
                setting(_pages_before)


def madvise_setter():
    """NumPy's switch for huge-page advice (it returns the previous setting), or None."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:           # NumPy 1.x
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return None
    return _set_madvise_hugepage


@contextlib.contextmanager
def gc_paused():
    """Large arrays and few objects: the cycle collector only costs time here."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
