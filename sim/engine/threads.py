"""Independent pieces of work side by side on the host's cores.

The simulator's large runs are whole-array NumPy work (copies, gathers, comparisons),
during which NumPy lets go of the interpreter; pieces that write disjoint arrays, or
disjoint parts of one, can then run on threads at once. Writing fresh memory is most of
their cost on a VM (each new page is a fault the kernel serves), and two threads take
their faults on two cores.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:       # not Linux
        return os.cpu_count() or 1


WORTH_THREADS = 1 << 20
"""Entries (spans, operations, table entries) below which a piece of work runs on one
thread: under it, starting threads and passing the interpreter between them costs more
than they save (a 256-GPU ring's record and metrics ran up to twice as long on two)."""


def each(fn: Callable[[T], R], items: Iterable[T], *, size: int) -> list[R]:
    """[fn(item) for item in items], on up to as many threads as the process has cores
    when the work covers `size` >= WORTH_THREADS entries (in order, one at a time,
    otherwise); the first exception is raised."""
    items = list(items)
    workers = min(cores(), len(items)) if size >= WORTH_THREADS else 1
    if workers < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))
