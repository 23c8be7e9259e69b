"""Validation of several profiles against the same measured runs: the kernel runs each
case of the quick matrix once (its repeats), and every profile simulates it (with
`--replays N`, by the median of N plays seeded with its host's spread, as `ringsim
validate --replays` does), so that a model change is compared on identical measurements
(a shared host's load drifts between two separate `ringsim validate` runs). Prints a
table, writes JSON with the host's load average at every case.

    .venv/bin/python bench/calibration/validate_host.py --profiles before.json after.json \
        --gpus 2 3 --seqs 3072 --out bench/results/calibration/cpu-2core/host-model-1/validation.json [--force]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import add_force, keep_results, save_json  # noqa: E402
from hw.config import RunConfig  # noqa: E402
from hw.launch import run_config  # noqa: E402
from hw.validate import matrix, summarize  # noqa: E402
from sim.calibration.validation import compare_case, simulate_replays  # noqa: E402
from sim.hardware.profile import load_profile  # noqa: E402
from sim.scenario.config import Scenario, Workload  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profiles", nargs="+", required=True)
    p.add_argument("--gpus", nargs="+", type=int, default=[2, 3])
    p.add_argument("--seqs", nargs="+", type=int, default=[3072])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--replays", type=int, default=1, help="seeded plays per case (ringsim validate --replays)")
    add_force(p)
    a = p.parse_args()
    keep_results("validate_host", a.out, force=a.force)
    profiles = {path: load_profile(path) for path in a.profiles}
    rows: dict[str, list] = {path: [] for path in a.profiles}
    loads = []
    for case in matrix(quick=True, seqs=a.seqs, gpu_counts=a.gpus):
        w = Workload(seq=case.seq, heads=8, kv_heads=8, head_dim=64, dtype="fp32", causal=case.causal)
        _, traces = run_config(RunConfig(workload=w, n_gpus=case.n_gpus, layout=case.layout,
                                         warmup=a.warmup, repeats=a.repeats))
        loads.append(os.getloadavg()[0])
        line = [f"{case.key:32} measured {statistics.median(t.makespan_s for t in traces) * 1e3:7.1f} ms"]
        for path, prof in profiles.items():
            sim = Scenario(workload=w, n_gpus=case.n_gpus, layout=case.layout)
            row = compare_case(case, traces, simulate_replays(sim, prof, a.replays))
            row["key"], row["load_avg_1m"] = case.key, loads[-1]
            rows[path].append(row)
            line.append(f"{os.path.basename(path)} {row['error']:+6.1%}")
        print("  ".join(line) + f"  load {loads[-1]:.1f}", file=sys.stderr, flush=True)
    out = {"created": time.strftime("%Y-%m-%d %H:%M:%S"), "load_avg_1m": loads,
           "profiles": {path: {"summary": summarize(r), "cases": r} for path, r in rows.items()}}
    save_json(a.out, out, force=a.force, indent=1)
    print(f"{'profile':40} {'cases':>5} {'median |makespan err|':>22} {'per-step median':>16}")
    for path, r in rows.items():
        s = summarize(r)
        print(f"{path:40} {s['cases']:5} {s['median_abs_error']:22.1%} {s['step_median_abs_error']:16.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
