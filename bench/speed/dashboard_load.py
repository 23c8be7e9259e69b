"""Load test: concurrent browser-like sessions against `ringsim dashboard` on loopback.

Starts the real server (`python -m sim.cli.main dashboard`: waitress, debug off; extra
flags through --server-args, e.g. "--dev-server" for Flask's development server or
"--threads 4") on a free loopback port, then runs N sessions at once, one thread and one HTTP
connection each. A session does what a browser does: loads the page (/, layout,
dependencies), fires the initial callbacks, then makes a series of changes (ring size,
layout, overlap, sequence length, an invalid value, a tab switch), each change being
the scenario callback followed by the callbacks that depend on it, optionally after a
pause (--think-s; 0 sends back to back and saturates the server). Every POST to
`/_dash-update-component` is timed from send to last byte received. Sessions draw
their scenarios from a small pool, so some requests find results already cached and
others simulate, as with real users.

    .venv/bin/python bench/speed/dashboard_load.py [--sessions 20] [--changes 8] [--think-s 0]
        [--server-args "--threads 8"] [--out bench/results/speed/cpu-2core/dashboard-load.json] [--force]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402
from dashboard.client import CallbackClient  # noqa: E402
from dashboard.state import CONTROL_IDS, defaults  # noqa: E402

CHANGES = [
    {"gpus": 16}, {"gpus": 32}, {"gpus": 64}, {"layout": "contiguous"}, {"layout": "striped"},
    {"overlap": False}, {"seq": 65536}, {"seq": 262144}, {"pass": "fwdbwd"}, {"link": "ib-ndr"},
    {"kv-heads": 7},     # invalid: a message, no simulation
]
TABS = ["blocks", "compare", "memory", "merge", "timeline"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


class Session:
    def __init__(self, base: str, seed: int, changes: int, record, think_s: float = 0.0):
        self.base = base
        self.think_s = think_s
        self.rng = random.Random(seed)
        self.changes = changes
        self.record = record
        self.http = requests.Session()

    def post(self, client: CallbackClient, label: str, output: str, values: dict[str, Any],
             changed: list[str]) -> dict[str, Any]:
        body = json.dumps(client.payload(output, values, changed))
        t = time.perf_counter()
        r = self.http.post(self.base + "/_dash-update-component", data=body,
                           headers={"Content-Type": "application/json"}, timeout=600)
        content = r.content
        elapsed = time.perf_counter() - t
        self.record(label, elapsed, r.status_code, len(content))
        if r.status_code == 200 and output == "scenario.data":
            return json.loads(content).get("response", {})
        return {}

    def run(self) -> None:
        t = time.perf_counter()
        for path in ("/", "/_dash-layout"):
            self.http.get(self.base + path, timeout=60).raise_for_status()
        client = CallbackClient.for_url(self.base, self.http)
        self.record("page load (GET /, layout, dependencies)", time.perf_counter() - t, 200, 0)
        values = defaults()
        store = {"values": dict(values)}
        tab = "timeline"
        self._after_change(client, store, tab, first=True)
        for _ in range(self.changes):
            if self.think_s:
                time.sleep(self.rng.uniform(0.5, 1.5) * self.think_s)
            if self.rng.random() < 0.25:
                tab = self.rng.choice(TABS)
                self._view(client, store, tab, ["tabs.value"])
                continue
            change = self.rng.choice(CHANGES)
            trial = values | change
            ctrl = {f"{cid}.value": trial[cid] for cid in CONTROL_IDS}
            out = self.post(client, "scenario (validate, URL)", "scenario.data", ctrl,
                            [f"{next(iter(change))}.value"])
            if "scenario" in out:                  # valid: the views follow
                values = trial
                store = out["scenario"]["data"]
                self._after_change(client, store, tab)

    def _after_change(self, client, store, tab, first: bool = False) -> None:
        v = {"scenario.data": store, "profile.data": None, "tabs.value": tab,
             "ranks.value": [0, min(store["values"]["gpus"], 64) - 1], "merge-row.value": None}
        self.post(client, "summary cards", "m-makespan.children", v, ["scenario.data"])
        self.post(client, "layout strip", "layout-strip.figure", v, ["scenario.data"])
        self._view(client, store, tab, ["scenario.data"])

    def _view(self, client, store, tab, changed) -> None:
        output = {"timeline": "timeline.figure", "blocks": "block-map.figure",
                  "compare": "compare.figure", "memory": "memory.figure",
                  "merge": "merge.figure"}[tab]
        v = {"scenario.data": store, "profile.data": None, "tabs.value": tab,
             "ranks.value": [0, min(store["values"]["gpus"], 64) - 1], "merge-row.value": None}
        self.post(client, tab, output, v, changed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--changes", type=int, default=8, help="interactions per session after load")
    p.add_argument("--think-s", type=float, default=0.0,
                   help="mean pause between a session's interactions (0: back to back, saturating)")
    p.add_argument("--server-args", default="",
                   help='flags for `ringsim dashboard`, e.g. "--dev-server" or "--threads 4"')
    p.add_argument("--out", default=str(RESULTS / "speed" / cpu_host() / "dashboard-load.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("dashboard_load", a.out, force=a.force, make_folders=True)
    server_args = shlex.split(a.server_args)
    load_at_start = os.getloadavg()
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "sim.cli.main", "dashboard", "--port", str(port),
                               *server_args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if requests.get(base + "/", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.1)
        else:
            raise SystemExit("the dashboard did not start")
        samples: list[tuple[str, float, int, int]] = []
        lock = threading.Lock()

        def record(label, elapsed, status, size):
            with lock:
                samples.append((label, elapsed, status, size))

        errors: list[str] = []

        def run(i):
            try:
                Session(base, seed=i, changes=a.changes, record=record, think_s=a.think_s).run()
            except Exception as e:      # noqa: BLE001 - a failed session is reported, not raised
                errors.append(f"session {i}: {e!r}")

        threads = [threading.Thread(target=run, args=(i,)) for i in range(a.sessions)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    finally:
        server.terminate()
        server.wait(timeout=30)
    callbacks = [s for s in samples if not s[0].startswith("page load")]
    lat = [s[1] for s in callbacks]
    bad = [s for s in callbacks if s[2] not in (200, 204)]
    by_label: dict[str, list[float]] = {}
    for label, elapsed, _, _ in samples:
        by_label.setdefault(label, []).append(elapsed)
    print(f"server: ringsim dashboard {a.server_args or '(defaults)'}; load average at start "
          f"{load_at_start[0]:.2f}, at end {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    print(f"{a.sessions} concurrent sessions (think time {a.think_s:g} s), {len(callbacks)} callback requests "
          f"in {wall:.1f} s ({len(callbacks) / wall:.1f} req/s), {len(bad)} failed, {len(errors)} session errors")
    print(f"  {'request':<40} {'n':>5} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9}")
    rows = {}
    for label, xs in sorted(by_label.items()):
        rows[label] = {"n": len(xs), "p50_s": _pct(xs, 0.5), "p95_s": _pct(xs, 0.95), "max_s": max(xs)}
        print(f"  {label:<40} {len(xs):>5} {rows[label]['p50_s'] * 1e3:>9.1f} "
              f"{rows[label]['p95_s'] * 1e3:>9.1f} {max(xs) * 1e3:>9.1f}")
    overall = {"n": len(lat), "p50_s": _pct(lat, 0.5), "p95_s": _pct(lat, 0.95), "max_s": max(lat),
               "mean_s": statistics.mean(lat)}
    print(f"  {'all callbacks':<40} {len(lat):>5} {overall['p50_s'] * 1e3:>9.1f} "
          f"{overall['p95_s'] * 1e3:>9.1f} {overall['max_s'] * 1e3:>9.1f}")
    for e in errors:
        print("  " + e)
    save_json(a.out, {"what": "latency of /_dash-update-component under concurrent sessions on loopback",
                      "server": " ".join(["python -m sim.cli.main dashboard", *server_args]),
                      "machine": {"cpus": os.cpu_count(), "loadavg_at_start": load_at_start,
                                  "loadavg_at_end": os.getloadavg(),
                                  "platform": platform.platform(),
                                  "python": platform.python_version()},
                      "sessions": a.sessions, "changes_per_session": a.changes, "think_s": a.think_s,
                      "wall_s": wall,
                      "requests": len(callbacks), "failed": len(bad), "session_errors": errors,
                      "overall": overall, "by_request": rows}, force=a.force, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
