"""The host's cost of launching GPU work, read from a profiled run (docs/calibration.md,
"Launch costs from profiler traces"): what the CPU spends to put a kernel on the GPU and what
the GPU waits between kernels, the numbers sim.hardware.presets assumes as the host floor
(OP_HOST_US, CALL_HOST_US, KERNEL_GAP_US).

Every GPU kernel is tied to the runtime call that launched it (cudaLaunchKernel,
cuLaunchKernel, hipLaunchKernel, ...: the same correlation) and to the innermost CPU op
around that call on the same thread. Per kernel:

- **launch to start**: the runtime call's start to the kernel's start. On a stream with work
  still queued this is mostly queueing; on an idle stream (the kernel before it on the stream
  had ended when the call began) it is the launch's own latency.
- **launch call**: the runtime call's duration (the CPU's time inside the driver).
- **op to start, idle stream**: the start of the CPU op that launched the kernel to the
  kernel's start, for an op's first kernel on an idle stream: what an eager op costs a GPU
  that waits for it (the analogue of OP_HOST_US, and for attention ops of CALL_HOST_US).
- **gap, queued**: a kernel's start minus the end of the kernel before it on its stream, when
  it was launched before that one ended (the GPU had it in its queue): the GPU's own
  kernel-to-kernel time (the analogue of KERNEL_GAP_US). A gap in which another stream's
  kernel ended is left out (a wait on an event, not a launch cost).
- **gap, idle**: the same gap when the kernel was launched after the one before it ended: the
  host's time showing on the GPU.
- **issue interval**: the time between consecutive kernel launches on one CPU thread: the
  rate at which the host can feed the GPU. A stream of n eager kernels takes at least n of
  these (host_floor_s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.errors import RingsimError

CPU_OP_KINDS = ("cpu_op", "cpu_gemm", "cpu_attention_fwd", "cpu_attention_bwd", "cpu_comm")
KERNEL_CATS = ("kernel",)


@dataclass(frozen=True)
class Spread:
    """A distribution in microseconds: median, 10th and 90th percentiles, and its count."""

    median_us: float | None
    p10_us: float | None
    p90_us: float | None
    count: int

    @classmethod
    def of(cls, seconds: np.ndarray) -> "Spread":
        x = np.asarray(seconds, dtype=float)
        x = x[np.isfinite(x)] * 1e6
        if not len(x):
            return cls(None, None, None, 0)
        p10, med, p90 = np.percentile(x, [10, 50, 90])
        return cls(float(med), float(p10), float(p90), int(len(x)))

    def to_dict(self) -> dict[str, Any]:
        return {"median_us": self.median_us, "p10_us": self.p10_us, "p90_us": self.p90_us, "count": self.count}


@dataclass(frozen=True)
class LaunchCosts:
    """One run's (or rank's) launch costs (module docstring)."""

    source: str
    device: str
    kernels: int
    """GPU kernels tied to their launch."""
    launch_to_start: Spread
    launch_to_start_idle: Spread
    launch_call: Spread
    op_to_start_idle: Spread
    attention_op_to_start_idle: Spread
    """op to start, idle stream, for attention kernels (the analogue of CALL_HOST_US)."""
    gap_queued: Spread
    gap_idle: Spread
    issue_interval: Spread

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "device": self.device, "kernels": self.kernels}
        for name in ("launch_to_start", "launch_to_start_idle", "launch_call", "op_to_start_idle",
                     "attention_op_to_start_idle", "gap_queued", "gap_idle", "issue_interval"):
            out[name] = getattr(self, name).to_dict()
        return out


def host_floor_s(costs: LaunchCosts, launches: int) -> float:
    """The least time a host that launches `launches` kernels one after another needs to
    issue them (the median issue interval each, plus one launch's latency to the first
    kernel's start): GPU work made of shorter kernels than this waits on the host."""
    if costs.issue_interval.median_us is None:
        raise RingsimError(f"{costs.source}: fewer than two kernel launches on one CPU thread: no issue interval")
    first = costs.launch_to_start_idle.median_us or 0.0
    return (launches * costs.issue_interval.median_us + first) * 1e-6


def _enclosing_op(op_start: np.ndarray, op_end: np.ndarray, t: float) -> int | None:
    """The innermost op (ops sorted by start) that holds time t."""
    i = int(np.searchsorted(op_start, t, side="right")) - 1
    while i >= 0 and t - op_start[i] <= 1.0:
        if op_end[i] >= t:
            return i
        i -= 1
    return None


def launch_costs(run: Any, source: str = "", rank: int | None = None) -> LaunchCosts:
    """The launch costs of `rank` (every rank pooled when None) of a run read by
    sim.profiler.reader.read_run."""
    ev = run.events
    ranks = list(run.ranks) if rank is None else [rank]
    if rank is not None and rank not in run.ranks:
        raise RingsimError(f"rank {rank} is not in the run (ranks {', '.join(map(str, run.ranks))})")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("l2s", "l2s_idle", "call", "op_idle", "attn_idle",
                                                          "gap_q", "gap_i", "issue")}
    kernels = 0
    rk, on_gpu = np.asarray(ev.rank), np.asarray(ev.on_gpu).astype(bool)
    cat, kind = np.asarray(ev.cat).astype(str), np.asarray(ev.kind).astype(str)
    start, dur, corr = np.asarray(ev.start_s, dtype=float), np.asarray(ev.dur_s, dtype=float), np.asarray(ev.correlation)
    stream = np.asarray(ev.stream)
    for r in ranks:
        mine = rk == r
        k = np.flatnonzero(mine & on_gpu & np.isin(cat, KERNEL_CATS))
        launches = np.flatnonzero(mine & ~on_gpu & (kind == "runtime") & (corr >= 0))
        if not len(k) or not len(launches):
            continue
        by_corr = {int(c): i for i, c in zip(launches, corr[launches])}
        pairs = [(i, by_corr.get(int(corr[i]))) for i in k if corr[i] >= 0]
        pairs = [(g, c) for g, c in pairs if c is not None]
        if not pairs:
            continue
        g_rows = np.array([g for g, _ in pairs])
        c_rows = np.array([c for _, c in pairs])
        kernels += len(g_rows)
        k_start, k_end = start[g_rows], start[g_rows] + dur[g_rows]
        l_start, l_dur = start[c_rows], dur[c_rows]
        cols["l2s"].append(k_start - l_start)
        cols["call"].append(l_dur)
        # each kernel's predecessor on its stream, and whether the stream was idle at its launch
        idle = np.zeros(len(g_rows), dtype=bool)
        gap = np.full(len(g_rows), np.nan)
        other_end = np.full(len(g_rows), False)
        all_end = np.sort(k_end)
        s_of = stream[g_rows]
        for s in np.unique(s_of):
            idx = np.flatnonzero(s_of == s)
            idx = idx[np.argsort(k_start[idx], kind="stable")]
            own_end = np.sort(k_end[idx])
            prev, cur = idx[:-1], idx[1:]
            gap[cur] = k_start[cur] - k_end[prev]
            idle[cur] = l_start[cur] >= k_end[prev]
            idle[idx[0]] = True
            # another stream's kernel ended inside the gap: a wait on an event
            lo, hi = k_end[prev], k_start[cur]
            n_all = np.searchsorted(all_end, hi, side="right") - np.searchsorted(all_end, lo, side="right")
            n_own = np.searchsorted(own_end, hi, side="right") - np.searchsorted(own_end, lo, side="right")
            other_end[cur] = (n_all - n_own) > 0
        has_prev = np.isfinite(gap)
        cols["l2s_idle"].append((k_start - l_start)[idle])
        cols["gap_q"].append(gap[has_prev & ~idle & ~other_end])
        cols["gap_i"].append(gap[has_prev & idle])
        # the CPU op around each launch, on the launch's thread; an op's first kernel only
        ops = np.flatnonzero(mine & ~on_gpu & np.isin(kind, CPU_OP_KINDS))
        ops = ops[np.argsort(start[ops], kind="stable")]
        first_of_op: dict[int, int] = {}
        for j, c in enumerate(c_rows):
            same = ops[stream[ops] == stream[c]]
            if not len(same):
                continue
            o = _enclosing_op(start[same], start[same] + dur[same], float(start[c]))
            if o is not None and int(same[o]) not in first_of_op:
                first_of_op[int(same[o])] = j
        op_idle, attn_idle = [], []
        for o, j in first_of_op.items():
            if idle[j]:
                op_idle.append(k_start[j] - start[o])
                if kind[g_rows[j]].startswith("attention"):
                    attn_idle.append(k_start[j] - start[o])
        cols["op_idle"].append(np.array(op_idle))
        cols["attn_idle"].append(np.array(attn_idle))
        # the interval between consecutive kernel launches on one CPU thread
        for t in np.unique(stream[c_rows]):
            ts = np.sort(l_start[stream[c_rows] == t])
            cols["issue"].append(np.diff(ts))
    if kernels == 0:
        raise RingsimError(f"{source or 'the run'}: no GPU kernel tied to a runtime launch (a CPU-only trace, or one "
                           "recorded without CUDA activities)")

    def cat_(name: str) -> np.ndarray:
        return np.concatenate(cols[name]) if cols[name] else np.array([])

    devices = {str(d.get("name", "")) if isinstance(d, dict) else str(d) for d in run.devices.values()} - {""}
    return LaunchCosts(source=source, device=", ".join(sorted(devices)) or "unknown", kernels=kernels,
                       launch_to_start=Spread.of(cat_("l2s")), launch_to_start_idle=Spread.of(cat_("l2s_idle")),
                       launch_call=Spread.of(cat_("call")), op_to_start_idle=Spread.of(cat_("op_idle")),
                       attention_op_to_start_idle=Spread.of(cat_("attn_idle")),
                       gap_queued=Spread.of(cat_("gap_q")), gap_idle=Spread.of(cat_("gap_i")),
                       issue_interval=Spread.of(cat_("issue")))
