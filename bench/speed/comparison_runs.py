"""What each run of the dashboard's comparisons costs on one core: Compare schemes (every
scheme and ring layout, `dashboard.compute.scheme_rows`) and Compare layouts (three layouts
with overlap on and off, `compute.compare_table`) of the default scenario at a number of
GPUs, each run as a comparison makes it (`simulate(..., player="recurrence")` then its
metrics) in this process, pinned to one core so that the simulator's threads do not hide
the work. The sum over a comparison's runs is the core-seconds its cold draw needs: on a
machine of C cores at least that sum / C, before the browser's share.

    .venv/bin/python bench/speed/comparison_runs.py [--gpus 1024] [--repeats 2]
        [--out bench/results/speed/cpu-2core/comparison-runs-1024.json]

Prints a table (the median of --repeats timed runs, after one untimed) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, cpu_host  # noqa: E402


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
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.gpus < 2 or a.repeats < 1:
        sys.exit("comparison_runs.py: --gpus must be at least 2 and --repeats at least 1")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    rows = []
    for comparison, name, sc in runs(a.gpus):
        rows.append({"comparison": comparison, "run": name, **measure(sc, a.repeats)})
        r = rows[-1]
        print(f"{comparison:8s} {name:36s} {r['ops']:>10,} ops  simulate {r['simulate_s']:6.3f} s  "
              f"metrics {r['metrics_s']:5.3f} s", flush=True)
    sums = {c: sum(r["total_s"] for r in rows if r["comparison"] == c) for c in ("schemes", "layouts")}
    for c, s in sums.items():
        n = sum(r["comparison"] == c for r in rows)
        print(f"{c}: {n} runs, {s:.1f} core-seconds in all; on {os.cpu_count()} cores at least {s / os.cpu_count():.1f} s")
    out = a.out or str(RESULTS / "speed" / cpu_host() / f"comparison-runs-{a.gpus}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"gpus": a.gpus, "repeats": a.repeats, "host": platform.node(), "cores": os.cpu_count(),
                   "python": platform.python_version(), "rows": rows, "core_seconds": sums}, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
