"""Whether measuring each batch in rounds spread over the run (`ringsim validate
--rounds`) makes a validation's measurements, and so its errors, repeat better on a
host whose speed drifts over minutes. Runs the quick ring validation on one profile
with each variant in turn, A B A B ... (`--pairs` times), the same number of repeats
in both; reports each run's median error, cases in tolerance, per-step error and
wall time, and, between the two runs of each variant, how far the same case's
measured median moved (median |log ratio| over the cases): what one run's median
inherits from the moment it was measured in. Prints a table, writes JSON.

    .venv/bin/python bench/experiments/validate_rounds.py --profile bench/results/calibration/cpu-2core/profile.json \
        --rounds 3 --repeats 6 --out bench/results/experiments/cpu-2core/validate-rounds.json [--force]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common import add_force, keep_results  # noqa: E402
from sim.files import write_json  # noqa: E402


def run(profile: str, rounds: int, repeats: int, out: Path) -> dict:
    cmd = [str(ROOT / ".venv/bin/ringsim"), "validate", "--profile", profile, "--quick", "--repeats",
           str(repeats), "--warmup", "1", "--replays", "31", "--rounds", str(rounds), "--out", str(out), "--force"]
    started = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    report = json.loads(out.read_text())
    s = report["summary"]
    return {"rounds": rounds, "wall_s": wall, "median_abs_error": s["median_abs_error"],
            "max_abs_error": s["max_abs_error"], "in_tolerance": s["cases_within_range_or_tolerance"],
            "cases": s["cases"], "step_median_abs_error": s["step_median_abs_error"],
            "median_measured_cv": s["median_measured_cv"],
            "medians": {r["key"]: r["measured_median_s"] for r in report["cases"]},
            "errors": {r["key"]: r["error"] for r in report["cases"]}}


def moved(a: dict, b: dict) -> float:
    """Median over the cases of |log(median in a / median in b)|."""
    return statistics.median(abs(math.log(a["medians"][k] / b["medians"][k])) for k in a["medians"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--pairs", type=int, default=2, help="runs of each variant, alternating (default 2)")
    p.add_argument("--out", default=None, help="JSON results")
    add_force(p)
    a = p.parse_args()
    keep_results("validate_rounds", a.out, force=a.force)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.pairs):
            for rounds in (1, a.rounds):
                r = run(a.profile, rounds, a.repeats, Path(tmp) / f"r{i}_{rounds}.json")
                runs.append(r)
                print(f"run {len(runs)}: {rounds} round(s): median {r['median_abs_error']:.1%}, "
                      f"{r['in_tolerance']} of {r['cases']}, per-step {r['step_median_abs_error']:.1%}, "
                      f"{r['wall_s']:.0f} s", file=sys.stderr, flush=True)
    print(f"{'run':>3}  {'rounds':>6}  {'median':>7}  {'worst':>7}  {'in tol':>6}  {'per-step':>8}  {'CV':>6}  {'wall':>6}")
    for i, r in enumerate(runs, 1):
        print(f"{i:>3}  {r['rounds']:>6}  {r['median_abs_error']:>7.1%}  {r['max_abs_error']:>7.1%}  "
              f"{r['in_tolerance']:>3}/{r['cases']:<2}  {r['step_median_abs_error']:>8.1%}  "
              f"{r['median_measured_cv']:>6.1%}  {r['wall_s']:>5.0f}s")
    movement = {}
    for rounds in (1, a.rounds):
        mine = [r for r in runs if r["rounds"] == rounds]
        pairs = [moved(x, y) for i, x in enumerate(mine) for y in mine[i + 1:]]
        movement[rounds] = statistics.median(pairs) if pairs else None
        if pairs:
            print(f"{rounds} round(s): a case's measured median moved by a median {movement[rounds]:.1%} "
                  f"between runs ({len(pairs)} pair(s))")
    if a.out:
        write_json(a.out, {"profile": a.profile, "repeats": a.repeats, "runs": runs,
                           "median_moved_between_runs": {str(k): v for k, v in movement.items()}}, overwrite=True)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
