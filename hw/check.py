"""`ringsim calibrate --check PROFILE`: does a profile still predict this host?

A short probe (well under a minute on 2 cores): a few small ring runs of the real
kernel, each measured a few times, and the profile's prediction of each; the same
cases as the validation matrix (hw.validate) uses, at its smallest size. A probe
passes when its median makespan lies within the tolerance of the prediction. Beside
the verdict, the probe reports the mean compute block and the mean transfer, measured
and predicted, so a miss names its part; and the host the profile was measured on
against this one (sim.host).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from sim.config import Scenario, Workload
from sim.engine import simulate
from sim.host import differences, this_host
from sim.metrics import compute_metrics
from sim.trace import Trace


@dataclass(frozen=True)
class Probe:
    layout: str
    causal: bool
    world_size: int
    seq: int = 3072
    pass_: str = "fwd"

    @property
    def key(self) -> str:
        return f"{self.layout}/{'causal' if self.causal else 'full'}/ws{self.world_size}/seq{self.seq}/{self.pass_}"

    def workload(self, dtype: str) -> Workload:
        return Workload(seq=self.seq, heads=8, kv_heads=8, head_dim=64, dtype=dtype, causal=self.causal,
                        pass_=self.pass_)


PROBES = (Probe("zigzag", True, 2), Probe("contiguous", False, 2), Probe("zigzag", True, 3))


def _means(trace: Trace) -> tuple[float, float]:
    """Mean compute span and mean send span of a trace (0 where there are none)."""
    comp = [s.duration_s for s in trace.spans if s.stream == "compute"]
    send = [s.duration_s for s in trace.spans if s.stream == "send"]
    return (statistics.mean(comp) if comp else 0.0), (statistics.mean(send) if send else 0.0)


def _rel(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured > 0 else 0.0


def dtype_of(profile: Any) -> str:
    """The dtype the profile measured (fp32 on CPU profiles), the first in its groups."""
    return sorted({k[0] for k in profile.groups})[0]


def compare_probe(probe: Probe, traces: list[Trace], simulated: Trace, tolerance: float) -> dict[str, Any]:
    spans = [compute_metrics(t).makespan_s for t in traces]
    measured = statistics.median(spans)
    predicted = compute_metrics(simulated).makespan_s
    comp = statistics.median(_means(t)[0] for t in traces)
    send = statistics.median(_means(t)[1] for t in traces)
    sim_comp, sim_send = _means(simulated)
    error = _rel(predicted, measured)
    return {"key": probe.key, "measured_s": measured, "measured_min_s": min(spans),
            "measured_max_s": max(spans), "predicted_s": predicted, "error": error,
            "within": abs(error) <= tolerance,
            "compute_block_s": {"measured": comp, "predicted": sim_comp, "error": _rel(sim_comp, comp)},
            "transfer_s": {"measured": send, "predicted": sim_send, "error": _rel(sim_send, send)}}


def check(profile: Any, *, tolerance: float = 0.10, repeats: int = 3, warmup: int = 1,
          probes: tuple[Probe, ...] = PROBES, on_probe=None) -> dict[str, Any]:
    """Run the probes, predict them with `profile`, and say whether it still holds."""
    from hw.config import RunConfig, default_threads
    from hw.launch import run_configs

    dtype = dtype_of(profile)
    started = time.perf_counter()
    cfgs = [RunConfig(workload=p.workload(dtype), world_size=p.world_size, layout=p.layout,
                      warmup=warmup, repeats=repeats) for p in probes]
    runs = run_configs(cfgs)
    rows = []
    for probe, (_, traces) in zip(probes, runs):
        simulated = simulate(Scenario(workload=probe.workload(dtype), n_gpus=probe.world_size,
                                      layout=probe.layout), profile)
        row = compare_probe(probe, traces, simulated, tolerance)
        rows.append(row)
        if on_probe:
            on_probe(row)
    here = this_host(threads_per_rank=default_threads(2))
    worst = max(abs(r["error"]) for r in rows)
    return {"profile": profile.source, "tolerance": tolerance, "repeats": repeats,
            "probes": rows, "holds": all(r["within"] for r in rows), "worst_abs_error": worst,
            "median_abs_error": statistics.median(abs(r["error"]) for r in rows),
            "measured_on": profile.measured_on, "this_host": here,
            "host_differences": differences(profile.measured_on, here),
            "load_avg_1m": os.getloadavg()[0], "wall_s": time.perf_counter() - started}
