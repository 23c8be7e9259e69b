"""Compute and transfers slowed by what runs beside them: transfers in flight and shared cores.

Effects a calibrated profile can carry (all absent from a datasheet preset):
- interference: while a transfer of its own (a send or a receive) is in flight, a
  rank's compute progresses at 1/slowdown of its speed (NCCL kernels take SMs from the
  attention kernel; on CPU, what the host model below does not already explain);
- the host (CPU profiles): processor sharing of C cores. Every compute in progress
  demands its rank's threads, every transfer in flight a measured share of a core for
  gloo's threads; when the demand D exceeds C, the host delivers D / slowdown(D) cores,
  slowdown(D) being D / C or a law measured on the host (k processes computing at
  once, at demand k·threads) that never goes below D / C. Computes and transfers split
  them with a transfer `transfer_weight` times slower than a compute (split_cores;
  measured in ring conditions: the scheduler does not serve gloo's threads as it
  serves the computes), at weight 1 everything slowdown(D) times slower than alone. A
  backward compute runs by the law measured on a backward block where the profile has
  one: time-sliced, it can lose more than its share of the cores. A transfer is stretched
  by the computes and a compute by the transfers of every rank, sends and receives alike;
- core sharing without a host model (profiles calibrated before it): only computes
  count, at 1 / slowdown(active) from the measured `concurrency` pairs, or at
  slots / active once more ranks compute than there are compute slots; transfers keep
  their duration.

The two slowdowns of a compute (its rank's transfer in flight, the host's sharing)
multiply: they are independent causes acting on the same progress rate.

On a GPU (`GpuPull`, the datasheet model under NCCL: sim.hardware.cluster.Hardware) a
transfer in flight takes from the compute of both its GPUs what NCCL's kernel holds:
its CTAs, one per channel, each on an SM of its own for the whole transfer (NCCL's
kernels are persistent: a CTA loops over its channel's chunks until the call ends), and
its copies' share of HBM bandwidth. A compute's time splits into a compute-bound part,
which runs on the SMs NCCL leaves (rate 1 - CTAs / SMs), and a memory-bound part (the
merge after a block, streaming at the GPU's memory bandwidth), which gets the HBM
bandwidth NCCL's copies leave (rate 1 - bytes/s x HBM_PASSES / bandwidth); with m the
memory-bound share of its time alone, it progresses at 1 / ((1 - m) / (1 - SM share) +
m / (1 - HBM share)). Transfers keep their NCCL time: NCCL's kernel is launched first
and holds its SMs.

The law is a mean. On a host whose processes outnumber its cores, the scheduler serves
them unevenly: of three processes on two cores one holds a core and two share the other
(their blocks take 1x and 2x alone, the mean 1.5-1.8x), and the placement changes as
they block and wake; even two processes on two cores run a few percent apart for a
whole run. A ring waits for its slowest rank, so a mean-rate play predicts it short.
A host with placement "cores" plays the first of these: a compute is put on a core as
it starts (the least-loaded one; among equal ones the first, or in a seeded play a drawn
one), the computes on a core split it, and when a compute ends and two cores' loads
differ by two, one moves from the busier to the idler; the rates are scaled so that
their mean is the law's, the host's throughput as measured. Placement "held" is the
same without the move: a compute keeps the core it started on until it ends, and two
computes sharing a core split it even while another core idles (no more computes than
cores, each at most its core's share). So a three-rank ring ran on the 2-core VM: in a
trace of its first step the rank alone on a core computed its block in 58.8 ms, and the
two that shared the other took 113.6 and 114.0 ms, each half a core after the third went
idle. Calibration gives CPU profiles "held" (see PLACEMENTS).
A host with a measured `spread` gives a play with a jitter seed a factor per rank for
the run and one per block, lognormal of mean 1 with the measured CVs; the prediction
of a run is then the median over seeded plays (sim.calibration.validation.simulate_replays, asked
for with `ringsim validate --replays`: the draws are independent where the host's cores
tie the ranks together, and on the 2-core VM they did not help on balance).

A duration from the hardware model is the work at full speed. `Sharing` tracks, inside
the SimPy run, every compute and transfer in progress, and whenever one starts or ends
it books the progress made so far and re-times those whose rate changed (by
interrupting their timeouts). Exact for this fluid model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import simpy

from sim.errors import RingsimError


def _unit_lognormal(rng: np.random.Generator, cv: float) -> float:
    """A draw of mean 1 and coefficient of variation `cv` (1.0 when cv is 0): lognormal,
    as a time is positive and its spread multiplies."""
    if cv <= 0:
        return 1.0
    s2 = float(np.log1p(cv * cv))
    return float(rng.lognormal(-s2 / 2, np.sqrt(s2)))


def interpolate(points: tuple[tuple[float, float], ...], x: float) -> float:
    """Slowdown at `x` from ascending (x, slowdown) pairs: 1 below the first point,
    piecewise-linear between points, extended along the last segment; never below 1."""
    if x <= points[0][0] or len(points) == 1:
        return max(1.0, points[0][1]) if x >= points[0][0] else 1.0
    for (k0, f0), (k1, f1) in zip(points, points[1:]):
        if x <= k1:
            break
    return max(1.0, f0 + (f1 - f0) * (x - k0) / (k1 - k0))


def sharing_bound(processes: float, threads_per_process: float, cores: float) -> float:
    """The least slowdown `processes` busy processes of `threads_per_process` threads
    each can show on `cores` cores against one alone: they cannot get more than all the
    cores, so each runs at least processes·threads/cores times slower (1 if they fit)."""
    return max(1.0, processes * threads_per_process / cores)


def split_cores(law: float, c: float, x: float, weight: float) -> tuple[float, float]:
    """(compute slowdown, transfer slowdown) when computes demanding `c` cores and
    transfers demanding `x` run at once on a host that serves the demand c + x at
    `law` times slower than alone: it delivers (c + x) / law cores in all, and a transfer
    runs `weight` times slower than a compute, except that a compute never runs faster
    than alone (the transfers then get what it leaves)."""
    if weight == 1.0 or not c or not x:
        return law, law
    compute = max(1.0, law * (c + x / weight) / (c + x))
    return compute, max(1.0, x / ((c + x) / law - c / compute))


PLACEMENTS = ("even", "cores", "held")
"""Host.placement's values. Measured on the 2-core VM, three processes computing the same
block at once took either about their time alone or about twice it, in runs of several
blocks (one process held a core, two shared the other), not 1.5x each
(bench/results/calibration/cpu-2core/microbenchmarks.json, its concurrency entries'
time_by_process_s). Re-simulated on the committed runs 45-60 (the fifth VM), "held"
predicted better than "even" in 14 of 16
(bench/results/experiments/cpu-2core/resimulate-held.json)."""


@dataclass(frozen=True, kw_only=True)
class Host:
    """A CPU host whose cores the ranks' computes and their transfers share."""

    cores: float
    """Cores of the host (C)."""
    threads_per_rank: float = 1.0
    """Cores one compute in progress demands (the rank's thread count)."""
    transfer_cores: float = 0.0
    """Cores one transfer in flight demands (gloo's threads), measured."""
    transfer_weight: float = 1.0
    """How many times slower than a compute a transfer runs while the cores are
    oversubscribed by both, measured (`slowdowns`); 1: everything at the same rate."""
    law: tuple[tuple[float, float], ...] | None = None
    """Measured (cores demanded, slowdown) pairs, ascending; None: demand / cores."""
    law_bwd: tuple[tuple[float, float], ...] | None = None
    """The same pairs measured on a backward block, for backward computes; None: `law`.
    Time-sliced, a backward block can lose more than its share of the cores."""
    spread: tuple[tuple[float, float, float], ...] | None = None
    """Measured (processes on the host, per-rank CV, per-block CV), ascending: how much a
    rank's speed over a run, and a block's time around it, vary when that many processes
    compute at once. None: every rank and block at the law's mean rate. A play draws from
    it only when given a seed (`jitter`)."""
    placement: str = "even"
    """How the cores serve more computes than there are cores. "even": every compute at
    the law's rate. "cores": each compute sits on one core, as the scheduler places a
    process (a new one on the least-loaded core, one moved from the busiest core to the
    idlest when a compute ends and their loads differ by two), and a core's occupants
    split it, scaled so that the mean rate is still the law's (PLACEMENTS). "held": the
    same with no move, and with no more computes than cores a compute runs at most at
    its core's share (1 / the computes on it). Only for one thread per rank on a whole
    number of cores; otherwise even."""

    def __post_init__(self) -> None:
        for name in ("cores", "threads_per_rank"):
            if not getattr(self, name) > 0:
                raise RingsimError(f"host: {name} must be positive, got {getattr(self, name)!r}")
        if not self.transfer_cores >= 0:
            raise RingsimError(f"host: transfer_cores must be non-negative, got {self.transfer_cores!r}")
        if not (self.transfer_weight > 0 and np.isfinite(self.transfer_weight)):
            raise RingsimError(f"host: transfer_weight must be positive, got {self.transfer_weight!r}")
        for name in ("law", "law_bwd"):
            if getattr(self, name) is not None and not getattr(self, name):
                raise RingsimError(f"host: {name} must hold (demand, slowdown) pairs or be None")
        if self.placement not in PLACEMENTS:
            raise RingsimError(f"host: placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if self.spread is not None and (not self.spread or any(
                len(p) != 3 or not p[0] > 0 or not p[1] >= 0 or not p[2] >= 0 for p in self.spread)):
            raise RingsimError("host: spread must hold (processes, rank CV, block CV) triples, processes "
                               "positive and CVs non-negative, or be None")

    def demand(self, computes: int, transfers: int) -> float:
        return computes * self.threads_per_rank + transfers * self.transfer_cores

    def spread_at(self, processes: int) -> tuple[float, float]:
        """(per-rank CV, per-block CV) with `processes` on the host: the measured point at
        or below it (the nearest above where none is below), (0, 0) without a spread."""
        if not self.spread:
            return 0.0, 0.0
        below = [p for p in self.spread if p[0] <= processes]
        k, rank_cv, block_cv = below[-1] if below else self.spread[0]
        return rank_cv, block_cv

    def with_sharing(self, factor: float) -> "Host":
        """This host with its cores serving more than one process `factor` times worse
        (hw.reference.host_sharing: the law at two processes, read again, over the
        profile's): every law point from two processes' demand up times `factor`, a
        point between one process and two by the share of the way, one process as it
        is. Without a measured law, the law is first the bound it stands for (demand /
        cores, at one to four processes' demand and the law's own points)."""
        if not (factor > 0 and np.isfinite(factor)):
            raise RingsimError(f"a sharing factor must be positive, got {factor!r}")
        one, two = self.threads_per_rank, 2 * self.threads_per_rank

        def scaled(law):
            if law is None:
                law = tuple((k * one, max(1.0, k * one / self.cores)) for k in (1, 2, 3, 4))
            out = []
            for d, f in law:
                share = min(1.0, max(0.0, (d - one) / (two - one)))
                out.append((d, f * (1.0 + (factor - 1.0) * share)))
            return tuple(out)
        return replace(self, law=scaled(self.law), law_bwd=None if self.law_bwd is None else scaled(self.law_bwd))

    def slowdowns(self, computes: int, transfers: int, backward: bool = False) -> tuple[float, float]:
        """(compute slowdown, transfer slowdown) with `computes` computes (backward ones
        with `backward`) and `transfers` transfers in progress. The host delivers
        demand / slowdown(demand) cores in all (the law); computes and transfers split
        them so that a transfer runs `transfer_weight` times slower than a compute, none
        faster than alone (a compute at full speed leaves the rest to the transfers)."""
        c, x = computes * self.threads_per_rank, transfers * self.transfer_cores
        return split_cores(self.slowdown(c + x, backward), c, x, self.transfer_weight)

    def slowdown(self, demand: float, backward: bool = False) -> float:
        """How much slower everything in progress runs than alone, at `demand` cores (a
        backward compute by its own law where one was measured)."""
        bound = max(1.0, demand / self.cores)
        law = self.law_bwd if backward and self.law_bwd else self.law
        return max(bound, interpolate(law, demand)) if law else bound


HBM_PASSES = 2
"""Times each byte a transfer moves crosses one end's HBM: NCCL's Simple protocol writes
into a FIFO buffer in the receiver's memory (NCCL_BUFFSIZE, 4 MiB: src/init.cc
DEFAULT_BUFFSIZE) that the receiver's CTAs copy into the user's buffer, so the sender
reads each byte once and the receiver writes, reads and writes it again: four passes
over the two GPUs, two on each (NVIDIA/nccl v2.30.7-1, src/transport/p2p.cc and
src/device/prims_simple.h)."""
MAX_SHARE = 0.95
"""A guard: NCCL never leaves a compute less than this much of the SMs or of HBM (its
channels stay far below a GPU's SMs; HBM is shared, not taken)."""


@dataclass(frozen=True, kw_only=True)
class GpuPull:
    """What a transfer in flight takes from the computes on its two GPUs (module docstring)."""

    sms: int
    """Streaming multiprocessors of the GPU."""
    hbm_gbps: float
    """The GPU's memory bandwidth, GB/s (what the merge streams at)."""

    def rate(self, ctas: float, bytes_per_s: float, memory_share: float) -> float:
        """Progress rate of a compute (1 alone) with `ctas` CTAs of NCCL and `bytes_per_s` of
        its transfers on its GPU; `memory_share`: the memory-bound share of its time."""
        sm = min(ctas / self.sms, MAX_SHARE)
        hbm = min(bytes_per_s * HBM_PASSES / (self.hbm_gbps * 1e9), MAX_SHARE)
        return 1.0 / ((1.0 - memory_share) / (1.0 - sm) + memory_share / (1.0 - hbm))


@dataclass(frozen=True)
class Contention:
    slowdown_in_flight: float = 1.0
    """Compute time factor while a transfer of the same rank is in flight (>= 1)."""
    slowdown_in_flight_bwd: float | None = None
    """The same for a backward compute, measured apart where it was (a backward step has
    its K/V and its dK/dV hop to send); None: `slowdown_in_flight`."""
    compute_slots: float | None = None
    """Ranks that can compute at full speed at once (None: unlimited, as on GPUs)."""
    concurrency: tuple[tuple[float, float], ...] | None = None
    """Measured (processes computing at once, slowdown of each) pairs, ascending; when
    given it replaces `compute_slots`."""
    host: Host | None = None
    """Processor sharing of the host's cores by computes and transfers; when given it
    replaces `compute_slots` and `concurrency`."""
    gpu: GpuPull | None = None
    """What a GPU transfer's NCCL kernel takes from the computes on its GPUs (module
    docstring); None: nothing."""

    @property
    def active(self) -> bool:
        return self.active_without_gpu or self.gpu is not None

    @property
    def active_without_gpu(self) -> bool:
        return (self.slowdown_in_flight != 1.0 or self.slowdown_in_flight_bwd not in (None, 1.0)
                or self.compute_slots is not None
                or self.concurrency is not None or self.host is not None)

    def in_flight(self, backward: bool = False) -> float:
        """The compute time factor while a transfer of the same rank is in flight, of a
        backward compute with `backward` (its own where it was measured)."""
        return (self.slowdown_in_flight_bwd or self.slowdown_in_flight) if backward else self.slowdown_in_flight

    def sharing_slowdown(self, active: int) -> float:
        """How much slower each of `active` computing ranks runs than one alone, counting
        computes only (the model without a host)."""
        if self.concurrency:
            return interpolate(self.concurrency, active)
        if self.compute_slots is not None and active > self.compute_slots:
            return active / self.compute_slots
        return 1.0


class _Running:
    __slots__ = ("rank", "transfer", "left", "since", "rate", "process", "backward", "memory_share")

    def __init__(self, rank: int, transfer: bool, left: float, since: float, process, backward: bool = False,
                 memory_share: float = 0.0):
        self.rank, self.transfer, self.left, self.since = rank, transfer, left, since
        self.rate, self.process = 0.0, process    # 0.0 forces a fresh rate at the first re-time
        self.backward = backward
        self.memory_share = memory_share


class Sharing:
    """Progress rates of the computes and transfers in flight, re-timed at every change."""

    def __init__(self, env: simpy.Environment, n_ranks: int, model: Contention, jitter: int | None = None,
                 pull: tuple[list[float], list[float], list[float]] | None = None):
        """pull: with a GPU model, per op (CTAs, bytes/s of a transfer, memory-bound share
        of a compute): sim.engine.players.times_simpy."""
        self.env = env
        self.model = model
        self.pull = pull
        self.ctas = [0.0] * n_ranks            # NCCL's CTAs in flight on each GPU
        self.copy_rate = [0.0] * n_ranks       # bytes/s its transfers in flight move there
        self.in_flight = [0] * n_ranks
        self.running: dict[int, _Running] = {}
        self.computes = 0
        self.transfers = 0
        self.rank_factor: list[float] | None = None
        self.block_cv = 0.0
        if jitter is not None and model.host is not None and model.host.spread:
            rank_cv, self.block_cv = model.host.spread_at(n_ranks)
            self.rng = np.random.default_rng(jitter)
            self.rank_factor = [_unit_lognormal(self.rng, rank_cv) for _ in range(n_ranks)]
        host = model.host
        self.load: list[int] | None = None      # computes placed on each core (placement "cores", "held")
        self.core_of: dict[int, int] = {}
        self.placed_at: dict[int, float] = {}    # when each placed compute started
        self.pick: np.random.Generator | None = None
        if (host is not None and host.placement in ("cores", "held") and host.threads_per_rank == 1
                and float(host.cores).is_integer()):
            self.load = [0] * int(host.cores)
            if jitter is not None:
                self.pick = np.random.default_rng([jitter, 1])
        self.held = self.load is not None and host.placement == "held"
        # NCCL's pull alone touches only the computes of a transfer's two GPUs: re-time
        # those, not every op in flight (a ring of hundreds of GPUs has as many running)
        self.local = (model.gpu is not None and host is None and model.concurrency is None
                      and model.compute_slots is None and not model.active_without_gpu)
        self.computes_on: list[dict[int, _Running]] = [{} for _ in range(n_ranks)]

    def _choose(self, options: list[int]) -> int:
        """The first of equal options, or a seeded pick among them in a jittered play."""
        return options[0] if self.pick is None or len(options) == 1 else options[int(self.pick.integers(len(options)))]

    def _place(self, op_id: int) -> None:
        """Put a starting compute on the least-loaded core. In a seeded play the computes
        that start at this same instant are placed again with it, in a drawn order: which
        of them the scheduler leaves alone on a core is not their rank order."""
        now = self.env.now
        same = [op for op, t in self.placed_at.items() if t == now] if self.pick is not None else []
        for op in same:
            self.load[self.core_of.pop(op)] -= 1
        order = same + [op_id]
        if same:
            self.pick.shuffle(order)
        for op in order:
            least = min(self.load)
            core = self._choose([c for c, n in enumerate(self.load) if n == least])
            self.core_of[op] = core
            self.load[core] += 1
        self.placed_at[op_id] = now

    def _unplace(self, op_id: int) -> None:
        load = self.load
        load[self.core_of.pop(op_id)] -= 1
        del self.placed_at[op_id]
        while not self.held and max(load) - min(load) >= 2:
            busiest, idlest = load.index(max(load)), load.index(min(load))
            moved = self._choose(sorted(op for op, c in self.core_of.items() if c == busiest))
            self.core_of[moved] = idlest
            load[busiest] -= 1
            load[idlest] += 1

    def _weights(self) -> dict[int, float] | None:
        """Each placed compute's rate over the law's mean: its core's share (1 / the
        computes on it) over the mean share; None while every compute has a core."""
        if self.load is None or self.computes <= len(self.load):
            return None
        share = {op: 1.0 / self.load[c] for op, c in self.core_of.items()}
        mean = sum(share.values()) / len(share)
        return {op: v / mean for op, v in share.items()}

    def _retime(self, caller: int | None) -> None:
        now = self.env.now
        for run in self.running.values():
            run.left -= (now - run.since) * run.rate
            run.since = now
        model = self.model
        host = model.host
        if host is not None:
            slowdown, transfer_slowdown = host.slowdowns(self.computes, self.transfers)
            transfer_rate = 1.0 / transfer_slowdown
        else:
            # without a host model a transfer keeps its duration
            slowdown, transfer_rate = model.sharing_slowdown(self.computes), 1.0
        shared = 1.0 / slowdown
        in_flight_rate = (1.0 / model.slowdown_in_flight) / slowdown
        slowdown_bwd = (host.slowdowns(self.computes, self.transfers, True)[0] if host is not None and host.law_bwd
                        else slowdown)
        in_flight_bwd = (1.0 / model.in_flight(backward=True)) / slowdown_bwd
        shared_bwd = 1.0 / slowdown_bwd
        weights = self._weights()
        gpu = model.gpu
        for op_id, run in self.running.items():
            if run.transfer:
                rate = transfer_rate
            else:
                if run.backward:
                    rate = in_flight_bwd if self.in_flight[run.rank] else shared_bwd
                else:
                    rate = in_flight_rate if self.in_flight[run.rank] else shared
                if gpu is not None and self.in_flight[run.rank]:
                    rate *= gpu.rate(self.ctas[run.rank], self.copy_rate[run.rank], run.memory_share)
                if weights is not None:
                    rate *= weights[op_id]
                elif self.held and self.load[self.core_of[op_id]] > 1:
                    # held on a core it shares while another idles: its share at most
                    rate = min(rate, 1.0 / self.load[self.core_of[op_id]])
            if rate != run.rate:
                run.rate = rate
                if op_id != caller and run.process.is_alive and run.process.target is not None:
                    run.process.interrupt()

    def _retime_ranks(self, ranks, caller: int | None) -> None:
        """The local re-time (`local`): the computes on `ranks` at NCCL's pull there."""
        now = self.env.now
        gpu = self.model.gpu
        for r in ranks:
            for op_id, run in self.computes_on[r].items():
                run.left -= (now - run.since) * run.rate
                run.since = now
                rate = gpu.rate(self.ctas[r], self.copy_rate[r], run.memory_share) if self.in_flight[r] else 1.0
                if rate != run.rate:
                    run.rate = rate
                    if op_id != caller and run.process.is_alive and run.process.target is not None:
                        run.process.interrupt()

    def _progress(self, op_id: int, run: _Running):
        if self.local:
            if run.transfer:
                run.rate = 1.0
            else:
                self.computes_on[run.rank][op_id] = run
                self._retime_ranks((run.rank,), op_id)
            yield from self._until_done(run)
            if not run.transfer:
                del self.computes_on[run.rank][op_id]
            return
        self.running[op_id] = run
        self._retime(op_id)
        yield from self._until_done(run)
        del self.running[op_id]

    def _until_done(self, run: _Running):
        """Wait out what `run` has left at its rate; a re-time interrupts the wait and the
        wait starts again at the new rate."""
        while True:
            try:
                yield self.env.timeout(max(run.left, 0.0) / run.rate)
                break
            except simpy.Interrupt:
                continue

    def compute(self, op_id: int, rank: int, work_s: float, backward: bool = False):
        """A SimPy process body: `work_s` of full-speed compute at the current rates, a
        backward block's by the host's backward law (with a jitter seed, times its rank's
        factor for the run and a draw of its own)."""
        if self.rank_factor is not None:
            work_s *= self.rank_factor[rank] * _unit_lognormal(self.rng, self.block_cv)
        self.computes += 1
        if self.load is not None:
            self._place(op_id)
        memory_share = self.pull[2][op_id] if self.pull is not None else 0.0
        yield from self._progress(op_id, _Running(rank, False, work_s, self.env.now, self.env.active_process,
                                                  backward, memory_share))
        if self.load is not None:
            self._unplace(op_id)
        self.computes -= 1
        if not self.local:
            self._retime(None)

    def transfer(self, op_id: int, src: int, dst: int, work_s: float):
        """A SimPy process body: a transfer from src to dst taking `work_s` alone; while it
        is in flight, both ends count it (a send and a receive slow compute alike)."""
        self.in_flight[src] += 1
        self.in_flight[dst] += 1
        self.transfers += 1
        ctas = rate = 0.0
        if self.pull is not None:
            ctas, rate = self.pull[0][op_id], self.pull[1][op_id]
            for end in (src, dst):
                self.ctas[end] += ctas
                self.copy_rate[end] += rate
        run = _Running(src, True, work_s, self.env.now, self.env.active_process)
        if self.local:
            self._retime_ranks((src, dst), None)
        yield from self._progress(op_id, run)
        self.in_flight[src] -= 1
        self.in_flight[dst] -= 1
        if self.pull is not None:
            for end in (src, dst):
                self.ctas[end] -= ctas
                self.copy_rate[end] -= rate
        self.transfers -= 1
        if self.local:
            self._retime_ranks((src, dst), None)
        else:
            self._retime(None)
