"""Re-simulate committed validation runs with a sharing law pooled over the runs.

For each commit given, reads that commit's CPU profile and ring validation report
(bench/experiments/committed_runs.py: git show), simulates every ring case of the
report again with the profile as it is and with its host's laws (forward and backward)
replaced by the median, count by count, of the laws of all the runs given, and prints
the median |makespan error| and the cases within 10% both ways, and each (GPU count,
pass) group's median error. It asks how much of the run-to-run swing of the error comes
from the law one bench measured, not what law to use: the pooled law is in-sample.

With `--plays N` it compares, on each run's own profile, one play at the mean rate with
the median of N plays seeded with the host's spread (`ringsim validate --replays N`);
"within" then counts the cases inside their measured [min, max] or within 10%, as the
validation report does.

With `--placement N` it compares, on each run's own profile and by the median of N
seeded plays each, the host's cores serving the computes evenly, the computes placed on
cores (moved to an idle core when loads differ by two) and the computes held on the
core they started on (sim.hardware.contention.Host.placement), counted the same way.

With `--protocol N` it compares, on each run's own profile and by the median of N
seeded plays each, playing the ring without and with gloo's point-to-point protocol (a
send posted after its receiver posted the receive holds the posting rank's compute,
sim.engine.players.times_simpy), counted the same way.

    .venv/bin/python bench/experiments/resimulate_law.py 556f71a eb5500d c904fae ... [--json out.json [--force]]
    .venv/bin/python bench/experiments/resimulate_law.py --plays 31 556f71a ... [--json out.json [--force]]
    .venv/bin/python bench/experiments/resimulate_law.py --placement 31 556f71a ... [--json out.json [--force]]
    .venv/bin/python bench/experiments/resimulate_law.py --protocol 31 556f71a ... [--json out.json [--force]]
    .venv/bin/python bench/experiments/resimulate_law.py --weight 31 556f71a ... [--json out.json [--force]]
    .venv/bin/python bench/experiments/resimulate_law.py --schemes 31 a4be431 ... [--json out.json [--force]]

With `--weight N` it compares, by the median of N seeded plays each, each run's own
profile (its transfers at the law's rate) with the same profile whose transfer cores,
transfer weight and in-flight slowdown are fitted again to its own ring-conditions
points (sim.calibration.calibrate.fit_transfer_cores, from the profile's report: the microbenchmarks
only, nothing of the validation), counted the same way.

With `--schemes N` it reads each commit's all-gather and Ulysses report instead and sets
the predictions it committed beside the same cases simulated again, by the median of N
seeded plays, with the code as it now stands, on the run's own profile with its
collectives fitted again by the code as it stands to the run's own microbenchmarks (those
of the same commit): each scheme's median |makespan error|, cases inside their measured
[min, max] or within 10%, and per-step median (the median over cases of each case's).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import add_force, keep_results  # noqa: E402
from bench.experiments.committed_runs import committed_file  # noqa: E402
from hw.config import RunConfig  # noqa: E402
from sim.calibration.validation import row_gpus  # noqa: E402
from sim.engine.play import simulate  # noqa: E402
from sim.errors import RingsimError  # noqa: E402
from sim.files import write_json
from sim.hardware.profile import profile_from_dict  # noqa: E402
from sim.scenario.config import Workload  # noqa: E402


def pooled_law(profiles: list[dict], name: str) -> list[list[float]]:
    """The median over the profiles of their host's law `name`, count by count."""
    by_k: dict[float, list[float]] = {}
    for p in profiles:
        for k, f in p["contention"]["host"].get(name) or []:
            by_k.setdefault(k, []).append(f)
    return [[k, statistics.median(v)] for k, v in sorted(by_k.items())]


def _scenario(row: dict, settings: dict):
    """The scenario of one case of a validation report, from its row and the report's settings."""
    w = Workload(seq=row["seq"], heads=settings["heads"], kv_heads=settings["kv_heads"],
                 head_dim=settings["head_dim"], dtype=settings["dtype"], causal=row["causal"], pass_=row["pass"])
    return RunConfig(workload=w, n_gpus=row_gpus(row), layout=row["layout"], scheme=row["scheme"],
                     warmup=1, repeats=2, seed=0).scenario()


def _score(report: dict, variants: dict[str, tuple]) -> dict[str, dict]:
    """Each variant's (profile, plays) prediction of every case of a validation report, by
    the median of its plays, scored as the report does: median |makespan error|, median
    signed error, cases inside their measured [min, max] or within 10%, and the median
    over cases of each case's median |step error| against the report's measured steps."""
    from sim.calibration.validation import simulate_replays
    from sim.trace.metrics import step_durations

    errors: dict[str, list[float]] = {name: [] for name in variants}
    step_errors: dict[str, list[float]] = {name: [] for name in variants}
    within = {name: 0 for name in variants}
    for r in report["cases"]:
        sc = _scenario(r, report["settings"])
        m = r["measured_median_s"]
        for name, (profile, n) in variants.items():
            plays = simulate_replays(sc, profile, n)
            sim = statistics.median(t.makespan_s for t in plays)
            errors[name].append(sim / m - 1)
            within[name] += abs(sim / m - 1) <= 0.10 or r["measured_min_s"] <= sim <= r["measured_max_s"]
            per_play = [step_durations(t) for t in plays]
            case_steps = []
            for st in r.get("steps") or []:
                vals = [d[st["rank"], st["step"]] for d in per_play if (st["rank"], st["step"]) in d]
                if vals and st["measured_s"] > 0:
                    case_steps.append(abs(statistics.median(vals) / st["measured_s"] - 1))
            if case_steps:
                step_errors[name].append(statistics.median(case_steps))
    return {name: {"median_abs_error": statistics.median(map(abs, errors[name])),
                   "median_error": statistics.median(errors[name]), "within": within[name],
                   "step_median_abs_error": statistics.median(step_errors[name]) if step_errors[name] else None}
            for name in variants}


def _plays(runs: list[tuple[str, dict, dict]], n: int) -> list[dict]:
    """One play against the median of `n` seeded plays, on each run's own profile."""
    rows = []
    for commit, prof, report in runs:
        profile = profile_from_dict(prof)
        rows.append({"commit": commit, "cases": len(report["cases"]),
                     **_score(report, {"one": (profile, 1), "seeded": (profile, n)})})
    print(f"{'commit':8}  {'one play':>16}  {f'{n} seeded plays':>16}")
    for r in rows:
        print(f"{r['commit']:8}  " + "  ".join(
            f"{r[name]['median_abs_error']:>8.1%}, {r[name]['within']:>2} of {r['cases']}" for name in ("one", "seeded")))
    return rows


def _variants(runs: list[tuple[str, dict, dict]], n: int, variants_of) -> list[dict]:
    """Each run with a host model scored under the variants `variants_of(profile dict)`
    gives (name -> Profile), each by the median of `n` seeded plays, one line per run."""
    rows = []
    for commit, prof, report in runs:
        if not (prof.get("contention") or {}).get("host"):
            continue
        variants = variants_of(prof)
        r = {"commit": commit, "cases": len(report["cases"]),
             **_score(report, {name: (p, n) for name, p in variants.items()})}
        rows.append(r)
        print(f"{commit:8}  " + "  ".join(
            f"{r[name]['median_abs_error']:>6.1%} ({r[name]['median_error']:+6.1%}), {r[name]['within']:>2} of "
            f"{r['cases']}, per-step " + (f"{r[name]['step_median_abs_error']:5.1%}"
                                          if r[name]["step_median_abs_error"] is not None else "  n/a")
            for name in variants), flush=True)
    return rows


def _committed(report: dict) -> dict:
    """A report's own predictions scored as _score scores a variant."""
    errors = [r["error"] for r in report["cases"]]
    steps = [r["step_median_abs_error"] for r in report["cases"] if r.get("step_median_abs_error") is not None]
    return {"median_abs_error": statistics.median(map(abs, errors)), "median_error": statistics.median(errors),
            "within": sum(r["within_range"] or abs(r["error"]) <= 0.10 for r in report["cases"]),
            "step_median_abs_error": statistics.median(steps) if steps else None}


def _schemes(runs: list[tuple[str, dict, dict]], n: int) -> list[dict]:
    """Each run's all-gather and Ulysses cases: the committed predictions against the same
    cases simulated again now (median of `n` seeded plays), per scheme and in all."""
    from sim.calibration.calibrate import calibrate_collectives, collective_records

    rows = []
    print(f"{'commit':8}  {'scheme':9}  {'committed':>40}  {'now':>40}  (median |makespan error| (median "
          f"signed), cases within, per-step median |error|; {n} seeded plays)")
    for commit, prof, report in runs:
        records = collective_records(committed_file(commit, "microbenchmarks.json")[1])
        refit = copy.deepcopy(prof)
        refit["collectives"] = {op: fit.to_dict() for op, fit in calibrate_collectives(records)[0].items()}
        profile = profile_from_dict(refit)
        row = {"commit": commit}
        for scheme in sorted({r["scheme"] for r in report["cases"]}) + ["all"]:
            sub = dict(report, cases=[r for r in report["cases"] if scheme in ("all", r["scheme"])])
            row[scheme] = {"cases": len(sub["cases"]), "committed": _committed(sub),
                           "now": _score(sub, {"now": (profile, n)})["now"]}
            print(f"{commit:8}  {scheme:9}  " + "  ".join(
                f"{v['median_abs_error']:>6.1%} ({v['median_error']:+6.1%}), {v['within']:>2} of "
                f"{len(sub['cases']):>2}, per-step {v['step_median_abs_error']:5.1%}"
                for v in (row[scheme]["committed"], row[scheme]["now"])), flush=True)
        rows.append(row)
    return rows


def _placements(prof: dict) -> dict:
    """Even sharing, computes placed on cores and computes held on their core
    (sim.hardware.contention.Host.placement)."""
    out = {}
    for name in ("even", "cores", "held"):
        d = copy.deepcopy(prof)
        d["contention"]["host"]["placement"] = name
        out[name] = profile_from_dict(d)
    return out


def _protocols(prof: dict) -> dict:
    """The profile without and with gloo's point-to-point protocol (a send posted after
    its receive is written by the posting thread, holding its compute:
    sim.engine.players.times_simpy)."""
    gloo = profile_from_dict(prof)
    # the same profile with its backend unknown: every compute starts on its dependencies
    return {"without": dataclasses.replace(gloo, measured_on=dict(gloo.measured_on, backend=None)), "gloo": gloo}


def _weights(prof: dict) -> dict:
    """The profile as it is, and with its transfers' share of the cores fitted again to
    its ring-conditions points with a transfer weight (sim.hardware.contention.split_cores)."""
    from sim.calibration.calibrate import fit_transfer_cores
    from sim.hardware.contention import Host

    h, points = prof["contention"]["host"], prof["report"]["host"].get("points") or []
    host = Host(cores=h["cores"], threads_per_rank=h["threads_per_rank"], law=tuple(map(tuple, h["law"])))
    x, w, sigma, _ = fit_transfer_cores([{"k": p["processes"], "compute_slowdown": p["compute_slowdown"],
                                          "transfer_slowdown": p["transfer_slowdown"]} for p in points], host)
    weighted = copy.deepcopy(prof)
    weighted["contention"]["host"].update(transfer_cores=x, transfer_weight=w)
    weighted["contention"]["slowdown_in_flight"] = sigma
    print(f"          {x:.2f} cores a transfer and weight {w:.2f} (was {h['transfer_cores']:.2f} and "
          f"{h.get('transfer_weight', 1.0):.2f}), in-flight slowdown {sigma:.3f}", flush=True)
    return {"as committed": profile_from_dict(prof), "weighted": profile_from_dict(weighted)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("commits", nargs="+", help="commits holding a calibration run's profile and ring report")
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON (rewritten as each row comes)")
    add_force(ap)
    ap.add_argument("--plays", type=int, metavar="N",
                    help="compare one play with the median of N seeded plays instead (each run's own profile)")
    ap.add_argument("--placement", type=int, metavar="N",
                    help="compare even sharing with computes placed on cores instead, each by the median of N "
                         "seeded plays (each run's own profile)")
    ap.add_argument("--protocol", type=int, metavar="N",
                    help="compare playing without and with gloo's point-to-point protocol instead, each by "
                         "the median of N seeded plays (each run's own profile)")
    ap.add_argument("--weight", type=int, metavar="N",
                    help="compare each run's own profile with it refitted with a transfer weight instead, each "
                         "by the median of N seeded plays")
    ap.add_argument("--schemes", type=int, metavar="N",
                    help="set each run's committed all-gather and Ulysses predictions beside the same cases "
                         "simulated again now instead, by the median of N seeded plays")
    a = ap.parse_args(argv)
    keep_results("resimulate_law", a.json, force=a.force)
    flags = ("plays", "placement", "protocol", "weight", "schemes")
    for flag in flags:
        if getattr(a, flag) is not None and getattr(a, flag) < 2:
            print(f"resimulate_law: --{flag} must be at least 2", file=sys.stderr)
            return 2
    if sum(getattr(a, flag) is not None for flag in flags) > 1:
        print("resimulate_law: give one of --plays, --placement, --protocol, --weight and --schemes", file=sys.stderr)
        return 2
    report = "validation-allgather-ulysses.json" if a.schemes else "validation-ring.json"
    try:
        runs = [(c, committed_file(c, "profile.json")[1], committed_file(c, report)[1]) for c in a.commits]
    except RingsimError as e:
        print(f"resimulate_law: {e}", file=sys.stderr)
        return 2
    if a.schemes:
        rows = _schemes(runs, a.schemes)
        if a.json:
            write_json(a.json, {"plays": a.schemes, "runs": rows}, overwrite=True)
        return 0
    for flag, names, variants_of in (("weight", ("as committed", "with a transfer weight"), _weights),
                                     ("protocol", ("without the protocol", "with gloo's"), _protocols),
                                     ("placement", ("even", "placed on cores", "held on their core"),
                                      _placements)):
        n = getattr(a, flag)
        if n:
            print(f"{'commit':8}  " + "  ".join(f"{name:<41}" for name in names)
                  + f"  (median |makespan error| (median signed), cases within, per-step median |error|; "
                  f"{n} seeded plays)")
            rows = _variants(runs, n, variants_of)
            if a.json:
                write_json(a.json, {"plays": n, "runs": rows}, overwrite=True)
            return 0
    if a.plays:
        rows = _plays(runs, a.plays)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"plays": a.plays, "runs": rows}, f, indent=2)
        return 0
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
            sc = _scenario(r, report["settings"])
            e_own, e_pool = (simulate(sc, p).makespan_s / m - 1 for p in (own_p, pooled_p))
            own.append(e_own)
            pool.append(e_pool)
            groups.setdefault(f"gpus{row_gpus(r)} {r['pass']}", []).append((e_own, e_pool))
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
