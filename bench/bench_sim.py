"""Simulator speed by ring size: the whole `simulate` call with the recurrence player (what
the dashboard runs on every new configuration), its parts, and the SimPy player.

Causal zigzag forward, Llama-3-8B attention shape (32/8 heads x 128, bf16), 4096
tokens per rank, 8 x H100 presets. Times, best and median of several runs: the whole
`simulate(..., player="recurrence")`; its parts (building the ring schedule, of which
the layout's work and mask tables, the durations, the wave recurrence, the spans); and
the SimPy player on the same schedule, which must give the identical trace. A result
is kept alive while the next run is timed, so that freeing it is not counted. Prints a
table and writes JSON. Also the garbage collector's first pass over what one call made
(`gc_s`, mostly the spans), which the program pays after `simulate` returns.

    .venv/bin/python bench/bench_sim.py [--sizes 8 64 256 1024] [--no-simpy] [--out bench/results/sim.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import statistics
import time

from sim import engine
from sim.config import Scenario, Workload
from sim.engine import play, simulate
from sim.layouts import block_masks, block_work
from sim.metrics import compute_metrics
from sim.ring import build_ring_schedule


def timed(fn, runs: int) -> tuple[float, float, object]:
    """(best, median) seconds of `runs` calls of fn, and its last result. The garbage
    collector runs before each call, outside the timing: the objects a call makes are
    looked at by the collector later, whenever the program next allocates, and would
    otherwise be billed to the next call."""
    times, keep = [], None
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        keep = result       # the previous result is freed here, outside the timed call
    return min(times), statistics.median(times), keep


def measure(n: int, tokens_per_rank: int, simpy: bool) -> dict:
    sc = Scenario(workload=Workload(seq=tokens_per_rank * n), n_gpus=n, layout="zigzag")
    w, hw = sc.workload, sc.hardware
    runs = 30 if n <= 64 else 5 if n <= 256 else 2
    row = {"n_gpus": n, "seq": w.seq, "runs": runs}
    best, median, trace = timed(lambda: simulate(sc, player="recurrence"), runs)
    row.update(simulate_s=best, simulate_median_s=median, ops=trace.meta["ops"], spans=len(trace.spans))
    gc.collect()
    gc.disable()
    trace = simulate(sc, player="recurrence")
    t0 = time.perf_counter()
    gc.collect(0)           # the collector's first pass over what one call made
    row["gc_s"] = time.perf_counter() - t0
    gc.enable()
    # the parts, as simulate runs them (private functions of sim.engine: for this table only)
    with engine._gc_paused():
        tables = lambda: (block_work(sc.layout, w.seq, n, w.causal, sc.granularity, sc.tile),  # noqa: E731
                          block_masks(sc.layout, w.seq, n, w.causal))
        row["layout_tables_s"] = timed(tables, runs)[0]
        row["build_s"], _, schedule = timed(lambda: build_ring_schedule(sc), runs)
        row["durations_s"], _, dur = timed(lambda: engine.durations_s(schedule, hw, w), runs)
        row["recurrence_s"], _, (start, end) = timed(lambda: engine._times_waves(schedule, dur), runs)
        row["spans_s"], _, spans = timed(lambda: engine._spans(schedule, start, end), runs)
    if simpy:
        t0 = time.perf_counter()
        reference = play(schedule, hw, w)
        row["simpy_s"] = time.perf_counter() - t0
        row["sim_events"] = reference.meta["sim_events"]
        row["events_per_s"] = row["sim_events"] / row["simpy_s"]
        row["identical"] = reference.spans == trace.spans
    m = compute_metrics(trace)
    row.update(makespan_s=m.makespan_s, efficiency=m.efficiency,
               max_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 256, 1024])
    p.add_argument("--tokens-per-rank", type=int, default=4096)
    p.add_argument("--no-simpy", action="store_true", help="skip the SimPy player (slow at 1024 GPUs)")
    p.add_argument("--out", default="bench/results/sim.json")
    a = p.parse_args()
    rows = []
    print(f"{'GPUs':>5} {'ops':>8} {'spans':>8} | {'simulate ms':>11} {'median':>8} {'gc':>6} | "
          f"{'build':>8} {'(tables)':>8} {'durations':>9} {'recur':>8} {'spans':>8} | "
          f"{'SimPy ms':>9} {'events/s':>9} {'same':>5} {'RSS MB':>7}")
    for n in a.sizes:
        r = measure(n, a.tokens_per_rank, not a.no_simpy)
        rows.append(r)
        ms = {k: v * 1e3 for k, v in r.items() if k.endswith("_s")}
        simpy = (f"{ms['simpy_s']:>9.0f} {r['events_per_s']:>9.0f} {str(r['identical']):>5}" if "simpy_s" in r
                 else f"{'-':>9} {'-':>9} {'-':>5}")
        print(f"{n:>5} {r['ops']:>8} {r['spans']:>8} | {ms['simulate_s']:>11.2f} "
              f"{ms['simulate_median_s']:>8.2f} {ms['gc_s']:>6.2f} | {ms['build_s']:>8.2f} "
              f"{ms['layout_tables_s']:>8.2f} {ms['durations_s']:>9.2f} {ms['recurrence_s']:>8.2f} "
              f"{ms['spans_s']:>8.2f} | {simpy} {r['max_rss_mb']:>7.0f}", flush=True)
    with open(a.out, "w") as f:
        json.dump({"machine": platform.processor() or platform.machine(),
                   "python": platform.python_version(), "rows": rows}, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
