"""Check that the whole-step planner ranks as another version does, and that its bounds are bounds.

`ringsim plan --global-batch` asked for its first K (the default 5) times only the splits
whose lower bound could still place them there (sim.training.plan). For each plan below,
this compares with the other version's (`--before`, a tree of it, such as a worktree of
main):

- the whole table (`--top 0 --json`, every split timed): every row and every number equal
  (JSON floats round-trip exactly, so equal is bit for bit), and the counts of splits
  considered, not possible and not tried;
- the first K (`--top K --json`, K of 1, 5 and 20): the other version's first K rows;
- the text of the default command: every line but the count of splits (which now says
  how many were timed and how many were bounded instead);
- every split's bounds (sim.training.step.step_bound_s before its attention is simulated,
  StepParts.bound_s before its pipeline is played) at most its step, in this tree, and
  every split the first K leave out (`not_ranked`) outside the whole table's first K.

The other version's answers are kept under --cache (a plan over 1,024 GPUs takes minutes
on that version).

    .venv/bin/python bench/checks/plan_ranking.py --before /tmp/plan-before [--quick] [--cache DIR]

Exits 1 on the first difference, naming the plan and the row; 0 when all agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

PLANS = {
    # the two plans the planner's speed is measured on (bench/speed/plan.py)
    "llama3-405b-128k-16M-128x8": ["--model", "llama3-405b", "--seq", "128k", "--global-batch", "16M",
                                   "--nodes", "128", "--gpus-per-node", "8", "--cluster", "dgx-h100"],
    "llama3-70b-128k-4M-32x8": ["--model", "llama3-70b", "--seq", "128k", "--global-batch", "4M", "--nodes", "32",
                                "--gpus-per-node", "8", "--cluster", "dgx-h100"],
    "llama3-70b-128k-4M-32x8-fp8": ["--model", "llama3-70b", "--seq", "128k", "--global-batch", "4M", "--nodes", "32",
                                    "--gpus-per-node", "8", "--cluster", "dgx-h100", "--fp8"],
    # the plans tests/sim/training/test_step.py, tests/sim/test_reasons.py and
    # tests/dashboard/test_explain_i18n.py make
    "llama3-8b-8k-512k-8x8": ["--model", "llama3-8b", "--seq", "8192", "--global-batch", str(64 * 8192),
                              "--nodes", "8", "--gpus-per-node", "8", "--cluster", "dgx-h100"],
    "llama3-8b-8k-128k-1x4": ["--model", "llama3-8b", "--seq", "8k", "--global-batch", str(1 << 17), "--nodes", "1",
                              "--gpus-per-node", "4"],
    "llama3-8b-8k-2M-2x8": ["--model", "llama3-8b", "--seq", "8k", "--global-batch", str(1 << 21), "--nodes", "2"],
    # few splits fit: the first K are filled with splits that do not
    "llama3-70b-128k-1M-1x8": ["--model", "llama3-70b", "--seq", "128k", "--global-batch", "1M", "--nodes", "1",
                               "--cluster", "dgx-h100"],
    "llama3-405b-128k-2M-4x8": ["--model", "llama3-405b", "--seq", "128k", "--global-batch", "2M", "--nodes", "4",
                                "--cluster", "dgx-h100"],
}
QUICK_SKIPS = ("llama3-405b-128k-16M-128x8",)
TOPS = (1, 5, 20)
COUNTS = ("considered", "refused", "skipped")


def run(tree: str, argv: list[str]) -> str:
    """`ringsim plan ARGV` in `tree`, its standard output."""
    env = dict(os.environ, PYTHONPATH=tree)
    r = subprocess.run([sys.executable, "-m", "sim.cli.main", "plan", *argv], cwd=tree, env=env,
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"ringsim plan {' '.join(argv)} in {tree} failed: {r.stderr.strip()}")
    return r.stdout


def before(tree: str, cache: str, argv: list[str]) -> str:
    """The other version's answer, from the cache where it is there."""
    key = hashlib.sha256(json.dumps([os.path.realpath(tree), git_head(tree), argv]).encode()).hexdigest()[:20]
    path = os.path.join(cache, key + ".out")
    if os.path.exists(path):
        with open(path) as f:
            return f.read()
    out = run(tree, argv)
    os.makedirs(cache, exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(out)
    os.replace(path + ".tmp", path)
    return out


def git_head(tree: str) -> str:
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True)
    return r.stdout.strip()


def fail(plan: str, what: str) -> None:
    print(f"DIFFERS: {plan}: {what}")
    raise SystemExit(1)


def first_difference(a: list[dict], b: list[dict]) -> str:
    for n, (x, y) in enumerate(zip(a, b)):
        if x != y:
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            return f"row {n + 1} differs in {', '.join(keys)}"
    return f"{len(a)} rows against {len(b)}"


SPLIT = ("tp", "cp", "pp", "dp", "zero", "recompute", "fp8", "interleave", "scheme", "layout", "tp_overlap")
"""What names a split (a plan's micro-batches follow from its DP degree)."""


def split_key(c: dict) -> tuple:
    return tuple(c["parallel"][k] for k in SPLIT)


def check_bounds(plan: str, argv: list[str], table: list[dict]) -> int:
    """Every split of the whole table: its two bounds at most its step (in this tree)."""
    from sim.cli.main import build_parser
    from sim.cli.plan import request_from_args
    from sim.training.plan import MARGIN, request_hardware
    from sim.training.step import Parallel, StepRequest, step_bound_s, step_parts
    from sim.units import parse_count

    a = build_parser().parse_args(["plan", *argv])
    req = request_from_args(a)
    hardware, _ = request_hardware(req)
    seq, batch = parse_count(a.seq, "seq"), parse_count(a.global_batch, "global-batch")
    for c in table:
        par = Parallel(**{k: c["parallel"][k] for k in SPLIT})
        r = StepRequest(model=req.model, seq=seq, global_batch=batch, parallel=par, hardware=hardware)
        step = c["step_s"]
        for name, bound in (("step_bound_s", step_bound_s(r)), ("StepParts.bound_s", step_parts(r).bound_s())):
            if bound > step * (1 + MARGIN):
                fail(plan, f"{name} {bound!r} above the step {step!r} of {c['parallel']}")
    return len(table)


def check(plan: str, argv: list[str], tree: str, cache: str) -> dict:
    t0 = time.perf_counter()
    old = json.loads(before(tree, cache, [*argv, "--top", "0", "--json"]))
    new = json.loads(run(ROOT, [*argv, "--top", "0", "--json"]))
    for k in COUNTS:
        if old[k] != new[k]:
            fail(plan, f"{k}: {old[k]} before, {new[k]} now")
    if old["candidates"] != new["candidates"]:
        fail(plan, "the whole table: " + first_difference(old["candidates"], new["candidates"]))
    if new["fit"] != sum(c["fits"] for c in old["candidates"]) or new["not_ranked"]:
        fail(plan, "the whole table's count of fitting splits, or a split left unranked")
    table = old["candidates"]
    ident = [split_key(c) for c in table]
    bounded = 0
    for k in TOPS:
        got = json.loads(run(ROOT, [*argv, "--top", str(k), "--json"]))
        if got["candidates"] != table[:k]:
            fail(plan, f"--top {k}: " + first_difference(table[:k], got["candidates"]))
        if any(got[c] != old[c] for c in COUNTS) or got["fit"] != new["fit"]:
            fail(plan, f"--top {k}: the counts of splits")
        if len(got["candidates"]) + len(got["not_ranked"]) + got["refused"] + got["skipped"] != got["considered"]:
            fail(plan, f"--top {k}: timed, not ranked, not possible and not tried do not add up")
        first = set(ident[:k])
        where = {s: n for n, s in enumerate(ident)}
        for c in got["not_ranked"]:
            s = split_key(c)
            if s in first:
                fail(plan, f"--top {k}: {c['parallel']} left unranked, but it is among the first {k}")
            row = table[where[s]] if s in where else None
            if row is not None and c["step_at_least_s"] is not None and c["step_at_least_s"] > row["step_s"] * (1 + 1e-9):
                fail(plan, f"--top {k}: {c['parallel']} bounded at {c['step_at_least_s']!r}, its step is {row['step_s']!r}")
        bounded = max(bounded, len(got["not_ranked"]))
    old_text = before(tree, cache, argv).splitlines()
    new_text = [line for line in run(ROOT, argv).splitlines() if not line.startswith("not ranked: ")]
    if len(old_text) != len(new_text) or any(x != y for n, (x, y) in enumerate(zip(old_text, new_text)) if n != 1):
        fail(plan, "the default command's text")
    n = check_bounds(plan, argv, table)
    return {"plan": plan, "rows": len(table), "fit": new["fit"], "bounds_checked": n,
            "not_ranked_at_most": bounded, "seconds": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a tree of the version to compare with (a worktree of main)")
    ap.add_argument("--cache", default="/tmp/plan-ranking-before", help="where its answers are kept")
    ap.add_argument("--quick", action="store_true", help=f"leave out {', '.join(QUICK_SKIPS)}")
    ap.add_argument("--plan", action="append", choices=sorted(PLANS), help="only these plans")
    a = ap.parse_args()
    names = a.plan or [p for p in PLANS if not (a.quick and p in QUICK_SKIPS)]
    print(f"{'plan':30} {'rows':>6} {'fit':>6} {'bounds':>7} {'unranked':>9} {'s':>7}")
    for name in names:
        r = check(name, PLANS[name], a.before, a.cache)
        print(f"{r['plan']:30} {r['rows']:6,} {r['fit']:6,} {r['bounds_checked']:7,} {r['not_ranked_at_most']:9,} "
              f"{r['seconds']:7.1f}", flush=True)
    print(f"same ranking: {len(names)} plans, whole tables and first {', '.join(map(str, TOPS))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
