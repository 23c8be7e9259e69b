"""Dashboard server time per callback, by ring size, the layout comparison, and where a
first draw spends its time; optionally against another version of the code.

Drives the real callback endpoint (`/_dash-update-component`) through Flask's test
client, so each number is what the server spends on one request: Dash's dispatch, the
simulation when it is not cached, the figure and its JSON; no network, no browser.
The default scenario (Llama-3-8B attention, 128k tokens, causal, zigzag, overlap, H100 /
NVLink) on 8, 64, 256 and 1024 GPUs.

"cold" is the first request after the caches are emptied (it simulates); "rebuilt" the
median of repeats with the simulation cached but the figure drawn afresh (another rank
window, a view opened for the first time); "warm" the median with the figure cached too
(a revisited view, another session on the same scenario: mostly serialization). Wall
time and the process's CPU time are both kept: on a shared machine the wall time swings
with the load, the CPU time much less. "parts" times the pieces of the two first draws
the goals are about, called directly: simulate(), the metrics, the figure from a fresh
trace, and the figure's JSON. Goals (issue 8): at 256 GPUs the timeline's first draw
<= 100 ms and the three-layout comparison's <= 300 ms; (issue 9) at 64 GPUs the
schemes comparison's (every scheme and ring layout, sim.planning.compare.compare_scheme_rows)
<= 1 s. The schemes comparison is measured up to 256 GPUs.

`--against REF` runs the same measurements on a checkout of the git ref REF (a
temporary `git worktree`, removed afterwards) in the same run: each size is measured in
a fresh process for REF and then for this tree, one after the other, so that both see
the same machine load. The REF process imports REF's `sim` and `dashboard` (its tree is
put first on the path) and encodes JSON as REF's own dependencies would (plotly's json
engine unless REF requires orjson). Sizes REF's dashboard refuses are marked skipped.

    .venv/bin/python bench/speed/dashboard_callbacks.py [--sizes 8 64 256 1024] [--repeats 5]
        [--against REF] [--rounds 3] [--out bench/results/speed/cpu-2core/dashboard-callbacks.json] [--force]

`--rounds N` measures the goals' sizes N times (REF and this tree in turn, each in a
fresh process) and reports the median first draw: one cold request is one sample, and
on a shared machine one sample swings by tens of percent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

sys.path.insert(0, ROOT)
from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402

# this tree leaves the path again: a child measuring REF must find REF's packages first on
# its path (bench.common imports nothing of sim or dashboard until it is called)
sys.path.remove(ROOT)

VIEWS = [
    # (label, output, tab)
    ("summary cards", "m-makespan.children", None),
    ("layout strip", "layout-strip.figure", None),
    ("timeline", "timeline.figure", "timeline"),
    ("block map", "block-map.figure", "blocks"),
    ("memory", "memory.figure", "memory"),
    ("exact merge", "merge.figure", "merge"),
    ("download trace", "dl-trace.data", None),
    ("download metrics CSV", "dl-csv.data", None),
]
GOAL_N = 256
GOALS_S = {"timeline": 0.100, "compare layouts": 0.300}
SCHEMES_GOAL_N = 64
SCHEMES_GOALS_S = {"compare schemes": 1.0}
SCHEMES_MAX_N = 256


# --- measuring one tree, in its own process --------------------------------------------

def _values(n: int, tab: str | None) -> dict[str, Any]:
    from dashboard.state import defaults

    store = {"values": defaults() | {"gpus": n}}
    hi = n - 1 if n <= 64 else 31
    return {"scenario.data": store, "profile.data": None, "tabs.value": tab, "lang.value": "en",
            "ranks.value": [0, hi], "merge-row.value": None,
            "dl-trace-btn.n_clicks": 1, "dl-csv-btn.n_clicks": 1}


def _timed(client, output: str, values: dict[str, Any]) -> tuple[float, float, bytes]:
    body = json.dumps(client.payload(output, values, ["scenario.data"])).encode()
    t, c = time.perf_counter(), time.process_time()
    status, data = client._post("/_dash-update-component", body)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    if status != 200:
        raise RuntimeError(f"{output}: HTTP {status}")
    return wall, cpu, data


def _cold_warm(client, output, values, repeats) -> dict[str, Any]:
    from dashboard import compute

    compute.clear_caches()
    cold, cold_cpu, data = _timed(client, output, values)
    rebuilt, warm = [], []
    for _ in range(repeats):
        compute.FIGURES.clear()
        rebuilt.append(_timed(client, output, values)[:2])
    for _ in range(repeats):
        warm.append(_timed(client, output, values)[:2])
    return {"cold_s": cold, "cold_cpu_s": cold_cpu,
            "rebuilt_s": statistics.median(w for w, _ in rebuilt),
            "rebuilt_cpu_s": statistics.median(c for _, c in rebuilt),
            "warm_s": statistics.median(w for w, _ in warm),
            "warm_cpu_s": statistics.median(c for _, c in warm), "response_bytes": len(data)}


def _clock(fn) -> tuple[float, Any]:
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def _parts(n: int) -> dict[str, Any]:
    """CPU seconds of the pieces of the timeline's and the comparison's first draws."""
    from dash._utils import to_json

    from dashboard.figures.comparison import comparison
    from dashboard.figures.schemes import scheme_comparison
    from dashboard.figures.timeline import timeline
    from dashboard.state import defaults, scenario_from_values
    from sim.engine.play import simulate
    from sim.scenario.config import LAYOUTS
    from sim.trace.metrics import comparison_row, compute_metrics

    sc = scenario_from_values(defaults() | {"gpus": n})
    window = (0, n - 1 if n <= 64 else 31)
    sim_s, trace = _clock(lambda: simulate(sc, player="recurrence"))
    metrics_s, _ = _clock(lambda: compute_metrics(trace))
    figure_s, fig = _clock(lambda: timeline(trace, window))
    json_s, text = _clock(lambda: to_json({"response": {"timeline": {"figure": fig}}}))
    timeline_parts = {"simulate_s": sim_s, "metrics_s": metrics_s, "figure_s": figure_s, "json_s": json_s,
                      "json_bytes": len(text), "spans_drawn": fig.layout.meta["spans"]}
    rows, sims, mets = [], 0.0, 0.0
    for layout in LAYOUTS:
        for overlap in (True, False):
            s = sc.with_(layout=layout, overlap=overlap)
            dt, trace = _clock(lambda: simulate(s, player="recurrence"))
            sims += dt
            dt, m = _clock(lambda: compute_metrics(trace))
            mets += dt
            rows.append(comparison_row(layout, overlap, m))
            trace = None        # the run's trace goes before the next is made
    figure_s, fig = _clock(lambda: comparison(rows))
    json_s, text = _clock(lambda: to_json({"response": {"compare": {"figure": fig}}}))
    compare = {"simulate_s": sims, "metrics_s": mets, "figure_s": figure_s, "json_s": json_s,
               "json_bytes": len(text)}
    out = {"timeline": timeline_parts, "compare layouts": compare}
    if n <= SCHEMES_MAX_N:
        from sim.planning.compare import compare_scheme_rows

        # compare_scheme_rows simulates and summarizes each run in one call: both in "simulate"
        sims, rows = _clock(lambda: compare_scheme_rows(sc.with_(layout="zigzag")))
        figure_s, fig = _clock(lambda: scheme_comparison(rows))
        json_s, text = _clock(lambda: to_json({"response": {"schemes": {"figure": fig}}}))
        out["compare schemes"] = {"simulate_s": sims, "metrics_s": 0.0, "figure_s": figure_s, "json_s": json_s,
                                  "json_bytes": len(text)}
    return out


def measure(n: int, repeats: int) -> dict[str, Any]:
    """Every measurement of one ring size on the tree this process imports."""
    import logging

    from dashboard import compute, export, state
    from dashboard.app import create_app
    from dashboard.client import CallbackClient
    from sim.engine.play import simulate

    if n > getattr(state, "MAX_GPUS", n):
        return {"n_gpus": n, "skipped": f"this dashboard simulates at most {state.MAX_GPUS} GPUs"}
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    client = CallbackClient.for_app(create_app())
    # warm the imports and validators once, outside the measurements
    client.call("timeline.figure", _values(8, "timeline"), ["scenario.data"])
    sc = state.scenario_from_values(_values(n, None)["scenario.data"]["values"])
    t = time.perf_counter()
    trace = simulate(sc, player="recurrence")
    sim_s = time.perf_counter() - t
    archive = getattr(export, "trace_archive", None)
    row: dict[str, Any] = {"n_gpus": n, "seq": sc.workload.seq, "spans": len(trace.columns)
                           if hasattr(trace, "columns") else len(trace.spans),
                           "simulate_s": sim_s, "callbacks": {},
                           "trace_archive_bytes": len(archive(trace)) if archive else None}
    del trace
    # the scenario callback: validation and URL, no simulation
    ctrl = {f"{cid}.value": v for cid, v in _values(n, None)["scenario.data"]["values"].items()}
    t, c = time.perf_counter(), time.process_time()
    client.call("scenario.data", ctrl, ["gpus.value"])
    dt, dc = time.perf_counter() - t, time.process_time() - c
    row["callbacks"]["scenario (validate, URL)"] = {"cold_s": dt, "cold_cpu_s": dc, "rebuilt_s": dt,
                                                   "rebuilt_cpu_s": dc, "warm_s": dt, "warm_cpu_s": dc}
    for label, output, tab in VIEWS:
        row["callbacks"][label] = _cold_warm(client, output, _values(n, tab), repeats)
    # six simulations a first draw; past 256 GPUs they outgrow the result cache, so that
    # a rebuilt comparison simulates again: one repeat there
    row["callbacks"]["compare layouts"] = _cold_warm(client, "compare.figure", _values(n, "compare"),
                                                     max(1, repeats // 2) if n <= 256 else 1)
    if n <= SCHEMES_MAX_N:
        try:
            client.dependency("schemes.figure")
        except KeyError:        # a version without the view
            pass
        else:
            row["callbacks"]["compare schemes"] = _cold_warm(client, "schemes.figure", _values(n, "schemes"),
                                                             max(1, repeats // 2))
    if n == 64:
        # the issue's responsiveness case: a timeline of about 20k spans (WebGL)
        v = _values(n, "timeline")
        v["scenario.data"]["values"]["pass"] = "fwdbwd"
        v["ranks.value"] = [0, 39]
        r = _cold_warm(client, "timeline.figure", v, repeats)
        _, out = client.call("timeline.figure", v, ["scenario.data"])
        r["spans_drawn"] = out["timeline"]["figure"]["layout"]["meta"]["spans"]
        row["callbacks"]["timeline, ~20k spans (fwd+bwd, GPUs 0-39)"] = r
    if n <= 64:
        row["callbacks"]["overlap sweep"] = _cold_warm(client, "sweep.figure", _values(n, "sweep"),
                                                       max(1, repeats // 2))
    compute.clear_caches()
    row["parts"] = _parts(n)
    return row


def _child_main(tree: str | None, n: int, repeats: int, out: str) -> None:
    """Measure one size (in a process of its own) and write the row to `out`."""
    if tree:
        with open(os.path.join(tree, "pyproject.toml")) as f:
            if "orjson" not in f.read():
                import plotly.io

                plotly.io.json.config.default_engine = "json"
    row = measure(n, repeats)
    import plotly.io

    row["json_engine"] = plotly.io.json.config.default_engine
    with open(out, "w") as f:
        json.dump(row, f)


# --- the driver -----------------------------------------------------------------------

def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _run_child(tree: str | None, n: int, repeats: int) -> dict[str, Any]:
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        cmd = [sys.executable, os.path.abspath(__file__), "--child-size", str(n), "--repeats",
               str(repeats), "--child-out", out] + (["--child-tree", tree] if tree else [])
        subprocess.run(cmd, check=True, env=env, cwd=tree or ROOT)
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def _print_size(n: int, new: dict[str, Any], ref: dict[str, Any] | None) -> None:
    print(f"\n{n} GPUs: {new['spans']} spans, simulate() {new['simulate_s'] * 1e3:.0f} ms, "
          f"trace archive {new['trace_archive_bytes'] / 2**20:.2f} MiB")
    if ref is not None and "skipped" in ref:
        print(f"  REF: skipped ({ref['skipped']})")
        ref = None
    cols = ["cold", "rebuilt", "warm"]
    if ref is None:
        print(f"  {'callback':<44}" + "".join(f"{c + ' ms':>11}" for c in cols) + f"{'cold cpu':>10}{'KB':>9}")
    else:
        print(f"  {'callback (REF -> this tree)':<44}" + "".join(f"{c + ' ms':>19}" for c in cols)
              + f"{'KB':>17}")
    for label, r in new["callbacks"].items():
        kb = f"{r['response_bytes'] / 1024:.0f}" if "response_bytes" in r else "-"
        if ref is None:
            print(f"  {label:<44}" + "".join(f"{_ms(r[c + '_s']):>11}" for c in cols)
                  + f"{_ms(r['cold_cpu_s']):>10}{kb:>9}")
            continue
        o = ref["callbacks"].get(label, {})
        okb = f"{o['response_bytes'] / 1024:.0f}" if "response_bytes" in o else "-"
        print(f"  {label:<44}" + "".join(f"{_ms(o.get(c + '_s')) + ' -> ' + _ms(r[c + '_s']):>19}"
                                         for c in cols) + f"{okb + ' -> ' + kb:>17}")
    for view, p in new["parts"].items():
        op = ref["parts"].get(view) if ref else None
        parts = ", ".join(
            f"{k[:-2]} {(_ms(op[k]) + ' -> ') if op else ''}{_ms(p[k])}"
            for k in ("simulate_s", "metrics_s", "figure_s", "json_s"))
        print(f"  {view} first draw, CPU ms: {parts}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 256, 1024])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=1,
                   help="measure the goals' sizes this many times (REF and this tree in turn); goals report medians")
    p.add_argument("--against", metavar="REF", help="also measure the git ref REF, in the same run")
    p.add_argument("--out", help="where to write the JSON (default bench/results/speed/cpu-<cores>core/"
                                 "dashboard-callbacks.json)")
    p.add_argument("--child-size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--child-tree", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    add_force(p)
    a = p.parse_args()
    if a.child_size is not None:
        _child_main(a.child_tree, a.child_size, a.repeats, a.child_out)
        return
    # here, not at the top: a child measuring REF must find REF's packages first on its path
    # (the driver measures nothing itself; its results file is written with this tree's sim)
    sys.path.insert(0, ROOT)
    if a.out is None:
        a.out = str(RESULTS / "speed" / cpu_host() / "dashboard-callbacks.json")
    keep_results("dashboard_callbacks", a.out, force=a.force, make_folders=True)
    # the tree measured, as it is now (the results file is written into it at the end)
    this = _git("rev-parse", "HEAD") + (" (with uncommitted changes)"
                                        if _git("status", "--porcelain", "-uno") else "")
    ref_tree = ref_commit = None
    if a.against:
        ref_commit = _git("rev-parse", "--verify", a.against + "^{commit}")
        ref_tree = tempfile.mkdtemp(prefix="ringsim-bench-ref-")
        _git("worktree", "add", "--detach", ref_tree, ref_commit)
    load_start = os.getloadavg()
    rows = []
    try:
        for n in a.sizes:
            ref = _run_child(ref_tree, n, a.repeats) if ref_tree else None
            new = _run_child(None, n, a.repeats)
            _print_size(n, new, ref)
            row = {"n_gpus": n, "this": new, **({"ref": ref} if ref is not None else {})}
            if n in (GOAL_N, SCHEMES_GOAL_N) and a.rounds > 1:
                # a first draw is one sample: the goals' sizes are measured again, REF and
                # this tree in turn, and the goals report the median
                row["rounds"] = [{"this": new, **({"ref": ref} if ref is not None else {})}]
                for _ in range(a.rounds - 1):
                    again = {"ref": _run_child(ref_tree, n, a.repeats)} if ref_tree else {}
                    again["this"] = _run_child(None, n, a.repeats)
                    row["rounds"].append(again)
            rows.append(row)
    finally:
        if ref_tree:
            _git("worktree", "remove", "--force", ref_tree)
    goals = {}
    by_n = {r["n_gpus"]: r for r in rows}
    for n_goal, goals_s in ((GOAL_N, GOALS_S), (SCHEMES_GOAL_N, SCHEMES_GOALS_S)):
        at = by_n.get(n_goal)
        if not at:
            continue
        for label, goal in goals_s.items():
            if label not in at["this"]["callbacks"]:
                continue
            rounds = at.get("rounds") or [at]

            def cold(tree: str, key: str) -> list[float]:
                return [r[tree]["callbacks"][label][key] for r in rounds
                        if tree in r and label in r[tree].get("callbacks", {})]

            g = {"n_gpus": n_goal, "goal_s": goal, "cold_s": statistics.median(cold("this", "cold_s")),
                 "cold_cpu_s": statistics.median(cold("this", "cold_cpu_s")), "rounds": len(rounds),
                 "cold_s_each": cold("this", "cold_s")}
            if cold("ref", "cold_s"):
                g["ref_cold_s"] = statistics.median(cold("ref", "cold_s"))
                g["ref_cold_s_each"] = cold("ref", "cold_s")
            goals[label] = g
    if goals:
        print("\ngoals (first draw, cold): " + "; ".join(
            f"{label} at {g['n_gpus']} GPUs {g['cold_s'] * 1e3:.0f} ms wall / {g['cold_cpu_s'] * 1e3:.0f} ms CPU"
            + (f" (REF {g['ref_cold_s'] * 1e3:.0f} ms)" if "ref_cold_s" in g else "")
            + (f", median of {g['rounds']}" if g["rounds"] > 1 else "")
            + f", goal {g['goal_s'] * 1e3:.0f} ms" for label, g in goals.items()))
    import dash
    import plotly

    save_json(a.out, {"what": "server time per dashboard callback (Flask test client, no network)",
                      "command": "bench/speed/dashboard_callbacks.py " + " ".join(sys.argv[1:]),
                      "machine": {"cpus": os.cpu_count(), "loadavg_at_start": load_start,
                                  "loadavg_at_end": os.getloadavg(), "platform": platform.platform(),
                                  "python": platform.python_version()},
                      "versions": {"dash": dash.__version__, "plotly": plotly.__version__},
                      "this": this,
                      "ref": {"name": a.against, "commit": ref_commit} if a.against else None,
                      "scenario": "defaults (Llama-3-8B attention, 131072 tokens, causal, zigzag, "
                                  "overlap, H100-SXM / nvlink4) with --sizes GPUs",
                      "repeats": a.repeats, "goals": goals, "rows": rows}, force=a.force, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
