"""The whole-step planner's time: `ringsim plan --global-batch` before and after, as commands.

    .venv/bin/python bench/speed/plan.py --before /tmp/plan-before [--repeats 3] [--only NAME]
        [--out bench/results/speed/cpu-2core/plan.json] [--force]

Each plan is run as a command in a subprocess (the interpreter's start and imports
counted), in this tree and in `--before` (a tree of another version, such as a worktree
of main), the two in turn within each repeat so that both see the same load. Printed
and written: per plan and version the median wall-clock time and its range, the median
CPU time of the process (user + system: what the other work on a shared machine does
not add to), the load average around the runs, and whether the two versions print the
same first rows (the count of splits aside). The plans: Llama 3 405B at 128k tokens, 16M
a step, on 128 nodes of 8 H100; Llama 3 70B at 128k, 4M a step, on 32 nodes (docs/step.md's
example); Llama 3 8B at 8k, 2M a step, on 2 nodes; and the 70B plan's whole table
(`--top 0`, every split timed).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402

PLANS = {
    "llama3-405b-128k-16M-128x8": ["--model", "llama3-405b", "--seq", "128k", "--global-batch", "16M",
                                   "--nodes", "128", "--gpus-per-node", "8", "--cluster", "dgx-h100"],
    "llama3-70b-128k-4M-32x8": ["--model", "llama3-70b", "--seq", "128k", "--global-batch", "4M", "--nodes", "32",
                                "--gpus-per-node", "8", "--cluster", "dgx-h100"],
    "llama3-8b-8k-2M-2x8": ["--model", "llama3-8b", "--seq", "8k", "--global-batch", "2M", "--nodes", "2",
                            "--cluster", "dgx-h100"],
    "llama3-70b-128k-4M-32x8-all": ["--model", "llama3-70b", "--seq", "128k", "--global-batch", "4M", "--nodes", "32",
                                    "--gpus-per-node", "8", "--cluster", "dgx-h100", "--top", "0"],
}


def run_once(tree: str, argv: list[str]) -> dict:
    """`ringsim plan ARGV` in `tree`: wall and CPU seconds and what it printed."""
    env = dict(os.environ, PYTHONPATH=tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "sim.cli.main", "plan", *argv], cwd=tree, env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise SystemExit(f"ringsim plan {' '.join(argv)} in {tree} failed: {r.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "stdout": r.stdout}


def rows_of(text: str) -> list[str]:
    """The lines a version's answer is compared on: all but the count of splits (line 2),
    which now says how many were timed and bounded, and the line on those not ranked."""
    lines = text.splitlines()
    return [line for n, line in enumerate(lines) if n != 1 and not line.startswith("not ranked: ")]


def summary(runs: list[dict]) -> dict:
    walls = [r["wall_s"] for r in runs]
    cpus = [r["cpu_s"] for r in runs]
    return {"wall_median_s": statistics.median(walls), "wall_min_s": min(walls), "wall_max_s": max(walls),
            "cpu_median_s": statistics.median(cpus), "wall_s": walls, "cpu_s": cpus}


def report(runs: dict, trees: dict, loads: list[float], out: str, done: int, final: bool, force: bool) -> None:
    """Print (at the end) and write the results of the `done` repeats so far: the first
    write replaces a file already there only with `force`, the later ones this run's own."""
    result = {"machine": cpu_host(), "repeats": done, "load_average_1min": {"min": min(loads), "max": max(loads)},
              "trees": {v: os.path.realpath(t) for v, t in trees.items()}, "plans": {}}
    say = print if final else (lambda *x, **k: None)
    say(f"\n{'plan':30} {'version':8} {'wall median':>12} {'wall range':>17} {'CPU median':>11} {'same rows':>10}")
    for name in runs:
        entry = {"argv": PLANS[name]}
        for version in trees:
            s = summary(runs[name][version])
            same = None
            if version == "after" and "before" in trees:
                same = all(rows_of(x["stdout"]) == rows_of(runs[name]["before"][0]["stdout"])
                           for x in runs[name]["after"])
                s["same_rows_as_before"] = same
            entry[version] = s
            say(f"{name:30} {version:8} {s['wall_median_s']:11.1f}s {s['wall_min_s']:7.1f}-{s['wall_max_s']:.1f} s "
                f"{s['cpu_median_s']:10.1f}s {'' if same is None else ('yes' if same else 'NO'):>10}")
        if "before" in trees:
            entry["speedup_wall_median"] = entry["before"]["wall_median_s"] / entry["after"]["wall_median_s"]
        result["plans"][name] = entry
    say(f"load average (1 min) during the runs: {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores")
    save_json(out, result, force=force or done > 1, indent=2)
    say(f"wrote {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=None, help="a tree of the version to compare with (a worktree of main)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", action="append", choices=sorted(PLANS), help="only these plans")
    ap.add_argument("--out", default=str(RESULTS / "speed" / cpu_host() / "plan.json"))
    add_force(ap)
    a = ap.parse_args()
    keep_results("plan", a.out, force=a.force, make_folders=True)
    names = a.only or list(PLANS)
    trees = {"after": ROOT, **({"before": a.before} if a.before else {})}
    runs: dict[str, dict[str, list[dict]]] = {n: {v: [] for v in trees} for n in names}
    loads = [os.getloadavg()[0]]
    for rep in range(a.repeats):
        for name in names:
            for version, tree in trees.items():
                r = run_once(tree, PLANS[name])
                runs[name][version].append(r)
                print(f"  {rep + 1}/{a.repeats} {name} {version}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU",
                      file=sys.stderr, flush=True)
                loads.append(os.getloadavg()[0])
        report(runs, trees, loads, a.out, rep + 1, final=rep + 1 == a.repeats, force=a.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
