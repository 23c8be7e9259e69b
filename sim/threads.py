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


def each(fn: Callable[[T], R], items: Iterable[T], *, threads: bool = True) -> list[R]:
    """[fn(item) for item in items], on up to as many threads as the process has cores
    (in order, one at a time, where it has one core or `threads` is false: work too
    small to pay for starting threads); the first exception is raised."""
    items = list(items)
    workers = min(cores(), len(items)) if threads else 1
    if workers < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))
