"""Predict earlier calibration runs again with the calibration and simulator as they stand.

For each commit given, reads that commit's microbenchmarks and ring report
(bench/experiments/committed_runs.py), fits a profile to the
microbenchmarks with the calibration as it stands (sim.calibration.calibrate.calibrate: nothing of
the validation goes in), predicts every case of the report by the median of N seeded plays
with the simulator as it stands, and scores the predictions as `ringsim validate` does
(hw.validate.summarize: median and worst |makespan error|, cases inside their measured
[min, max] or within 10%, per-step median, over the matrix and for each pass), beside the
scores the report committed. The measurement is what the report kept of it
(sim.calibration.validation.compare_again): each case's spread and each step's median over the repeats.
Where the report read the host's speed around each batch, the cases are predicted again at
that speed as well ("at the host's speed", as the report does), each reading set against
the reference block's time in the refitted profile.

Beside each run after the first given, "apart" is how far it and the run before it
measured the same cases apart (sim.calibration.validation.run_to_run): the median |error| an exact
prediction of each case's own time would show, a floor under any model's error on that
host. A run made by the code as it stands is predicted exactly as it was: the "max diff" column
(the largest |difference| between a case's prediction now and the committed one) reads 0
there, which checks the harness itself.

    .venv/bin/python bench/experiments/predict_again.py [--plays 31] [--json out.json [--force]] COMMIT...
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import add_force, keep_results  # noqa: E402
from bench.experiments.committed_runs import committed_file  # noqa: E402
from bench.experiments.resimulate_law import _scenario  # noqa: E402
from hw.reference import reference_block  # noqa: E402
from hw.validate import summarize  # noqa: E402
from sim.calibration.calibrate import calibrate  # noqa: E402
from sim.calibration.validation import REPLAYS, compare_again, row_gpus, run_to_run, simulate_replays  # noqa: E402
from sim.errors import RingsimError  # noqa: E402
from sim.files import write_json
from sim.hardware.profile import profile_from_dict  # noqa: E402

PASSES = ("fwd", "fwdbwd")


def _date(commit: str) -> str:
    return subprocess.run(["git", "show", "-s", "--format=%ad", "--date=format:%d %b %H:%M", commit],
                          check=True, capture_output=True, text=True).stdout.strip()


def _scores(summary: dict) -> dict:
    """The goal's numbers of a summary: over the matrix and for each ring pass."""
    keys = ("median_abs_error", "max_abs_error", "cases_within_range_or_tolerance", "step_median_abs_error")
    out = {"all": {"cases": summary["cases"], **{k: summary[k] for k in keys}}}
    for p in PASSES:
        g = summary["median_abs_error_by_group"].get(f"ring/{p}")
        if g:
            out[p] = {k: g[k] for k in ("cases", *keys)}
    return out


def predict_again(commit: str, plays: int, previous: dict | None = None) -> tuple[dict, dict]:
    """One commit's run: the report's committed scores, and its cases predicted again by a
    profile fitted now to the run's own microbenchmarks; with the report of the run
    before, how far the two measured their cases apart. Returns the row and the run's
    ring report (cases only)."""
    bench_source, bench = committed_file(commit, "microbenchmarks.json")
    report = committed_file(commit, "validation-ring.json")[1]
    cases = [r for r in report["cases"] if r.get("scheme", "ring") == "ring"]
    if not cases:
        raise RingsimError(f"{commit}: the report has no ring case")
    settings = report["settings"]
    scenarios = [_scenario(r, settings) for r in cases]
    profile = calibrate(bench, bench_source)
    rows = [compare_again(r, simulate_replays(sc, profile, plays)) for r, sc in zip(cases, scenarios)]
    committed = summarize(cases)
    out = {"commit": commit, "date": _date(commit), "device": (report.get("measured_on") or {}).get("device"),
           "median_measured_cv": committed["median_measured_cv"],
           "committed": _scores(committed), "now": _scores(summarize(rows)),
           "max_diff_s": max(abs(a["simulated_s"] - r["simulated_s"]) for a, r in zip(rows, cases)),
           "errors": {a_key(a): a["error"] for a in rows}}
    scale = _reading_scale(commit, profile, settings)
    if scale is not None and all("host_speed" in r for r in cases):
        at = [compare_again(r, simulate_replays(sc, profile.at_compute_speed(r["host_speed"] * scale), plays))
              for r, sc in zip(cases, scenarios)]
        out["host_speed"] = {"min": min(r["host_speed"] for r in cases) * scale,
                             "max": max(r["host_speed"] for r in cases) * scale}
        out["now_at_host_speed"] = _scores(summarize(at))
    ring = {"cases": cases}
    if previous is not None:
        out["run_to_run"] = run_to_run(previous, ring)
    return out, ring


def _reading_scale(commit: str, profile, settings: dict) -> float | None:
    """What turns a host-speed reading of the report (against the committed profile's
    reference block) into one against the refitted profile's; None where either profile
    has no such block or the committed one cannot be read by the code as it stands."""
    try:
        then = profile_from_dict(committed_file(commit, "profile.json")[1])
    except (RingsimError, ValueError, KeyError, TypeError):
        return None
    shape = (settings["dtype"], settings["heads"], settings["head_dim"])
    a, b = reference_block(then, *shape), reference_block(profile, *shape)
    if a is None or b is None or a[0] != b[0]:
        return None
    return a[1] / b[1]


def a_key(row: dict) -> str:
    return (f"{row['layout']}/{'causal' if row['causal'] else 'full'}/gpus{row_gpus(row)}/seq{row['seq']}/"
            f"{row['pass']}")


def meets(s: dict, goal: float = 0.05, steps: float = 0.10) -> bool:
    """The goal on one set of scores: median at most 5%, every case in tolerance, per-step at most 10%."""
    return (s["median_abs_error"] <= goal and s["cases_within_range_or_tolerance"] == s["cases"]
            and s["step_median_abs_error"] is not None and s["step_median_abs_error"] <= steps)


def _cell(s: dict) -> str:
    step = "n/a" if s["step_median_abs_error"] is None else f"{s['step_median_abs_error']:.1%}"
    return (f"{s['median_abs_error']:5.1%} / {s['max_abs_error']:5.1%}, {s['cases_within_range_or_tolerance']:>2} "
            f"of {s['cases']}, {step:>5}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("commits", nargs="+", help="commits holding a calibration run's microbenchmarks and ring report")
    ap.add_argument("--plays", type=int, default=REPLAYS, metavar="N",
                    help=f"seeded plays per case, their median the prediction (default {REPLAYS}, as ringsim "
                         "validate)")
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON (rewritten as each row comes)")
    add_force(ap)
    a = ap.parse_args(argv)
    keep_results("predict_again", a.json, force=a.force)
    if a.plays < 1:
        print("predict_again: --plays must be at least 1", file=sys.stderr)
        return 2
    print(f"{'commit':8}  {'date':12}  {'committed: median / worst, in tolerance, per-step':>36}  "
          f"{'now':>36}  {'now forward':>36}  {'now forward+backward':>36}  goal now  max diff  "
          f"{'now at the host speed':>36}  host read     apart")
    rows = []
    previous = None
    for c in a.commits:
        try:
            r, previous = predict_again(c, a.plays, previous)
        except (RingsimError, ValueError, KeyError) as e:
            print(f"predict_again: {e}", file=sys.stderr)
            return 2
        r["goal_now"] = {"matrix": meets(r["now"]["all"]),
                         "each_pass": all(meets(r["now"][p]) for p in PASSES if p in r["now"])}
        goal = "per pass" if r["goal_now"]["each_pass"] else "matrix" if r["goal_now"]["matrix"] else "-"
        print(f"{c:8}  {r['date']:12}  {_cell(r['committed']['all']):>36}  {_cell(r['now']['all']):>36}  "
              + "  ".join(f"{_cell(r['now'][p]) if p in r['now'] else '-':>36}" for p in PASSES)
              + f"  {goal:8}  {r['max_diff_s'] * 1e3:5.1f} ms  "
              + (f"{_cell(r['now_at_host_speed']['all']):>36}  {r['host_speed']['min']:.2f}x-{r['host_speed']['max']:.2f}x"
                 if "now_at_host_speed" in r else f"{'-':>36}  {'-':11}")
              + (f"  {r['run_to_run']['median']:5.1%}" if "run_to_run" in r else "      -"), flush=True)
        rows.append(r)
    if a.json:
        write_json(a.json, {"plays": a.plays, "runs": rows}, overwrite=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
