"""Sweep throughput in-process and on Dask, and `ringsim plan` on the issue's two questions.

    .venv/bin/python bench/speed/sweep_throughput.py [--configs 480] [--repeats 2]
        [--out bench/results/speed/cpu-2core/sweep-throughput.json] [--skip-plan] [--force]

Throughput: the same 64-GPU configurations (8 nodes of 8 H100 on NDR, Llama-3-70B
attention: every scheme x ring layout x forward / forward+backward x sequence lengths)
swept into a fresh Parquet file in this process, on a local Dask cluster of one worker
and of two (one thread each); the cluster's start is timed apart and not counted in the
rate. Dask's overhead per configuration = (1-worker time - in-process time) / configs.
Each mode's best of --repeats. The machine's load average is printed: other work on
the cores lowers the rates.

Plan: `ringsim plan` for Llama-3-70B at 1M tokens on 8 x 8 H100 with NDR, and Llama-3-8B
at 128k on one 8-GPU node, timed as a command (interpreter start included); then each
plan's top candidate is run alone with its `ringsim simulate` command and compared.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402

PLANS = {
    "llama3-70b-1M-8x8-h100-ndr": ["--model", "llama3-70b", "--seq", "1M", "--nodes", "8", "--gpus-per-node", "8",
                                   "--gpu", "H100-SXM", "--link", "nvlink4", "--inter-link", "ib-ndr"],
    "llama3-8b-128k-1x8-h100": ["--model", "llama3-8b", "--seq", "128k", "--nodes", "1", "--gpus-per-node", "8",
                                "--gpu", "H100-SXM", "--link", "nvlink4"],
}


def spec_dict(n_configs: int) -> dict:
    per_seq = 4 * 3 * 2
    seqs = [16384 * (4 + i) for i in range(max(1, -(-n_configs // per_seq)))]
    return {"gpus": 64, "cluster": "dgx-h100", "heads": 64, "kv-heads": 8, "seq": seqs,
            "scheme": ["ring", "allgather", "ulysses", "hybrid"], "layout": ["contiguous", "striped", "zigzag"],
            "pass": ["fwd", "fwdbwd"]}


def ringsim() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "ringsim")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "sim.cli.main"]


def time_mode(configs, workers: int | None, tmp: str) -> dict:
    """One sweep into a fresh file: in-process when workers is None."""
    from sim.planning.sweep import WORKER_CONFIG, Runner, sweep

    out = os.path.join(tmp, f"r-{workers}.parquet")
    if workers is None:
        c0, t0 = cpu_s(), time.perf_counter()
        r = sweep(configs, out, fresh=True, quiet=True)
        return {"wall_s": time.perf_counter() - t0, "start_s": 0.0, "failed": r.failed, "cpu_s": cpu_s() - c0}
    import logging

    import dask
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    with dask.config.set(WORKER_CONFIG):          # as `ringsim sweep` starts one
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
    client = Client(cluster)
    client.run(lambda: __import__("sim.planning.sweep") and None)      # imports done before the clock starts
    start = time.perf_counter() - t0
    try:
        w0, c0, t0 = sum(client.run(cpu_s).values()), cpu_s(), time.perf_counter()
        r = sweep(configs, out, fresh=True, quiet=True, runner=Runner(client=client))
        wall = time.perf_counter() - t0
        cpu = cpu_s() - c0 + sum(client.run(cpu_s).values()) - w0
    finally:
        client.close()
        cluster.close()
    return {"wall_s": wall, "start_s": start, "failed": r.failed, "cpu_s": cpu}


def cpu_s() -> float:
    """CPU seconds of this process so far (all its threads)."""
    import resource

    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def per_config_times(configs) -> dict:
    """Each configuration's simulate time in this process (which one dominates?)."""
    from sim.planning.sweep import simulate_config

    times = []
    for c in configs:
        t0 = time.perf_counter()
        simulate_config(c.argv)
        times.append((time.perf_counter() - t0, c.command))
    ts = sorted(t for t, _ in times)
    worst = max(times)
    return {"median_s": statistics.median(ts), "p95_s": ts[int(0.95 * (len(ts) - 1))], "max_s": worst[0],
            "max_command": worst[1], "sum_s": sum(ts), "share_of_slowest": worst[0] / sum(ts)}


def run_plan(name: str, argv: list[str], path: str, force: bool) -> dict:
    """Run and time one plan, and write its table to `path` (replacing a file there only
    with `force`)."""
    from sim.files import write_text

    cmd = ringsim() + ["plan", *argv, "--top", "5"]
    t0 = time.perf_counter()
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True, check=True).stdout)
    wall_json = time.perf_counter() - t0
    write_text(path, f"$ ringsim plan {shlex.join(argv)} --top 5\n{text}", overwrite=force)
    top = data["candidates"][0]
    alone = json.loads(subprocess.run(ringsim() + shlex.split(top["command"])[1:] + ["--json"],
                                      capture_output=True, text=True, check=True).stdout)
    same = (alone["makespan_s"] == top["makespan_s"]
            and max(r["peak_mem_bytes"] for r in alone["ranks"]) == top["attention_mem_bytes"]
            and alone["efficiency"] == top["efficiency"])
    return {"argv": argv, "wall_s": wall, "wall_json_s": wall_json, "top": top, "text": text,
            "top_alone": {"makespan_s": alone["makespan_s"], "efficiency": alone["efficiency"],
                          "peak_mem_bytes": max(r["peak_mem_bytes"] for r in alone["ranks"])},
            "top_reproduced": same}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", type=int, default=480, help="64-GPU configurations per sweep (default 480)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per mode, best kept (default 2)")
    ap.add_argument("--out", default=str(RESULTS / "speed" / cpu_host() / "sweep-throughput.json"),
                    help="the JSON; each plan's table goes beside it as plan-NAME.txt")
    ap.add_argument("--skip-plan", action="store_true")
    add_force(ap)
    a = ap.parse_args()
    # every file this run writes is named now: the JSON and, beside it, each plan's table
    outdir = os.path.dirname(os.path.abspath(a.out))
    plan_paths = {} if a.skip_plan else {name: os.path.join(outdir, f"plan-{name}.txt") for name in PLANS}
    keep_results("sweep_throughput", a.out, *plan_paths.values(), force=a.force, make_folders=True)

    from sim.planning.spec import Spec

    configs = list(Spec.from_dict(spec_dict(a.configs)).configs())[: a.configs]
    n = len(configs)
    load_before = os.getloadavg()
    print(f"{n} configurations of 64 GPUs; load average {load_before[0]:.2f} {load_before[1]:.2f} "
          f"{load_before[2]:.2f}; {os.cpu_count()} cores", flush=True)
    modes = {"in-process": None, "dask, 1 worker": 1, "dask, 2 workers": 2}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):      # interleaved, so that a burst of other work hits every mode alike
            for name, workers in modes.items():
                r = time_mode(configs, workers, tmp)
                if name not in results or r["wall_s"] < results[name]["wall_s"]:
                    results[name] = r
                print(f"  {name}: {r['wall_s']:.2f} s (start {r['start_s']:.2f} s)", flush=True)
    base, one, two = (results[m]["wall_s"] for m in modes)
    print()
    print(f"{'mode':<18}{'configs':>8}{'sweep s':>10}{'configs/s':>11}{'vs 1 worker':>13}"
          f"{'CPU ms/config':>15}{'cluster start s':>17}")
    for name, r in results.items():
        print(f"{name:<18}{n:>8}{r['wall_s']:>10.2f}{n / r['wall_s']:>11.1f}{one / r['wall_s']:>12.2f}x"
              f"{r['cpu_s'] / n * 1e3:>15.2f}{r['start_s']:>17.2f}")
    overhead = (one - base) / n
    cpu_overhead = (results["dask, 1 worker"]["cpu_s"] - results["in-process"]["cpu_s"]) / n
    print(f"Dask overhead per configuration (1 worker - in-process): wall {overhead * 1e3:.2f} ms, "
          f"CPU {cpu_overhead * 1e3:.2f} ms (all processes); 2 workers / 1 worker: {one / two:.2f}x")
    times = per_config_times(configs)
    print(f"simulate per configuration in-process: median {times['median_s'] * 1e3:.1f} ms, "
          f"p95 {times['p95_s'] * 1e3:.1f} ms, max {times['max_s'] * 1e3:.1f} ms "
          f"({times['share_of_slowest']:.1%} of the total): {times['max_command']}")
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")

    plans = {}
    if not a.skip_plan:
        for name, argv in PLANS.items():
            p = run_plan(name, argv, plan_paths[name], a.force)
            plans[name] = {k: v for k, v in p.items() if k != "text"}
            print(f"\n$ ringsim plan {shlex.join(argv)}   ({p['wall_s']:.2f} s; --json {p['wall_json_s']:.2f} s; "
                  f"top candidate reproduced by `ringsim simulate`: {p['top_reproduced']})")
            print(p["text"])
    save_json(a.out, {"configs": n, "cores": os.cpu_count(), "load_before": load_before, "load_after": load_after,
                      "modes": {k: {**v, "configs_per_s": n / v["wall_s"]} for k, v in results.items()},
                      "dask_overhead_per_config_s": overhead, "dask_cpu_overhead_per_config_s": cpu_overhead,
                      "two_over_one": one / two,
                      "per_config": times, "plans": plans}, force=a.force, indent=2)
    print(f"written {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
