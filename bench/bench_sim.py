"""Simulator speed: wall time and SimPy events per second by ring size.

Causal zigzag forward, Llama-3-8B attention shape (32/8 heads x 128, bf16), 4096
tokens per rank, 8 x H100 presets. Times the schedule build, the SimPy player and the
max-plus recurrence player (which must give the identical trace). Prints a table and
writes JSON.

    .venv/bin/python bench/bench_sim.py [--sizes 8 64 256 1024] [--out bench/results/sim.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time

from sim.config import Scenario, Workload
from sim.engine import play, simulate
from sim.metrics import compute_metrics
from sim.ring import build_ring_schedule


def measure(n: int, tokens_per_rank: int) -> dict:
    sc = Scenario(workload=Workload(seq=tokens_per_rank * n), n_gpus=n, layout="zigzag")
    t0 = time.perf_counter()
    schedule = build_ring_schedule(sc)
    t1 = time.perf_counter()
    trace = play(schedule, sc.hardware, sc.workload)
    t2 = time.perf_counter()
    fast = play(schedule, sc.hardware, sc.workload, player="recurrence")
    t3 = time.perf_counter()
    identical = fast.spans == trace.spans
    full = time.perf_counter()
    simulate(sc, player="recurrence")
    full = time.perf_counter() - full
    m = compute_metrics(trace)
    events = trace.meta["sim_events"]
    return {"n_gpus": n, "seq": sc.workload.seq, "ops": len(schedule.ops), "spans": len(trace.spans),
            "build_s": t1 - t0, "simpy_s": t2 - t1, "sim_events": events,
            "events_per_s": events / (t2 - t1), "recurrence_s": t3 - t2,
            "simulate_recurrence_total_s": full, "identical": identical,
            "makespan_s": m.makespan_s, "efficiency": m.efficiency,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 256, 1024])
    p.add_argument("--tokens-per-rank", type=int, default=4096)
    p.add_argument("--out", default="bench/results/sim.json")
    a = p.parse_args()
    rows = []
    print(f"{'GPUs':>5} {'ops':>9} {'events':>9} {'build s':>8} {'SimPy s':>8} {'events/s':>10} "
          f"{'recur s':>8} {'same':>5} {'RSS MB':>7}")
    for n in a.sizes:
        r = measure(n, a.tokens_per_rank)
        rows.append(r)
        print(f"{n:>5} {r['ops']:>9} {r['sim_events']:>9} {r['build_s']:>8.3f} {r['simpy_s']:>8.3f} "
              f"{r['events_per_s']:>10.0f} {r['recurrence_s']:>8.3f} {str(r['identical']):>5} "
              f"{r['max_rss_mb']:>7.0f}", flush=True)
    with open(a.out, "w") as f:
        json.dump({"machine": platform.processor() or platform.machine(),
                   "python": platform.python_version(), "rows": rows}, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
