"""The makespan error of committed validation runs, split into compute and the rest.

For each commit given, reads that commit's ring validation report
(git show; or a report file given by path) and splits every case's makespan error in
two parts that add up to it (sim.calibration.validation.error_parts): the mean rank's compute, and
the time outside compute (waits on transfers and on slower ranks, the start skew, the
time between blocks), each a share of the measured makespan. Prints, per run, the
median signed makespan error, the median of each part, how many cases have each part
negative, and the outside part's median per GPU count and pass; `--json` writes the
same. It asks which part of the model a run's lean comes from: a part whose median has
the same sign in every run is the model's, one that changes sign from run to run is the
host's drift. Given two runs or more, it also splits every case's signed error over the
runs (sim.calibration.validation.error_spread) into the case's own part (its mean over the runs: the
model's), its batch's shift in each run (the host's drift around that batch) and the
rest, as plain errors and at the host's speed, with the cases whose own part is largest.
Last, where the per-step error lies over all the runs (sim.calibration.validation.step_spread): the
median signed and |error| of each step index per pass and GPU count.

    .venv/bin/python bench/experiments/error_parts.py 556f71a c904fae ... [--json out.json]
    .venv/bin/python bench/experiments/error_parts.py bench/results/calibration/cpu-2core/validation-ring.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.experiments.committed_runs import committed_file  # noqa: E402
from sim.calibration.validation import error_parts, error_spread, row_gpus, step_spread  # noqa: E402
from sim.errors import RingsimError  # noqa: E402
from sim.files import read_json, write_json


def load(source: str) -> dict:
    """A validation report: a file's, or the one committed at `source`."""
    if Path(source).is_file():
        return read_json(source, what="validation report")
    return committed_file(source, "validation-ring.json")[1]


def split(report: dict) -> dict:
    """One run's medians over its cases: signed error, each part, the cases with a part
    below zero, and the outside part by GPU count and pass."""
    rows = [r for r in report.get("cases") or [] if error_parts(r) is not None]
    if not rows:
        raise RingsimError("the report has no case with a measured makespan")
    parts = [error_parts(r) for r in rows]
    groups: dict[str, list[float]] = {}
    for r, p in zip(rows, parts):
        groups.setdefault(f"gpus{row_gpus(r)} {r['pass']}", []).append(p["outside_compute"])
    return {"cases": len(rows),
            "median_error": statistics.median(r["error"] for r in rows),
            "median_compute": statistics.median(p["compute"] for p in parts),
            "median_outside_compute": statistics.median(p["outside_compute"] for p in parts),
            "compute_below_zero": sum(p["compute"] < 0 for p in parts),
            "outside_below_zero": sum(p["outside_compute"] < 0 for p in parts),
            "outside_by_group": {g: statistics.median(v) for g, v in sorted(groups.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", help="commits holding a ring validation report, or report files")
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON (an existing file is kept "
                                                    "unless --force)")
    ap.add_argument("--force", action="store_true", help="overwrite the --json file")
    a = ap.parse_args(argv)
    try:
        reports = [load(src) for src in a.sources]
        runs = [(src, split(rep)) for src, rep in zip(a.sources, reports)]
        spreads = {}
        if len(reports) > 1:
            for field in ("error", "error_at_host_speed"):
                if all(any(r.get(field) is not None for r in rep.get("cases") or []) for rep in reports):
                    spreads[field] = error_spread(reports, field)
        steps = step_spread(reports)
    except (RingsimError, json.JSONDecodeError, KeyError, TypeError) as e:
        print(f"error_parts: {e}", file=sys.stderr)
        return 2
    groups = sorted({g for _, r in runs for g in r["outside_by_group"]},
                    key=lambda g: (g.split()[1], int(g.split()[0].removeprefix("gpus"))))
    head = (f"{'run':>10}  {'cases':>5}  {'error':>7}  {'compute':>7}  {'outside':>7}  {'c<0':>4}  {'o<0':>4}  "
            + "  ".join(f"{g:>11}" for g in groups))
    print("median over cases, shares of the measured makespan; c<0, o<0: cases whose compute or outside "
          "part is negative; then the outside part by GPU count and pass")
    print(head)
    for src, r in runs:
        print(f"{src[:10]:>10}  {r['cases']:>5}  {r['median_error']:>+7.1%}  {r['median_compute']:>+7.1%}  "
              f"{r['median_outside_compute']:>+7.1%}  {r['compute_below_zero']:>4}  {r['outside_below_zero']:>4}  "
              + "  ".join(f"{r['outside_by_group'][g]:>+11.1%}" if g in r["outside_by_group"] else f"{'-':>11}"
                          for g in groups))
    outside = [r["median_outside_compute"] for _, r in runs]
    compute = [r["median_compute"] for _, r in runs]
    print(f"over the {len(runs)} runs: outside part below zero in {sum(x < 0 for x in outside)}, median "
          f"{statistics.median(outside):+.1%} ({min(outside):+.1%} to {max(outside):+.1%}); compute part below "
          f"zero in {sum(x < 0 for x in compute)}, median {statistics.median(compute):+.1%} "
          f"({min(compute):+.1%} to {max(compute):+.1%})")
    for field, sp in spreads.items():
        worst = sorted(sp["case_means"].items(), key=lambda kv: -abs(kv[1]))[:3]
        print(f"{'at the host' + chr(39) + 's speed' if field != 'error' else 'plain error'}, {sp['cases']} cases "
              f"in all {sp['runs']} runs: mean {sp['mean']:+.1%}, spread {sp['sd']:.1%}, in quadrature the case's "
              f"own {sp['case_sd']:.1%}, its batch's shift {sp['group_sd']:.1%} and the rest {sp['rest_sd']:.1%}; "
              "own part largest: " + ", ".join(f"{k} {v:+.1%}" for k, v in worst))
    print("per-step error by step index, over every run: median signed / median |error| (steps counted)")
    for g in steps["groups"]:
        cells = [f"{r['step']}: {r['median_error']:+.1%} / {r['median_abs_error']:.1%} ({r['n']})"
                 for r in steps["steps"] if (r["group"], r["n_gpus"]) == (g["group"], g["n_gpus"])]
        print(f"  {g['group']} gpus{g['n_gpus']}: all steps {g['median_abs_error']:.1%}; " + ", ".join(cells))
    if a.json:
        try:
            write_json(a.json, {"runs": [{"source": s, **r} for s, r in runs], "spread": spreads, "steps": steps},
                       overwrite=a.force)
        except (RingsimError, OSError) as e:
            print(f"error_parts: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
