"""Re-simulate committed validation runs with a sharing law pooled over the runs.

For each commit given, reads that commit's `bench/results/cpu-profile.json` and
`bench/results/validation-quick.json` (git show), simulates every ring case of the
report again with the profile as it is and with its host's laws (forward and backward)
replaced by the median, count by count, of the laws of all the runs given, and prints
the median |makespan error| and the cases within 10% both ways, and each (world size,
pass) group's median error. It asks how much of the run-to-run swing of the error comes
from the law one bench measured, not what law to use: the pooled law is in-sample.

    .venv/bin/python bench/resimulate_law.py 556f71a eb5500d c904fae ... [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hw.config import RunConfig  # noqa: E402
from sim.config import Workload  # noqa: E402
from sim.engine import simulate  # noqa: E402
from sim.errors import RingsimError  # noqa: E402
from sim.profile import profile_from_dict  # noqa: E402

RESULTS = "bench/results"


def _show(commit: str, path: str) -> dict:
    try:
        text = subprocess.run(["git", "show", f"{commit}:{path}"], check=True, capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as e:
        raise RingsimError(f"git show {commit}:{path}: {e.stderr.strip()}") from None
    return json.loads(text)


def pooled_law(profiles: list[dict], name: str) -> list[list[float]]:
    """The median over the profiles of their host's law `name`, count by count."""
    by_k: dict[float, list[float]] = {}
    for p in profiles:
        for k, f in p["contention"]["host"].get(name) or []:
            by_k.setdefault(k, []).append(f)
    return [[k, statistics.median(v)] for k, v in sorted(by_k.items())]


def _makespan(profile, key: str, report: dict) -> float:
    scheme, layout, mask, ws, seq, pass_ = key.split("/")
    s = report["settings"]
    w = Workload(seq=int(seq[3:]), heads=s["heads"], kv_heads=s["kv_heads"], head_dim=s["head_dim"],
                 dtype=s["dtype"], causal=mask == "causal", pass_=pass_)
    cfg = RunConfig(workload=w, world_size=int(ws[2:]), layout=layout, scheme=scheme, warmup=1, repeats=2, seed=0)
    return simulate(cfg.scenario(), profile).makespan_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("commits", nargs="+", help="commits holding a calibration run's profile and ring report")
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    a = ap.parse_args(argv)
    try:
        runs = [(c, _show(c, f"{RESULTS}/cpu-profile.json"), _show(c, f"{RESULTS}/validation-quick.json"))
                for c in a.commits]
    except RingsimError as e:
        print(f"resimulate_law: {e}", file=sys.stderr)
        return 2
    laws = {name: pooled_law([p for _, p, _ in runs], name) for name in ("law", "law_bwd")}
    print("pooled law:", ", ".join(f"{k:g} -> {f:.3f}x" for k, f in laws["law"]),
          "| backward:", ", ".join(f"{k:g} -> {f:.3f}x" for k, f in laws["law_bwd"]))
    rows = []
    for commit, prof, report in runs:
        pooled = copy.deepcopy(prof)
        pooled["contention"]["host"].update(laws)
        pooled["contention"]["concurrency"] = laws["law"]
        own_p, pooled_p = profile_from_dict(prof), profile_from_dict(pooled)
        own, pool, groups = [], [], {}
        for r in report["cases"]:
            m = r["measured_median_s"]
            e_own, e_pool = _makespan(own_p, r["key"], report) / m - 1, _makespan(pooled_p, r["key"], report) / m - 1
            own.append(e_own)
            pool.append(e_pool)
            k = r["key"].split("/")
            groups.setdefault(f"{k[3]} {k[5]}", []).append((e_own, e_pool))
        law = {name: [f for _, f in prof["contention"]["host"].get(name) or []] for name in laws}
        rows.append({"commit": commit, "law": law["law"], "law_bwd": law["law_bwd"],
                     "own": {"median_abs_error": statistics.median(map(abs, own)),
                             "within_10pct": sum(abs(e) <= 0.10 for e in own)},
                     "pooled": {"median_abs_error": statistics.median(map(abs, pool)),
                                "within_10pct": sum(abs(e) <= 0.10 for e in pool)},
                     "groups": {g: [statistics.median(e for e, _ in v), statistics.median(e for _, e in v)]
                                for g, v in sorted(groups.items())},
                     "cases": len(own)})
    print(f"{'commit':8}  {'law 2/3/4':17}  {'bwd 2/3/4':17}  {'own law':>13}  {'pooled law':>13}  groups (own/pooled)")
    for r in rows:
        law = "/".join(f"{f:.2f}" for f in r["law"][1:])
        bwd = "/".join(f"{f:.2f}" for f in r["law_bwd"][1:])
        own = f"{r['own']['median_abs_error']:.1%}, {r['own']['within_10pct']}"
        pool = f"{r['pooled']['median_abs_error']:.1%}, {r['pooled']['within_10pct']}"
        groups = " ".join(f"{g.replace(' ', '')}:{a * 100:+.0f}/{b * 100:+.0f}" for g, (a, b) in r["groups"].items())
        print(f"{r['commit']:8}  {law:17}  {bwd:17}  {own:>13}  {pool:>13}  {groups}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"pooled_law": laws, "runs": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
