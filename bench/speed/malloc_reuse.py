"""What keeping freed memory for the next array saves a large simulation
(`sim.engine.host_memory.keep_freed_memory`): the dashboard's comparison runs at 1,024 GPUs
(a forward ring, the all-gather of 8 head groups, a 2 x 512 hybrid; each simulated with its
scheme row, as Compare schemes makes it), each in a fresh process with glibc's malloc as it
comes ("default") and with the setting ("kept"), taken in turn, --rounds times. Per run:
wall, user and system seconds and minor page faults of the second call in its process (the
first warms imports and caches), pinned to one core so that the simulator's threads do not
hide the work.

    .venv/bin/python bench/speed/malloc_reuse.py [--gpus 1024] [--rounds 3]
        [--out bench/results/speed/cpu-2core/malloc-reuse.json] [--force]

Prints a table (median and range over the rounds) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402

RUNS = ("ring (zigzag)", "allgather (8 head groups)", "hybrid (2 x 512 ring-inner)")

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
import sim.engine.host_memory as host_memory
import sim.engine.play as play
if sys.argv[2] == "default":
    play.keep_freed_memory = lambda: False
from dashboard import compute, side_by_side
from dashboard.state import defaults, scenario_from_values
from sim.planning.compare import scheme_variants, vary
base = compute.scheme_base(scenario_from_values(defaults() | {"gpus": int(sys.argv[3])}))
for scheme, variant in scheme_variants(base):
    if f"{scheme} ({variant.name})" == sys.argv[4]:
        sc, what = vary(base, scheme, variant.values), ("scheme-row", scheme, variant.name, None)
        break
side_by_side.simulated(sc, None, what)
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
side_by_side.simulated(sc, None, what)
r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
print(json.dumps({"wall_s": t1 - t0, "user_s": r1.ru_utime - r0.ru_utime, "sys_s": r1.ru_stime - r0.ru_stime,
                  "minflt": r1.ru_minflt - r0.ru_minflt, "kept": host_memory._kept}))
"""


def one(mode: str, gpus: int, run: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, ROOT, mode, str(gpus), run], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    add_force(ap)
    a = ap.parse_args()
    if a.gpus < 2 or a.rounds < 1:
        sys.exit("malloc_reuse.py: --gpus must be at least 2 and --rounds at least 1")
    out = a.out or str(RESULTS / "speed" / cpu_host() / "malloc-reuse.json")
    keep_results("malloc_reuse.py", out, force=a.force, make_folders=True)
    samples: dict[tuple[str, str], list[dict]] = {}
    for _ in range(a.rounds):
        for run in RUNS:
            for mode in ("default", "kept"):
                samples.setdefault((run, mode), []).append(one(mode, a.gpus, run))
    rows = []
    print(f"{'run':32s} {'mode':8s} {'wall s':>18s} {'user s':>18s} {'sys s':>18s} {'page faults':>22s}")
    for (run, mode), got in samples.items():
        row = {"run": run, "mode": mode, "samples": got}
        cells = []
        for key in ("wall_s", "user_s", "sys_s", "minflt"):
            values = [g[key] for g in got]
            row[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
            fmt = "{:.0f}" if key == "minflt" else "{:.2f}"
            cells.append(f"{fmt.format(row[key]['median'])} ({fmt.format(min(values))}-{fmt.format(max(values))})")
        rows.append(row)
        print(f"{run:32s} {mode:8s} " + " ".join(f"{c:>18s}" if i < 3 else f"{c:>22s}" for i, c in enumerate(cells)))
    save_json(out, {"gpus": a.gpus, "rounds": a.rounds, "host": platform.node(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "rows": rows}, force=a.force, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
