"""How long each dashboard view takes to update in a real browser, at 8, 64, 256 and 1,024
GPUs, the first time a scenario is asked for (cold) and again (warm); this tree against
another version of the code in the same run.

Each tree is served as people serve it (`ringsim dashboard`: gunicorn with --workers
processes, 2 by default as on this machine, each with its own memory; this tree's
processes share a fresh cache folder) on a loopback port, and driven by headless
Chromium through Selenium. For each view and size the page opens on the view at 4 GPUs;
then its address changes to the size (cold: a link bandwidth no request has used before,
450 GB/s and a few thousandths, makes the scenario new to every cache: its run, and every run
a view derives from it), back to 4, and to the size again (warm: the
scenario computed once already, as when a reader comes back to it), each change made as
the browser's back button makes it (the page follows its address). A time runs from the
change to the moment the view's chart is drawn anew, no callback is pending and the busy
line (if any) is hidden: what a reader waits.

    .venv/bin/python bench/speed/dashboard_latency.py [--sizes 8 64 256 1024] [--against main]
        [--views timeline blocks compare schemes memory sweep] [--workers 2] [--rounds 3] [--aged 8000]
        [--out bench/results/speed/cpu-2core/dashboard-latency.json] [--force]

`--against REF` serves a checkout of the git ref REF (a temporary `git worktree`,
removed afterwards) the same way, one view at a time beside this tree's, so that both see
the same machine load. A view that does not finish within --timeout-s is reported as that
many seconds and marked. `--aged N` starts each server's cache folder with N entries of
older code, as a server that has run for a while (and been updated) leaves it: what every
access to the folder pays for its size shows there, and not in an empty one.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402

VIEWS = ("timeline", "blocks", "compare", "schemes", "memory", "sweep")
"""The views whose chart follows the number of GPUs (the exact merge's does not)."""
GRAPH_OF = {"timeline": "timeline", "blocks": "block-map", "compare": "compare", "schemes": "schemes",
            "sweep": "sweep", "memory": "memory", "merge": "merge"}
BASE_GPUS = 4
"""The page opens on this many GPUs, and goes back to it between the cold and the warm update."""
GOALS_S = {"warm": 1.0, "cold": 3.0}
"""Every view at 1,024 GPUs: warm under 1 s, cold under 3 s."""

SETTLED = r"""
const view = arguments[0], graph = arguments[1];
const s = window.store && window.store.getState();
if (!s) return false;
const cb = Object.assign({}, s.callbacks); delete cb.stored; delete cb.completed;
const pending = [].concat(...Object.values(cb)).length;
const busy = document.getElementById(view + '-busy');
const busyShown = busy && getComputedStyle(busy).display !== 'none';
const loading = document.querySelector('#' + graph + '[data-dash-is-loading="true"], '
                                       + '[data-dash-is-loading="true"] #' + graph);
const svg = document.querySelector('#' + graph + ' .main-svg');
const redrawn = svg && svg.parentElement.parentElement.textContent !== window.__benchBefore;
return pending === 0 && !busyShown && !loading && !!redrawn;
"""
FIRST_ROWS = r"""
const rows = document.querySelector('#' + arguments[0] + '-busy .busy-rows');
return !!rows && rows.offsetParent !== null;
"""
"""A comparison's busy line shows the rows done so far: its first answers, before the rest."""
MARK = r"""
const svg = document.querySelector('#' + arguments[0] + ' .main-svg');
window.__benchBefore = svg ? svg.parentElement.parentElement.textContent : null;
"""
"""Keeps the chart's texts as drawn: an update is done once they differ (each view's chart
names the GPUs or shows numbers that follow them)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`ringsim dashboard` of one tree on a free loopback port."""

    def __init__(self, tree: Path, workers: int, extra_path: str | None, aged: int = 0):
        self.port = _free_port()
        self.cache = tempfile.mkdtemp(prefix="ringsim-latency-cache-")
        _age(Path(self.cache), aged)
        env = dict(os.environ, RINGSIM_DASHBOARD_CACHE=self.cache,
                   PYTHONPATH=os.pathsep.join(p for p in (str(tree), extra_path) if p))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sim.cli.main", "dashboard", "--port", str(self.port),
             "--workers", str(workers)], cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        import requests

        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                if requests.get(self.url + "/_dash-layout", timeout=5).ok:
                    return
            except requests.RequestException:
                time.sleep(0.5)
        raise RuntimeError(f"the dashboard of {tree} did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        subprocess.run(["rm", "-rf", self.cache], check=False)


def _age(folder: Path, entries: int) -> None:
    """Fill a cache folder with `entries` entries as a server that has run for a while, and
    been updated, leaves it: values of other code (never read again; small, so that none is
    over the budget and goes), a third of them traces (a folder of one file per column),
    each value beside its lock file."""
    import random

    from sim.trace.format import COLUMN_TYPES

    rng = random.Random(0)
    for i in range(entries // 2):
        kind = "trace" if i % 3 == 0 else "metrics"
        name = f"{kind}-{rng.getrandbits(160):040x}"
        if kind == "trace":
            (folder / name).mkdir()
            for column in COLUMN_TYPES:
                (folder / name / f"{column}.npy").write_bytes(b"\0" * 128)
        else:
            (folder / f"{name}.pkl").write_bytes(b"\0" * 512)
        (folder / f"{name}.lock").touch()


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--window-size=1400,1000"):
        opts.add_argument(arg)
    opts.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def _wait(driver, view: str, timeout_s: float, t0: float | None = None) -> tuple[float, bool, float | None]:
    """Seconds from `t0` until the view settles, whether it did within `timeout_s`, and when
    its first rows showed (a comparison's rows done so far, or the view itself), if they did."""
    t = time.perf_counter() if t0 is None else t0
    end = t + timeout_s
    first = None
    time.sleep(0.05)           # let the renderer take the change before asking whether it settled
    while time.perf_counter() < end:
        if driver.execute_script(SETTLED, view, GRAPH_OF[view]):
            now = time.perf_counter() - t
            return now, True, now if first is None else first
        if first is None and driver.execute_script(FIRST_ROWS, view):
            first = time.perf_counter() - t
        time.sleep(0.05)
    return timeout_s, False, first


FRESH_KEY = "link_gbps"
"""The address's parameter that makes a scenario new: the link's bandwidth (NVLink 4's 450 GB/s
by default) moved by a thousandth of a GB/s, which changes no view's cost."""


def _fresh_query(view: str, gpus: int, link_gbps: float) -> str:
    return f"?view={view}&gpus={gpus}&{FRESH_KEY}={link_gbps:.3f}"


def _check_fresh_key() -> None:
    """The page reads FRESH_KEY into its scenario (else no update would be cold)."""
    from dashboard.state import scenario_from_values, values_from_query

    values, ignored = values_from_query(_fresh_query("timeline", 8, 450.001))
    if ignored or scenario_from_values(values).hardware.link.bandwidth_gbps != 450.001:
        raise SystemExit(f"the page does not read {FRESH_KEY} from its address: no update would be cold")


def _go(driver, view: str, gpus: int, link_gbps: float, timeout_s: float) -> tuple[float, bool, float | None]:
    """Change the page's address to the view at `gpus` GPUs, as the browser's back button
    does (the page follows its address, dashboard/nav.py and dashboard/state.py), and wait
    until the view's chart is drawn anew."""
    driver.execute_script(MARK, GRAPH_OF[view])
    t0 = time.perf_counter()
    driver.execute_script(f"window.history.pushState({{}}, '', '{_fresh_query(view, gpus, link_gbps)}');"
                          "window.dispatchEvent(new PopStateEvent('popstate'));")
    return _wait(driver, view, timeout_s, t0)


def measure_view(driver, url: str, view: str, n: int, link_gbps: float, timeout_s: float) -> dict[str, Any]:
    """The page opened on `view` at BASE_GPUS, then: cold (to n GPUs, a scenario new to
    every cache), back to BASE_GPUS, warm (to n again)."""
    driver.get(f"{url}/{_fresh_query(view, BASE_GPUS, link_gbps)}")
    _wait(driver, view, timeout_s)
    out: dict[str, Any] = {}
    out["cold_s"], out["cold_finished"], out["cold_first_s"] = _go(driver, view, n, link_gbps, timeout_s)
    _go(driver, view, BASE_GPUS, link_gbps, timeout_s)
    out["warm_s"], out["warm_finished"], _ = _go(driver, view, n, link_gbps, timeout_s)
    return out


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 256, 1024])
    p.add_argument("--views", nargs="+", default=list(VIEWS), choices=VIEWS)
    p.add_argument("--against", metavar="REF", help="also serve the git ref REF, in the same run")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--rounds", type=int, default=1,
                   help="measure every view this many times over (the table: median and range)")
    p.add_argument("--aged", type=int, default=0, metavar="N",
                   help="start each server's cache folder with N entries of older code, as a server that has "
                        "run for a while leaves it (default 0: an empty folder)")
    p.add_argument("--extra-path", default=os.environ.get("RINGSIM_EXTRA_PATH"),
                   help="a folder put on both servers' path (packages this machine's venv lacks)")
    p.add_argument("--out", default=str(RESULTS / "speed" / cpu_host() / "dashboard-latency.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("dashboard_latency", a.out, force=a.force, make_folders=True)
    _check_fresh_key()
    trees = {"this": ROOT}
    ref_tree = None
    if a.against:
        ref_commit = _git("rev-parse", "--verify", a.against + "^{commit}")
        ref_tree = Path(tempfile.mkdtemp(prefix="ringsim-latency-ref-"))
        _git("worktree", "add", "--detach", str(ref_tree), ref_commit)
        trees = {"ref": ref_tree, "this": ROOT}
    this_commit = _git("rev-parse", "HEAD") + (" (with uncommitted changes)" if _git("status", "--porcelain", "-uno")
                                               else "")
    load_start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    driver = _browser()
    servers: dict[str, Server] = {}
    try:
        servers = {name: Server(tree, a.workers, a.extra_path, a.aged) for name, tree in trees.items()}
        link_gbps = 450.0
        for turn in range(a.rounds):
            for n in a.sizes:
                for view in a.views:
                    row: dict[str, Any] = {"round": turn + 1, "n_gpus": n, "view": view}
                    for name, server in servers.items():
                        link_gbps += 0.001         # a scenario no cache has seen
                        row[name] = measure_view(driver, server.url, view, n, round(link_gbps, 3), a.timeout_s)
                    rows.append(row)
                    _print_row(row)
    finally:
        driver.quit()
        for server in servers.values():
            server.stop()
        if ref_tree is not None:
            _git("worktree", "remove", "--force", str(ref_tree))
    table = _table(rows, "ref" in trees)
    print("\n" + table)
    import dash

    save_json(a.out, {"what": "seconds from a committed GPUs value to the view drawn, in headless Chromium",
                      "command": "bench/speed/dashboard_latency.py " + " ".join(sys.argv[1:]),
                      "machine": {"cpus": os.cpu_count(), "loadavg_at_start": load_start,
                                  "loadavg_at_end": os.getloadavg(), "platform": platform.platform(),
                                  "python": platform.python_version()},
                      "versions": {"dash": dash.__version__}, "this": this_commit,
                      "ref": {"name": a.against, "commit": ref_commit} if a.against else None,
                      "server": f"ringsim dashboard --workers {a.workers} (gunicorn)",
                      "cache_folder": f"{a.aged} entries of older code at the start" if a.aged else "empty at the start",
                      "scenario": "defaults (Llama-3-8B attention, 131072 tokens, causal, zigzag, overlap, "
                                  "H100-SXM / nvlink4), a fresh link bandwidth per view (450 GB/s and thousandths)",
                      "goals_at_1024_s": GOALS_S, "timeout_s": a.timeout_s, "rows": rows, "table": table},
              force=a.force, indent=2)
    print(f"wrote {a.out}")


def _cell(r: dict[str, Any], key: str) -> str:
    """The time, and + where the view was not drawn in time."""
    return f"{r[key + '_s']:.2f}" + ("" if r[key + "_finished"] else "+")


def _first(r: dict[str, Any]) -> str:
    """When a cold update first showed an answer (a comparison's first rows), or – if never."""
    return "–" if r.get("cold_first_s") is None else f"{r['cold_first_s']:.2f}"


def _print_row(row: dict[str, Any]) -> None:
    parts = [f"{name}: cold {_cell(row[name], 'cold')} s (first rows {_first(row[name])} s), "
             f"warm {_cell(row[name], 'warm')} s" for name in ("ref", "this") if name in row]
    print(f"{row['n_gpus']:>5} GPUs {row['view']:<9} " + "; ".join(parts), flush=True)


def _rounds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of every round grouped by size and view (`of`: that size and view's row of
    each round)."""
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        out.setdefault((r["n_gpus"], r["view"]), {"n_gpus": r["n_gpus"], "view": r["view"], "of": []})["of"].append(r)
    return list(out.values())


def _spread(values: list[float], finished: bool) -> str:
    import statistics

    mark = "" if finished else "+"
    if len(values) == 1:
        return f"{values[0]:.2f}{mark}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}){mark}"


def _table(rows: list[dict[str, Any]], with_ref: bool) -> str:
    """The rows as a table, one line per size and view: with several rounds each time the
    median of the rounds and their range."""
    groups = _rounds(rows)
    rounds = len(groups[0]["of"]) if groups else 0
    head = "| GPUs | view | " + ("cold before | cold after | first rows after | warm before | warm after |"
                                if with_ref else "cold | first rows | warm |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for g in groups:
        def cell(tree: str, key: str) -> str:
            rs = [r[tree] for r in g["of"]]
            return _spread([x[key + "_s"] for x in rs], all(x[key + "_finished"] for x in rs))
        firsts = [r["this"].get("cold_first_s") for r in g["of"]]
        first = _spread(firsts, True) if all(f is not None for f in firsts) else "–"
        cells = ([cell("ref", "cold"), cell("this", "cold"), first, cell("ref", "warm"), cell("this", "warm")]
                 if with_ref else [cell("this", "cold"), first, cell("this", "warm")])
        lines.append(f"| {g['n_gpus']} | {g['view']} | " + " | ".join(cells) + " |")
    of_rounds = f"median of {rounds} rounds (range); " if rounds > 1 else ""
    return "\n".join(lines) + (f"\n\n{of_rounds}seconds from the change of GPUs to the view drawn anew (first "
                               "rows: to a comparison's rows done so far, or the view drawn); + marks a view still "
                               "not drawn at the timeout" + (" in a round" if rounds > 1 else ""))


if __name__ == "__main__":
    main()
