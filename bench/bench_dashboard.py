"""Dashboard server time per callback, by ring size, and the layout comparison.

Drives the real callback endpoint (`/_dash-update-component`) through Flask's test
client, so each number is what the server spends on one request: Dash's dispatch, the
simulation when it is not cached, the figure and its JSON; no network, no browser.
The default scenario (Llama-3-8B attention, 128k tokens, causal, zigzag, overlap, H100 /
NVLink) on 8, 64 and 256 GPUs.

"cold" is the first request after the caches are emptied (it simulates); "rebuilt" the
median of repeats with the simulation cached but the figure drawn afresh (another rank
window, a view opened for the first time); "warm" the median with the figure cached too
(a revisited view, another session on the same scenario: mostly serialization). Goals from the issue: one
configuration at 64 GPUs <= 100 ms, the three-layout comparison at 64 GPUs <= 300 ms.

    .venv/bin/python bench/bench_dashboard.py [--sizes 8 64 256] [--repeats 5]
        [--out bench/results/dashboard_bench.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import time
from typing import Any

import dash
import plotly

from dashboard import compute
from dashboard.app import create_app
from dashboard.client import CallbackClient
from dashboard.state import defaults
from sim.engine import simulate

VIEWS = [
    # (label, output, tab)
    ("summary cards", "m-makespan.children", None),
    ("layout strip", "layout-strip.figure", None),
    ("timeline", "timeline.figure", "timeline"),
    ("block map", "block-map.figure", "blocks"),
    ("memory", "memory.figure", "memory"),
    ("exact merge", "merge.figure", "merge"),
    ("download trace JSON", "dl-trace.data", None),
    ("download metrics CSV", "dl-csv.data", None),
]


def _values(n: int, tab: str | None) -> dict[str, Any]:
    store = {"values": defaults() | {"gpus": n}}
    hi = n - 1 if n <= 64 else 31
    return {"scenario.data": store, "profile.data": None, "tabs.value": tab,
            "ranks.value": [0, hi], "merge-row.value": None,
            "dl-trace-btn.n_clicks": 1, "dl-csv-btn.n_clicks": 1}


def _timed(client: CallbackClient, output: str, values: dict[str, Any]) -> tuple[float, int]:
    body = json.dumps(client.payload(output, values, ["scenario.data"])).encode()
    t = time.perf_counter()
    status, data = client._post("/_dash-update-component", body)
    elapsed = time.perf_counter() - t
    if status != 200:
        raise RuntimeError(f"{output}: HTTP {status}")
    return elapsed, len(data)


def _cold_warm(client, output, values, repeats) -> dict[str, float]:
    compute.clear_caches()
    cold, size = _timed(client, output, values)
    rebuilt = []
    for _ in range(repeats):
        compute.FIGURES.clear()
        rebuilt.append(_timed(client, output, values)[0])
    warm = [_timed(client, output, values)[0] for _ in range(repeats)]
    return {"cold_s": cold, "rebuilt_s": statistics.median(rebuilt),
            "warm_s": statistics.median(warm), "response_bytes": size}


def measure(client: CallbackClient, n: int, repeats: int) -> dict[str, Any]:
    sc_values = _values(n, None)
    from dashboard.state import scenario_from_values
    sc = scenario_from_values(sc_values["scenario.data"]["values"])
    t = time.perf_counter()
    trace = simulate(sc, player="recurrence")
    sim_s = time.perf_counter() - t
    row: dict[str, Any] = {"n_gpus": n, "seq": sc.workload.seq, "spans": len(trace.spans),
                           "simulate_s": sim_s, "callbacks": {}}
    # the scenario callback: validation and URL, no simulation
    ctrl = {f"{cid}.value": v for cid, v in sc_values["scenario.data"]["values"].items()}
    t = time.perf_counter()
    client.call("scenario.data", ctrl, ["gpus.value"])
    dt = time.perf_counter() - t
    row["callbacks"]["scenario (validate, URL)"] = {"cold_s": dt, "rebuilt_s": dt, "warm_s": dt}
    for label, output, tab in VIEWS:
        row["callbacks"][label] = _cold_warm(client, output, _values(n, tab), repeats)
    row["callbacks"]["compare layouts"] = _cold_warm(client, "compare.figure", _values(n, "compare"),
                                                     max(1, repeats // 2))
    if n == 64:
        # the responsiveness case: a timeline of about 20k spans (WebGL)
        v = _values(n, "timeline")
        v["scenario.data"]["values"]["pass"] = "fwdbwd"
        v["ranks.value"] = [0, 39]
        r = _cold_warm(client, "timeline.figure", v, repeats)
        status, out = client.call("timeline.figure", v, ["scenario.data"])
        r["spans_drawn"] = out["timeline"]["figure"]["layout"]["meta"]["spans"]
        row["callbacks"]["timeline, ~20k spans (fwd+bwd, GPUs 0-39)"] = r
    if n <= 64:
        row["callbacks"]["overlap sweep"] = _cold_warm(client, "sweep.figure", _values(n, "sweep"),
                                                       max(1, repeats // 2))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="bench/results/dashboard_bench.json")
    a = p.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    client = CallbackClient.for_app(create_app())
    # warm the imports and validators once, outside the measurements
    client.call("timeline.figure", _values(8, "timeline"), ["scenario.data"])
    rows = []
    for n in a.sizes:
        row = measure(client, n, a.repeats)
        rows.append(row)
        print(f"\n{n} GPUs: {row['spans']} spans, simulate() {row['simulate_s'] * 1e3:.0f} ms")
        print(f"  {'callback':<44} {'cold ms':>9} {'rebuilt ms':>11} {'warm ms':>9} {'response KB':>12}")
        for label, r in row["callbacks"].items():
            kb = f"{r['response_bytes'] / 1024:.0f}" if "response_bytes" in r else "-"
            print(f"  {label:<44} {r['cold_s'] * 1e3:>9.1f} {r['rebuilt_s'] * 1e3:>11.1f} "
                  f"{r['warm_s'] * 1e3:>9.1f} {kb:>12}")
    by_n = {r["n_gpus"]: r for r in rows}
    goals = {}
    if 64 in by_n:
        cb = by_n[64]["callbacks"]
        goals = {
            "one_configuration_64_cold_s": cb["timeline"]["cold_s"],
            "one_configuration_64_rebuilt_s": cb["timeline"]["rebuilt_s"],
            "one_configuration_64_warm_s": cb["timeline"]["warm_s"],
            "one_configuration_goal_s": 0.100,
            "comparison_64_cold_s": cb["compare layouts"]["cold_s"],
            "comparison_64_rebuilt_s": cb["compare layouts"]["rebuilt_s"],
            "comparison_64_warm_s": cb["compare layouts"]["warm_s"],
            "comparison_goal_s": 0.300,
        }
        ms = {k: v * 1e3 for k, v in goals.items()}
        print(f"\ngoals at 64 GPUs: one configuration (timeline) cold "
              f"{ms['one_configuration_64_cold_s']:.0f} / rebuilt {ms['one_configuration_64_rebuilt_s']:.0f} / "
              f"warm {ms['one_configuration_64_warm_s']:.0f} ms (goal 100); comparison cold "
              f"{ms['comparison_64_cold_s']:.0f} / rebuilt {ms['comparison_64_rebuilt_s']:.0f} / "
              f"warm {ms['comparison_64_warm_s']:.0f} ms (goal 300)")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"what": "server time per dashboard callback (Flask test client, no network)",
                   "machine": {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg(),
                               "platform": platform.platform(),
                               "python": platform.python_version()},
                   "versions": {"dash": dash.__version__, "plotly": plotly.__version__},
                   "scenario": "defaults (Llama-3-8B attention, 131072 tokens, causal, zigzag, "
                               "overlap, H100-SXM / nvlink4) with --sizes GPUs",
                   "repeats": a.repeats, "goals": goals, "rows": rows}, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
