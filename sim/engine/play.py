"""The engine: plays a schedule on a hardware model and records the trace.

`simulate` looks up the scenario's scheme (sim.schemes), has it build the schedule and
model the memory, and plays the schedule; `play` times the operations with one of the
players (sim.engine.players: SimPy, the model, or the wave player, its bit-identical numpy
replay) and records the spans (sim.engine.record). The engine knows no scheme, layout or link
by name. Deterministic: the same schedule gives the identical trace. Definitions:
docs/design.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from sim.engine.host_memory import check_fits, gc_paused, keep_freed_memory, small_pages
from sim.engine.players import durations_s, times_simpy, times_waves
from sim.engine.pull import times_pulled
from sim.engine.queues import queue_batches
from sim.engine.record import record_owned
from sim.engine.schedule import Schedule
from sim.hardware.contention import Contention
from sim.hardware.model import HardwareModel
from sim.scenario.config import Scenario, Workload
from sim.schemes import get as get_scheme
from sim.trace.format import Trace

PLAYERS = ("auto", "simpy", "recurrence")
""""recurrence" is the wave player (the max-plus recurrence, a wave at a time); "auto"
(the default) is the wave player unless the hardware's contention needs the event loop:
the two give bit-identical traces, and the wave player is many times faster. NCCL's pull
on a GPU's computes alone (sim.hardware.contention.GpuPull) plays on the wave player with
each compute stretched (sim.engine.pull; the trace's meta says player "pull"), unless
"simpy" is asked for: the event loop re-times every compute at each transfer's start and
end, exact, and slow at thousands of GPUs."""

__all__ = ["PLAYERS", "play", "simulate"]


def play(schedule: Schedule, hardware: HardwareModel, workload: Workload,
         header: dict[str, Any] | None = None, *, player: str = "auto", own: bool = False,
         jitter: int | None = None, host_waits: bool = False) -> Trace:
    """Play `schedule` and return its simulated trace (spans by rank and stream, see
    sim.engine.record).

    own: the schedule was built for this play alone (as `simulate` builds it), so the
    columns each stage is the last to read are released after it (Schedule.release):
    the block shapes once timed, the resources and dependencies once played and the
    waits found, and the columns the trace's table is read from (the times too) as the
    table's columns that read them are written (sim.engine.record.record_owned).

    jitter: a seed for the host's measured spread of rank and block speeds, where the
    hardware's contention model has one (sim.hardware.contention); None plays every rank and
    block at the mean rate.

    host_waits: the host waits for the GPU before each call (sim.engine.players.durations_s).
    """
    if player not in PLAYERS:
        raise ValueError(f"unknown player {player!r}")
    contention = hardware.contention
    pull = None
    if hardware.gpu_pull is not None and len(schedule.transfer_ids):     # nothing to pull without a transfer
        contention = dataclasses.replace(contention or Contention(), gpu=hardware.gpu_pull)
        pull = tuple(np.zeros(len(schedule)) for _ in range(3))
    dur = durations_s(schedule, hardware, workload, host_waits, pull)
    if own:
        schedule.release("pairs", "q_tokens", "kv_tokens", "kv_rank")
    header = dict(header or {})
    meta = dict(header.get("meta", {}))
    inline_after_s = hardware.inline_send_after_s if schedule.posts is not None else None
    posts = None
    if inline_after_s is not None:
        player = "simpy"     # whether a post writes its send depends on who posted first
        meta["inline_send_after_s"] = inline_after_s
        posts = schedule.posts()
    stretch = (contention is not None and contention.gpu is not None and not contention.active_without_gpu
               and player != "simpy")
    if stretch:
        # NCCL's pull alone: the wave player with each compute stretched (sim.engine.pull)
        meta["contention"] = {"gpu": dataclasses.asdict(contention.gpu)}
        player = "pull"
    elif contention is not None and contention.active:
        player = "simpy"     # rates that change mid-block need the event loop
        meta["contention"] = {"slowdown_in_flight": contention.slowdown_in_flight,
                              "slowdown_in_flight_bwd": contention.slowdown_in_flight_bwd,
                              "compute_slots": contention.compute_slots,
                              "concurrency": contention.concurrency,
                              "host": dataclasses.asdict(contention.host) if contention.host else None}
        if contention.gpu is not None:
            meta["contention"]["gpu"] = dataclasses.asdict(contention.gpu)
    elif player == "auto":
        player = "recurrence"
    if player == "simpy":
        start, end, meta["sim_events"] = times_simpy(schedule, dur.tolist(), contention, jitter, posts,
                                                     inline_after_s or 0.0,
                                                     None if pull is None else tuple(x.tolist() for x in pull))
        host = contention.host if contention is not None else None
        if jitter is not None and host is not None and (host.spread or host.placement == "cores"):
            meta["jitter"] = jitter
        times = [np.array(start), np.array(end)]
        del start, end
    elif player == "pull":
        times = list(times_pulled(schedule, dur, pull, contention.gpu))
    else:
        times = list(times_waves(schedule, dur))
    del dur
    if own:
        schedule.release("resource", "extra_resources", "wave_starts")
    meta["player"] = player
    # the record takes the times over, and with `own` lets them go as it is done with them
    return Trace("simulated", schedule.n_ranks, record_owned(schedule, times, release=own, posts=posts),
                 header.get("config", {}), header.get("hardware", {}), meta)


def simulate(scenario: Scenario, hardware: HardwareModel | None = None, *, player: str = "auto",
             jitter: int | None = None) -> Trace:
    """Build the schedule of the scenario's scheme and play it.

    `hardware` replaces `scenario.hardware` (for example a calibrated profile): a hardware
    model (sim.hardware.model.HardwareModel); where its `p2p_queue`, a device runs its
    point-to-point batches one after another, as NCCL does (sim.engine.queues).
    Where the scheme counts its operations (Scheme.count_ops), a schedule that would not
    fit in the memory the machine has available is refused, RingsimError, before it is
    built. `jitter` seeds the host's spread of speeds (see play).
    """
    scheme = get_scheme(scenario.scheme)
    # the implementation's step (sim.implementations): its merge, host operations and
    # forwarding; the ideal one plays the scenario and hardware as they are
    impl = scenario.implementation
    scenario = impl.played(scenario)
    hw = impl.played_on(hardware if hardware is not None else scenario.hardware)
    check_fits(scheme, scenario)
    keep_freed_memory()
    with gc_paused(), small_pages():
        schedule = scheme.build_schedule(scenario)
        queued = hw.p2p_queue
        if queued and not scheme.batches_in_order(scenario):
            schedule = queue_batches(schedule)     # NCCL: one stream of point-to-point batches per device
        mem = scheme.peak_memory(scenario)
        header = {
            "config": scenario.describe(),
            "hardware": {**hw.describe(), "rate_flops": ideal_rate_flops(hw, scenario.workload)},
            "meta": {"peak_mem_bytes": [mem["total"]] * scenario.n_gpus, "memory": mem,
                     "schedule": scheme.name, "ops": len(schedule), "p2p_queue": queued},
        }
        return play(schedule, hw, scenario.workload, header, player=player, own=True, jitter=jitter,
                    host_waits=impl.host_waits(scenario))


def ideal_rate_flops(hw: HardwareModel, workload: Workload) -> float:
    """The rate of the ideal time (docs/design.md) on `hw`, at the workload's head dim."""
    return hw.rate_flops(workload.dtype, workload.head_dim)


