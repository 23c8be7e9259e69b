"""What each run of the dashboard's comparisons costs on one core: Compare schemes (every
scheme and ring layout, `dashboard.compute.scheme_rows`) and Compare layouts (three layouts
with overlap on and off, `compute.compare_table`) of the default scenario at a number of
GPUs, each run as a comparison makes it (`simulate(..., player="recurrence")` then its
metrics) in this process, pinned to one core so that the simulator's threads do not hide
the work. The sum over a comparison's runs is the core-seconds its cold draw needs: on a
machine of C cores at least that sum / C, and never less than its largest run, before the
page's own run and the browser's share (`--cores`: that bound for machines of these
sizes, a comparison's runs spread over C runners as dashboard/runners.py hands them out,
each run as long as it took alone; runs side by side on one machine's cores slow each
other a little, so the bound is a floor, not a forecast).

    .venv/bin/python bench/speed/comparison_runs.py [--gpus 1024] [--repeats 2] [--cores 2 4 8 16]
        [--out bench/results/speed/cpu-2core/comparison-runs-1024.json] [--force]

Prints a table (the median of --repeats timed runs, after one untimed) and writes JSON.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402


def runs(gpus: int) -> list[tuple[str, str, object]]:
    """(comparison, run's name, scenario) of every run the two comparisons make at `gpus`."""
    from dashboard import compute
    from dashboard.state import defaults, scenario_from_values
    from sim.errors import RingsimError
    from sim.planning.compare import layout_variants, scheme_variants, vary

    sc = scenario_from_values(defaults() | {"gpus": gpus})
    base = compute.scheme_base(sc)
    out = []
    for scheme, variant in scheme_variants(base):
        try:
            out.append(("schemes", f"{scheme} ({variant.name})", vary(base, scheme, variant.values)))
        except RingsimError:
            pass                                      # refused: the view lists it, nothing runs
    for lv in layout_variants(sc):
        out.append(("layouts", f"{lv.layout}, overlap {'on' if lv.overlap else 'off'}", lv))
    return out


def measure(sc, repeats: int) -> dict[str, float]:
    from dashboard.side_by_side import operations
    from sim.engine.play import simulate
    from sim.trace.metrics import compute_metrics

    sims, mets = [], []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        trace = simulate(sc, None, player="recurrence")
        t1 = time.perf_counter()
        compute_metrics(trace)
        t2 = time.perf_counter()
        del trace
        if i:                                         # the first call warms imports and caches
            sims.append(t1 - t0)
            mets.append(t2 - t1)
    return {"ops": operations(sc), "simulate_s": statistics.median(sims), "metrics_s": statistics.median(mets),
            "total_s": statistics.median(s + m for s, m in zip(sims, mets))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cores", type=int, nargs="+", default=[2, 4, 8, 16],
                    help="machine sizes to bound each comparison's cold draw for (default 2 4 8 16)")
    ap.add_argument("--out", default=None)
    add_force(ap)
    a = ap.parse_args()
    if a.gpus < 2 or a.repeats < 1 or min(a.cores) < 1:
        sys.exit("comparison_runs.py: --gpus must be at least 2, --repeats and --cores at least 1")
    out = a.out or str(RESULTS / "speed" / cpu_host() / f"comparison-runs-{a.gpus}.json")
    keep_results("comparison_runs.py", out, force=a.force, make_folders=True)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    rows = []
    for comparison, name, sc in runs(a.gpus):
        rows.append({"comparison": comparison, "run": name, **measure(sc, a.repeats)})
        r = rows[-1]
        print(f"{comparison:8s} {name:36s} {r['ops']:>10,} ops  simulate {r['simulate_s']:6.3f} s  "
              f"metrics {r['metrics_s']:5.3f} s", flush=True)
    sums, floors = {}, {}
    for c in ("schemes", "layouts"):
        costs = [r["total_s"] for r in rows if r["comparison"] == c]
        sums[c] = sum(costs)
        floors[c] = {str(k): spread_over(costs, k) for k in a.cores}
        print(f"{c}: {len(costs)} runs, {sums[c]:.1f} core-seconds in all, the largest {max(costs):.2f} s; "
              "at least " + ", ".join(f"{floors[c][str(k)]:.1f} s on {k} cores" for k in a.cores))
    save_json(out, {"gpus": a.gpus, "repeats": a.repeats, "host": platform.node(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "rows": rows, "core_seconds": sums,
                    "floor_s_by_cores": floors}, force=a.force)
    print(f"wrote {out}")


def spread_over(costs: list[float], runners: int) -> float:
    """When the last of runs of these `costs` (seconds each, alone) ends on `runners` cores,
    handed out as dashboard/runners.py does: the first runner takes the smallest left, each
    other the largest left, each as soon as it is free."""
    left = sorted(costs)
    free = [0.0] * max(1, min(runners, len(left)))
    while left:
        r = min(range(len(free)), key=lambda i: (free[i], i))      # the runner free first
        free[r] += left.pop(0) if r == 0 else left.pop()
    return max(free, default=0.0)


if __name__ == "__main__":
    main()
