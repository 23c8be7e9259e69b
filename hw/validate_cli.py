"""`ringsim validate`: measure the real kernel over a matrix of cases (hw.launch),
simulate the same cases on a calibrated profile, and report the errors (hw.validate).
Each finished case is written to the report at once; a rerun with the same settings
resumes where the last one stopped. torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from typing import Any

from sim.errors import RingsimError
from sim.trace import read_json, write_json


def register(sub) -> None:
    v = sub.add_parser("validate", help="measure the real kernel and compare the simulator's prediction")
    v.add_argument("--profile", required=True, metavar="PROFILE.json",
                   help="calibrated from separate microbenchmarks (`ringsim calibrate`)")
    v.add_argument("--quick", action="store_true",
                   help="the quick matrix: forward, world sizes 2-4, two sizes (minutes on 2 cores)")
    v.add_argument("--seqs", type=int, nargs="+", default=None, help="sequence lengths")
    v.add_argument("--world-sizes", type=int, nargs="+", default=None, help="(default 2 3 4)")
    v.add_argument("--passes", nargs="+", choices=["fwd", "bwd", "fwdbwd"], default=None)
    v.add_argument("--heads", type=int, default=8)
    v.add_argument("--kv-heads", type=int, default=8)
    v.add_argument("--head-dim", type=int, default=64)
    v.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    v.add_argument("--warmup", type=int, default=1, help="untimed runs per case (default 1)")
    v.add_argument("--repeats", type=int, default=5, help="measured runs per case (default 5)")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--out", metavar="REPORT.json", default=None,
                   help="report, written after every case; an unfinished one with the same settings resumes")
    v.add_argument("--markdown", metavar="REPORT.md", default=None, help="also write a Markdown table")
    v.add_argument("--force", action="store_true", help="start over even if --out holds other results")
    v.add_argument("--json", action="store_true", help="print the report as one JSON object")
    v.add_argument("--max-median-error", type=float, default=None,
                   help="exit 1 if the median |makespan error| exceeds this fraction")
    v.add_argument("--max-case-error", type=float, default=None,
                   help="exit 1 if any case is outside its measured [min, max] and off by more than this fraction")
    v.set_defaults(func=cmd_validate)




def _settings(a: argparse.Namespace, cases, profile_path: str) -> dict[str, Any]:
    with open(profile_path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return {"cases": [c.key for c in cases], "warmup": a.warmup, "repeats": a.repeats,
            "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim, "dtype": a.dtype,
            "seed": a.seed, "profile_sha256": digest}


def cmd_validate(a: argparse.Namespace) -> int:
    from sim.config import Scenario, Workload
    from sim.engine import simulate
    from sim.profile import load_profile
    from hw.validate import compare_case, markdown, matrix

    profile = load_profile(a.profile)
    if a.repeats < 2:
        raise RingsimError("--repeats must be at least 2 to report a spread")
    if a.warmup < 0:
        raise RingsimError("--warmup must be non-negative")
    cases = matrix(quick=a.quick, seqs=a.seqs, passes=a.passes, world_sizes=a.world_sizes)
    for c in cases:  # fail on a bad size before measuring anything
        Scenario(workload=Workload(seq=c.seq, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
                                   dtype=a.dtype, causal=c.causal, pass_=c.pass_),
                 n_gpus=c.world_size, layout=c.layout)
    settings = _settings(a, cases, a.profile)
    rows: dict[str, dict] = {}
    resumed = False
    if a.out and os.path.exists(a.out) and not a.force:
        old = read_json(a.out, what="report")
        if not isinstance(old, dict) or old.get("settings") != settings:
            raise RingsimError(f"{a.out} holds a report with other settings; pass --force to start over")
        rows = {r["key"]: r for r in old.get("cases", []) if isinstance(r, dict) and "key" in r}
        resumed = True
        if rows:
            print(f"resuming: {len(rows)} of {len(cases)} cases already in {a.out}", file=sys.stderr)

    if a.markdown and os.path.exists(a.markdown) and not (a.force or resumed):
        raise RingsimError(f"{a.markdown} exists; pass --force to overwrite it")

    from hw.config import RunConfig
    from hw.launch import run_config

    measured_on: dict[str, Any] = {}
    started = time.perf_counter()
    for i, case in enumerate(cases, 1):
        if case.key in rows:
            continue
        w = Workload(seq=case.seq, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
                     dtype=a.dtype, causal=case.causal, pass_=case.pass_)
        cfg = RunConfig(workload=w, world_size=case.world_size, layout=case.layout,
                        warmup=a.warmup, repeats=a.repeats, seed=a.seed)
        _, traces = run_config(cfg)
        measured_on = dict(traces[0].hardware)
        simulated = simulate(Scenario(workload=w, n_gpus=case.world_size, layout=case.layout), profile)
        row = compare_case(case, traces, simulated)
        row["key"] = case.key
        rows[case.key] = row
        print(f"[{i}/{len(cases)}] {case.key}: measured {row['measured_median_s'] * 1e3:.1f} ms "
              f"(min {row['measured_min_s'] * 1e3:.1f}, max {row['measured_max_s'] * 1e3:.1f}, "
              f"cv {row['measured_cv']:.1%}), simulated {row['simulated_s'] * 1e3:.1f} ms "
              f"({row['error']:+.1%})  [{time.perf_counter() - started:.0f} s]", file=sys.stderr, flush=True)
        if a.out:
            write_json(a.out, _report(a, settings, cases, rows, measured_on), overwrite=True)
    report = _report(a, settings, cases, rows, measured_on)
    if a.out:
        write_json(a.out, report, overwrite=True)
    if a.markdown:
        _write_text(a.markdown, markdown(report), overwrite=True)  # checked above
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(markdown(report))
    s = report["summary"]
    failed = []
    if a.max_median_error is not None and s["median_abs_error"] > a.max_median_error:
        failed.append(f"median |error| {s['median_abs_error']:.1%} > {a.max_median_error:.1%}")
    if a.max_case_error is not None:
        bad = [r["key"] for r in report["cases"]
               if not r["within_range"] and r["abs_error"] > a.max_case_error]
        if bad:
            failed.append(f"{len(bad)} cases off by more than {a.max_case_error:.1%}: {', '.join(bad)}")
    for f in failed:
        print(f"ringsim: validation failed: {f}", file=sys.stderr)
    return 1 if failed else 0


def _report(a, settings, cases, rows, measured_on) -> dict[str, Any]:
    from hw.validate import summarize

    ordered = [rows[c.key] for c in cases if c.key in rows]
    summary = summarize(ordered, max_case_error=a.max_case_error or 0.10)
    return {"settings": settings, "profile": a.profile, "measured_on": measured_on or {},
            "warmup": a.warmup, "repeats": a.repeats, "complete": len(ordered) == len(cases),
            "summary": summary, "median_abs_error": summary.get("median_abs_error"),
            "cases": ordered}


def _write_text(path: str, text: str, *, overwrite: bool) -> None:
    if os.path.exists(path) and not overwrite:
        raise RingsimError(f"{path} exists; pass --force to overwrite it")
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise RingsimError(f"cannot write {path}: {e}") from None
