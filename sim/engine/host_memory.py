"""The simulator's own memory on this machine: whether a schedule fits in what the system
can give before it is built, and the process settings a large simulation runs under
(small pages, freed memory kept for the next array, the cycle collector paused)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import threading
from typing import Any

from sim.errors import RingsimError
from sim.scenario.config import Scenario
from sim.units import fmt_bytes

try:
    from numpy._core.multiarray import _set_madvise_hugepage as _numpy_madvise
except ImportError:           # NumPy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage as _numpy_madvise
    except ImportError:
        _numpy_madvise = None

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


M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
"""glibc's mallopt parameters (malloc.h)."""
MMAP_THRESHOLD_BYTES = 32 * 2 ** 20
"""Arrays up to this size come from the heap, not a mapping of their own: glibc's largest
(DEFAULT_MMAP_THRESHOLD_MAX on 64-bit), a column of four million float64s."""
TRIM_THRESHOLD_BYTES = 1 << 30
"""Freed heap memory up to this much is kept for the next arrays, not given back."""
TOP_PAD_BYTES = 64 * 2 ** 20
"""The heap grows by at least this much at a time."""

_kept = False


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep the memory a simulation frees for its next arrays (once per
    process; whether the setting holds). By default an array of more than 128 KiB is a mapping
    of its own, given back when freed: the next one faults every page in afresh, and a
    simulation makes hundreds of temporaries the size of its schedule's columns. On a 2-core
    VM of the kind these benchmarks run on, a forward ring of 1,024 GPUs with its scheme row
    on one core (`bench/speed/malloc_reuse.py`, three rounds): 185,123 page faults, 0.37 s of
    system time and 1.79 s in all by default; at most 524, 0.00 s and 1.41 s with the
    memory kept (the all-gather of 8 head groups 2.48 s to 2.10 s). The process holds its largest
    simulation's memory afterwards, as a server holding its cache does. Not glibc (macOS,
    musl): nothing changes."""
    global _kept
    if _kept or not sys.platform.startswith("linux"):
        return _kept
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # each returns 1 where glibc took the value
    _kept = all(mallopt(param, value) == 1 for param, value in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
                                                                (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
                                                                (M_TOP_PAD, TOP_PAD_BYTES)))
    return _kept


def madvise_setter():
    """NumPy's switch for huge-page advice (it returns the previous setting), or None."""
    return _numpy_madvise


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
