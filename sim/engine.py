"""The engine: plays a schedule on a hardware model and records the trace.

`simulate` looks up the scenario's scheme (sim.schemes), has it build the schedule and
model the memory, and plays the schedule; `play` times the operations with one of the
players (sim.players: SimPy, the model, or the wave player, its bit-identical numpy
replay) and records the spans (sim.record). The engine knows no scheme, layout or link
by name. Deterministic: the same schedule gives the identical trace. Definitions:
docs/design.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import threading
from typing import Any

import numpy as np

from sim.config import Scenario, Workload
from sim.errors import RingsimError
from sim.players import durations_s, head_geometry, times_simpy, times_waves
from sim.queues import queue_batches
from sim.record import record_owned
from sim.schedule import Schedule
from sim.schemes import get as get_scheme
from sim.trace import Trace
from sim.units import fmt_bytes

PLAYERS = ("auto", "simpy", "recurrence")
""""recurrence" is the wave player (the max-plus recurrence, a wave at a time); "auto"
(the default) is the wave player unless the hardware's contention needs the event loop:
the two give bit-identical traces, and the wave player is many times faster."""

__all__ = ["PLAYERS", "durations_s", "play", "simulate"]


def play(schedule: Schedule, hardware: Any, workload: Workload,
         header: dict[str, Any] | None = None, *, player: str = "auto", own: bool = False,
         jitter: int | None = None) -> Trace:
    """Play `schedule` and return its simulated trace (spans by rank and stream, see
    sim.record).

    own: the schedule was built for this play alone (as `simulate` builds it), so the
    columns each stage is the last to read are released after it (Schedule.release):
    the block shapes once timed, the resources and dependencies once played and the
    waits found, and the columns the trace's table is read from (the times too) as the
    table's columns that read them are written (sim.record.record_owned).

    jitter: a seed for the host's measured spread of rank and block speeds, where the
    hardware's contention model has one (sim.contention); None plays every rank and
    block at the mean rate.
    """
    if player not in PLAYERS:
        raise ValueError(f"unknown player {player!r}")
    dur = durations_s(schedule, hardware, workload)
    if own:
        schedule.release("pairs", "q_tokens", "kv_tokens", "kv_rank")
    header = dict(header or {})
    meta = dict(header.get("meta", {}))
    contention = getattr(hardware, "contention", None)
    inline_after_s = getattr(hardware, "inline_send_after_s", None) if schedule.posts is not None else None
    posts = None
    if inline_after_s is not None:
        player = "simpy"     # whether a post writes its send depends on who posted first
        meta["inline_send_after_s"] = inline_after_s
        posts = schedule.posts()
    if contention is not None and contention.active:
        player = "simpy"     # rates that change mid-block need the event loop
        meta["contention"] = {"slowdown_in_flight": contention.slowdown_in_flight,
                              "slowdown_in_flight_bwd": contention.slowdown_in_flight_bwd,
                              "compute_slots": contention.compute_slots,
                              "concurrency": contention.concurrency,
                              "host": dataclasses.asdict(contention.host) if contention.host else None}
    elif player == "auto":
        player = "recurrence"
    if player == "simpy":
        start, end, meta["sim_events"] = times_simpy(schedule, dur.tolist(), contention, jitter, posts,
                                                     inline_after_s or 0.0)
        host = contention.host if contention is not None else None
        if jitter is not None and host is not None and (host.spread or host.placement == "cores"):
            meta["jitter"] = jitter
        times = [np.array(start), np.array(end)]
        del start, end
    else:
        times = list(times_waves(schedule, dur))
    del dur
    if own:
        schedule.release("resource", "extra_resources", "wave_starts")
    meta["player"] = player
    # the record takes the times over, and with `own` lets them go as it is done with them
    return Trace("simulated", schedule.n_ranks, record_owned(schedule, times, release=own, posts=posts),
                 header.get("config", {}), header.get("hardware", {}), meta)


def simulate(scenario: Scenario, hardware: Any | None = None, *, player: str = "auto",
             jitter: int | None = None) -> Trace:
    """Build the schedule of the scenario's scheme and play it.

    `hardware` replaces `scenario.hardware` (for example a calibrated profile); it must
    offer compute_time_s, transfer_time_s, rate_flops and describe, and may offer
    compute_times_s and transfer_times_s (see sim.players.durations_s), and `p2p_queue`:
    true where a device runs its point-to-point batches one after another, as NCCL does
    (sim.queues), and `takes_head_geometry`: true where its compute times and rate take
    the workload's head dim and K/V heads per query head (sim.players.head_geometry).
    Where the scheme counts its operations (Scheme.count_ops), a schedule that would not
    fit in the memory the machine has available is refused, RingsimError, before it is
    built. `jitter` seeds the host's spread of speeds (see play).
    """
    scheme = get_scheme(scenario.scheme)
    hw = hardware if hardware is not None else scenario.hardware
    _check_fits(scheme, scenario)
    with _gc_paused(), _small_pages():
        schedule = scheme.build_schedule(scenario)
        queued = bool(getattr(hw, "p2p_queue", False))
        if queued and not scheme.batches_in_order(scenario):
            schedule = queue_batches(schedule)     # NCCL: one stream of point-to-point batches per device
        mem = scheme.peak_memory(scenario)
        header = {
            "config": scenario.describe(),
            "hardware": {**hw.describe(), "rate_flops": ideal_rate_flops(hw, scenario.workload)},
            "meta": {"peak_mem_bytes": [mem["total"]] * scenario.n_gpus, "memory": mem,
                     "schedule": scheme.name, "ops": len(schedule), "p2p_queue": queued},
        }
        return play(schedule, hw, scenario.workload, header, player=player, own=True, jitter=jitter)


def ideal_rate_flops(hw: Any, workload: Workload) -> float:
    """The rate of the ideal time (docs/design.md) on `hw`, at the workload's head dim where
    the hardware's rates depend on it (`takes_head_geometry`)."""
    geometry = head_geometry(hw, workload)
    return hw.rate_flops(workload.dtype, geometry["head_dim"]) if geometry else hw.rate_flops(workload.dtype)


BYTES_PER_OP = 130
"""Peak memory of a simulation per operation of its schedule (the schedule, the times and
the trace together), with room to spare: a forward ring of 4096 GPUs, 33.5M operations,
peaks at 2911 MB (87 bytes an operation; bench/bench_sim.py), and at 4161 MB before the
record let go of its sources."""


def _check_fits(scheme: Any, scenario: Scenario) -> None:
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
def _small_pages():
    """NumPy asks Linux for huge pages for every large array (madvise); on a VM whose
    host takes freed memory back (the balloon's free page reporting works on blocks of
    huge-page size and up), each huge page is then memory the host must supply afresh,
    where small pages reuse what the guest freed. Measured on a 2-core VM of the kind
    these benchmarks run on, a forward ring of 4096 GPUs, the first call in a fresh
    process: 6.8 s with small pages and 7.8 s with huge ones in one run of
    `bench/bench_sim.py --huge-pages`; in three pairs of fresh processes, taken in turn,
    6.9-7.1 s against 8.1-8.9 s, of which system time 4.0-4.3 s against 6.9-7.4 s. A
    simulation writes its arrays once, so it loses little to the smaller pages
    wherever they cost no more. The setting is the process's: simulations on several
    threads (a dashboard server's) share it, the first one in turns it off and the last
    one out restores it."""
    global _pages_users, _pages_before
    setting = _madvise_setter()
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


def _madvise_setter():
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
def _gc_paused():
    """Large arrays and few objects: the cycle collector only costs time here."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
