"""Simulator speed and memory by ring size: `simulate()` with its metrics, and the whole
`ringsim simulate --json` process, each in a fresh process so that peak memory is that
run's own; optionally the same on another commit, in the same run, for a before/after.

Causal zigzag forward ring, Llama-3-8B attention shape (32/8 heads x 128, bf16), 4096
tokens per rank, H100 / NVLink presets (the defaults). Per GPU count and code tree:
- `simulate_s`: `simulate(..., player="recurrence")` plus `compute_metrics`, the first
  call in the process (cold), the best of the following ones (`--repeats`), their
  median (`simulate_median_s`) and slowest (`simulate_max_s`; every one in `simulate_warm_s`);
- `peak_rss_mb`: the process's peak resident memory, and `import_rss_mb` before the
  first call (what Python, numpy and simpy take on their own);
- `cli_s`, `cli_rss_mb`: the whole `ringsim simulate --gpus N --json` process;
- with `--simpy-check N...`: whether the SimPy player gives the identical trace where
  the two claim it, NCCL's pull on the computes off (`simpy_identical`: transfers at the
  link's cost, `comm_cost="link"`), and how far the wave player's stretched computes
  (docs/nccl.md) are from the event loop's with it on (`pull_from_simpy`: the largest
  difference of a start or end, as a share of the makespan; tests/sim/engine/test_pull.py
  holds it under 1e-5);
- with `--huge-pages`: this tree once more ("this+huge") with NumPy's huge-page advice
  left on, as it is outside `simulate` (sim.engine.play asks for small pages while it runs).
Prints a table and writes JSON.

    .venv/bin/python bench/speed/simulate.py [--sizes 8 64 256 1024 4096] [--against REF]
        [--against-max-gpus 1024] [--huge-pages] [--out bench/results/speed/cpu-2core/simulate.json] [--force]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402

CHILD = r"""
import gc, json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from sim.scenario.config import Scenario, Workload
from sim.engine.play import simulate
from sim.trace.metrics import compute_metrics
n, repeats, check = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
if sys.argv[5] == "1":        # leave NumPy's huge-page advice as it is
    import sim.engine.host_memory
    sim.engine.host_memory.madvise_setter = lambda: None
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
sc = Scenario(workload=Workload(seq=4096 * n), n_gpus=n, layout="zigzag")
row = {"import_rss_mb": rss()}
times = []
for i in range(1 + repeats):
    t0 = time.perf_counter()
    trace = simulate(sc, player="recurrence")
    m = compute_metrics(trace)
    times.append(time.perf_counter() - t0)
    if i == 0:
        row["peak_rss_mb"] = rss()
        row.update(spans=len(trace.spans) if not hasattr(trace, "columns") else len(trace.columns),
                   ops=trace.meta["ops"], makespan_s=m.makespan_s, efficiency=m.efficiency)
    del trace
    gc.collect()
warm = sorted(times[1:] or times)
row.update(simulate_cold_s=times[0], simulate_s=warm[0], simulate_median_s=warm[len(warm) // 2],
           simulate_max_s=warm[-1], simulate_warm_s=times[1:])
if check:
    import dataclasses
    import numpy as np
    from sim.trace.format import WAIT
    plain = dataclasses.replace(sc, hardware=dataclasses.replace(sc.hardware, comm_cost="link"))
    row["simpy_identical"] = simulate(plain, player="recurrence").spans == simulate(plain, player="simpy").spans
    a, b = simulate(sc, player="recurrence").columns, simulate(sc, player="simpy").columns
    ops_a, ops_b = a.stream != WAIT, b.stream != WAIT      # the two record waits their own way
    row["pull_from_simpy"] = max(float(np.abs(getattr(a, c)[ops_a] - getattr(b, c)[ops_b]).max())
                                 for c in ("start_s", "end_s")) / float(b.end_s.max())
print(json.dumps(row))
"""


def _simpy_words(row: dict) -> str:
    """The SimPy check's result as the table prints it."""
    if "simpy_identical" not in row:
        return "-"
    pull = f", pull {row['pull_from_simpy']:.1e}" if "pull_from_simpy" in row else ""
    return f"{'identical' if row['simpy_identical'] else 'DIFFERENT'}{pull}"


def child(tree: str, n: int, repeats: int, check: bool, huge: bool = False) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, tree, str(n), str(repeats), "1" if check else "0",
                          "1" if huge else "0"],
                         capture_output=True, text=True, cwd=tree, env={**os.environ, "PYTHONPATH": tree})
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


CLI = r"""
import atexit, resource, sys
# the process's own peak, written as it exits (after the command's output)
atexit.register(lambda: sys.stderr.write("\npeak_rss_kb %d\n" % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
from sim.cli.main import main
sys.exit(main())
"""


def cli(tree: str, n: int) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CLI, "simulate", "--gpus", str(n), "--seq", str(4096 * n), "--json"],
                         capture_output=True, text=True, cwd=tree, env={**os.environ, "PYTHONPATH": tree})
    wall = time.perf_counter() - t0
    if out.returncode:
        return {"cli_error": out.stderr.strip()[-200:]}
    peak = [line.split()[1] for line in out.stderr.splitlines() if line.startswith("peak_rss_kb ")]
    return {"cli_s": wall, "cli_rss_mb": int(peak[-1]) / 1024 if peak else None}


def checkout(ref: str) -> str:
    path = tempfile.mkdtemp(prefix="ringsim-ref-")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", path, ref], check=True,
                   capture_output=True)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 256, 1024, 4096])
    p.add_argument("--repeats", type=int, default=2, help="warm calls after the first (default 2)")
    p.add_argument("--against", metavar="REF", help="also measure this git commit, in the same run")
    p.add_argument("--against-max-gpus", type=int, default=1024,
                   help="largest size to run on REF (the old record needs ~5 GB at 1024)")
    p.add_argument("--simpy-check", type=int, nargs="*", default=[8, 64],
                   help="sizes at which to check that SimPy gives the identical trace")
    p.add_argument("--no-cli", action="store_true", help="skip the whole-CLI runs")
    p.add_argument("--huge-pages", action="store_true",
                   help="also run this tree with NumPy's huge-page advice left on (no CLI runs)")
    p.add_argument("--out", default=str(RESULTS / "speed" / cpu_host() / "simulate.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("simulate", a.out, force=a.force, make_folders=True)
    trees = [("this", ROOT, False)] + ([("this+huge", ROOT, True)] if a.huge_pages else [])
    ref_path = None
    if a.against:
        ref_path = checkout(a.against)
        trees.insert(0, (a.against, ref_path, False))
    rows = []
    load_start = os.getloadavg()
    print(f"{'tree':>10} {'GPUs':>5} {'spans':>9} | {'simulate s':>10} {'median':>7} {'slowest':>7} {'cold s':>7} "
          f"{'peak MB':>8} {'import MB':>9} | {'CLI s':>6} {'CLI MB':>7} | SimPy (pull off; with it, from it)")
    try:
        for n in a.sizes:
            for name, tree, huge in trees:
                if tree == ref_path and n > a.against_max_gpus:
                    continue
                r = {"tree": name, "n_gpus": n, **child(tree, n, a.repeats, n in a.simpy_check, huge)}
                if not a.no_cli and not huge and "error" not in r:
                    r.update(cli(tree, n))
                rows.append(r)
                if "error" in r:
                    print(f"{name:>10} {n:>5} failed: {r['error']}", flush=True)
                    continue
                cli_s = f"{r['cli_s']:>6.2f}" if "cli_s" in r else f"{'-':>6}"
                cli_mb = f"{r['cli_rss_mb']:>7.0f}" if r.get("cli_rss_mb") else f"{'-':>7}"
                print(f"{name:>10} {n:>5} {r['spans']:>9} | {r['simulate_s']:>10.3f} "
                      f"{r.get('simulate_median_s', r['simulate_s']):>7.3f} "
                      f"{r.get('simulate_max_s', r['simulate_s']):>7.3f} "
                      f"{r['simulate_cold_s']:>7.3f} "
                      f"{r['peak_rss_mb']:>8.0f} {r['import_rss_mb']:>9.0f} | {cli_s} {cli_mb} | "
                      f"{_simpy_words(r)}", flush=True)
    finally:
        if ref_path:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", ref_path], capture_output=True)
    save_json(a.out, {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                      "load_avg_start": load_start, "load_avg": os.getloadavg(), "python": platform.python_version(),
                      "against": a.against, "rows": rows}, force=a.force, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
