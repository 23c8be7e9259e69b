"""`ringsim validate`: measure the real kernel over a matrix of cases (hw.launch),
simulate the same cases on a calibrated profile, and report the errors (hw.validate).
Cases of one GPU count run in batches on one set of processes (start-up is paid once
a batch), their repeats interleaved (hw.launch.run_configs); with --rounds a batch is
measured in rounds spread over the run (round_order), so that a slow or fast stretch of
the host sets a part of each case's repeats. Each finished batch is written to the
report at once, and a rerun with the same settings resumes where the
last one stopped, keeping what the report says about the machine. On CPU profiles the
host's compute speed is read around every batch (hw.reference) and each case is scored
at it too. The `ringsim` CLI imports this module on every start to register the
command, so the run's modules, the profile's and torch (an optional dependency) are
imported when it runs, not here.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

from hw.kernels import SCHEMES
from hw.validate import (
    GPU_COUNTS,
    STATE_OFF,
    default_schemes,
    markdown,
    matrix,
    summarize,
    ulysses_fits,
)
from sim.calibration.validation import REPLAYS, compare_case, simulate_replays
from sim.errors import RingsimError
from sim.files import check_output, write_json, write_text
from sim.inputs import read_json
from sim.invariants import check_calibration, check_rows
from sim.scenario.config import Workload
from sim.trace.format import Trace
from sim.units import tokens


def register(sub) -> None:
    v = sub.add_parser("validate", help="measure the real kernel and compare the simulator's prediction")
    v.add_argument("--profile", metavar="PROFILE.json",
                   help="calibrated from separate microbenchmarks (`ringsim calibrate`); needed unless --trace")
    v.add_argument("--trace", nargs="+", metavar="PATH", default=None,
                   help="a torch.profiler trace instead (files, a folder of one file per rank, or the table of "
                        "`ringsim trace import --out`); runs nothing. A context-parallel run: find its ring, fit a "
                        "profile to it, and play its configuration on that profile against the measured iterations "
                        "(sim.calibration.from_profiler). A tensor-parallel iteration without attention kernels: "
                        "its shapes read from the GEMMs, the GEMM rate and all-reduce fitted to its own kernels, "
                        "replayed through the step model (sim.profiler.step_replay, docs/step.md)")
    v.add_argument("--profile-out", metavar="FILE", default=None,
                   help="with --trace: write the fitted profile (for `simulate/compare/step/plan --profile`)")
    v.add_argument("--partial", action="store_true", help="with --trace: read the ranks given, though some are missing")
    v.add_argument("--iteration", type=int, default=None,
                   help="with --trace of a tensor-parallel iteration (no ring in it): the ProfilerStep to replay "
                        "(default the last)")
    v.add_argument("--infer", nargs="+", choices=["prefill", "decode"], default=None, metavar="PHASE",
                   help="validate the inference kernels instead (hw.inference_validate): prefill by pass-KV and "
                        "pass-Q at two shares of new tokens, decode merged by all-gather and all-to-all, on --gpus "
                        "(default 2 3) at the contexts --seqs (default 4608), against sim.inference on --profile")
    v.add_argument("--quick", action="store_true",
                   help="the quick matrix: forward at two sizes and forward-backward at the smaller, "
                        "GPU counts 2-4, the ring (under ten minutes on 2 cores); without it fwd, bwd "
                        "and fwdbwd at three sizes, every layout and mask, ring, allgather and ulysses")
    v.add_argument("--seqs", type=tokens, nargs="+", default=None, help="sequence lengths (every pass)")
    v.add_argument("--gpus", type=int, nargs="+", default=None, metavar="N", help="GPU counts (default 2 3 4)")
    v.add_argument("--passes", nargs="+", choices=["fwd", "bwd", "fwdbwd"], default=None,
                   help="(default: fwd fwdbwd with --quick, else fwd bwd fwdbwd)")
    v.add_argument("--schemes", nargs="+", choices=list(SCHEMES), default=None,
                   help="(default: ring with --quick, else all three); allgather runs the zigzag "
                        "layout, ulysses the GPU counts that divide the heads")
    v.add_argument("--heads", type=int, default=8)
    v.add_argument("--kv-heads", type=int, default=8)
    v.add_argument("--head-dim", type=int, default=64)
    v.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    v.add_argument("--warmup", type=int, default=1, help="untimed runs per case (default 1)")
    v.add_argument("--repeats", type=int, default=5, help="measured runs per case (default 5)")
    v.add_argument("--rounds", type=int, default=1, metavar="N",
                   help="measure each batch in N rounds spread evenly over the run, the repeats split "
                        "among them and each round after its own warm-up and host readings: a stretch of "
                        "a minute or two in which the host runs fast or slow then sets a part of a case's "
                        "repeats, not all of them (default 1)")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--replays", type=int, default=1, metavar="N",
                   help="CPU profiles with a measured spread of speeds: predict each case by the median of N "
                        f"plays seeded with it (bench/calibration/calibrate_cpu.sh asks for {REPLAYS}; default 1: "
                        "one play at the mean rate)")
    v.add_argument("--out", metavar="REPORT.json", default=None,
                   help="report, written after every batch of cases; an unfinished one with the same "
                        "settings resumes")
    v.add_argument("--markdown", metavar="REPORT.md", default=None, help="also write a Markdown table")
    v.add_argument("--force", action="store_true", help="start over even if --out holds other results")
    v.add_argument("--json", action="store_true", help="print the report as one JSON object")
    v.add_argument("--reference-s", type=float, default=3.0, metavar="SECONDS",
                   help="CPU profiles: time one of the profile's own blocks for this long before each "
                        "batch of cases and after the last, alone and in two processes at once, and "
                        "report every case's error also at the host's compute speed and sharing of "
                        "that moment (hw.reference); 0: off (default 3)")
    v.add_argument("--remeasure", type=int, default=2, metavar="N",
                   help="with the host read (CPU profiles): measure a batch again, N times at most, "
                        "while the readings around it lie more than 15%% from the profile, in speed or in "
                        "sharing, and keep the attempt read closest to it; every attempt is in the "
                        "report (default 2; 0: never)")
    v.add_argument("--max-median-error", type=float, default=None,
                   help="exit 1 if the median |makespan error| exceeds this fraction")
    v.add_argument("--max-case-error", type=float, default=None,
                   help="exit 1 if any case is outside its measured [min, max] and off by more than this fraction")
    v.set_defaults(func=cmd_validate)


BATCH = 8
"""Cases of one GPU count measured by one set of processes: start-up (seconds at every
spawn) is paid once per batch (once per round of it), and an interrupted run loses at most
one batch (with --rounds, the batches whose rounds are not all in)."""


def round_order(batches: int, rounds: int) -> list[tuple[int, int]]:
    """The order in which the rounds of `batches` batches run: round r of batch i in slot
    i + r * S, S = ceil(batches / rounds), so that a batch's rounds lie S slots apart and
    spread over the whole run; within a slot the later rounds first, so that the batches
    begun earliest are completed (and written) first."""
    step = -(-batches // rounds)
    pairs = [(i, r) for i in range(batches) for r in range(rounds)]
    return sorted(pairs, key=lambda p: (p[0] + p[1] * step, -p[1]))


def split_repeats(repeats: int, rounds: int) -> list[int]:
    """`repeats` split over `rounds` as evenly as they go, the first rounds one more."""
    return [repeats // rounds + (r < repeats % rounds) for r in range(rounds)]


def measure(cfgs: list) -> list[list[Trace]]:
    """The measured traces (one per repeat) of each configuration, on local processes
    that run every configuration in turn (one process group per GPU count)."""
    from hw.launch import run_configs

    return [traces for _, traces in run_configs(cfgs, interleave=True)]


def _settings(a: argparse.Namespace, cases, profile_path: str) -> dict[str, Any]:
    with open(profile_path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return {"cases": [c.key for c in cases], "warmup": a.warmup, "repeats": a.repeats,
            "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim, "dtype": a.dtype,
            "seed": a.seed, "reference_s": a.reference_s, "replays": a.replays, "remeasure": a.remeasure,
            **({"rounds": a.rounds} if a.rounds != 1 else {}), "profile_sha256": digest}


def profile_compute_groups(profile, dtype: str, cases) -> dict[str, str]:
    """Which of the profile's compute groups times each (mask, pass) block the cases
    compute: its own, or a fallback (sim.hardware.profile: backward to forward, diagonal to full)."""
    kinds = sorted({k for c in cases for k in (("fwd", "bwd") if c.pass_ == "fwdbwd" else (c.pass_,))})
    out = {}
    for kind in kinds:
        for mask in ("full", "diagonal"):
            g = profile._group(dtype, mask, kind)   # the lookup the simulator makes
            name = f"{g.dtype}/{g.mask}/{g.kind}"
            out[f"{dtype}/{mask}/{kind}"] = name if (g.mask, g.kind) == (mask, kind) else f"{name} (fallback)"
    return out


def _batches(cases, rows) -> list[list]:
    """The cases still to measure, in order, cut where the GPU count changes or a batch fills."""
    out: list[list] = []
    for c in cases:
        if c.key in rows:
            continue
        if out and out[-1][-1].n_gpus == c.n_gpus and len(out[-1]) < BATCH:
            out[-1].append(c)
        else:
            out.append([c])
    return out


def cmd_validate(a: argparse.Namespace) -> int:
    if a.trace:
        return cmd_validate_trace(a)
    if a.infer:
        from hw.inference_validate import cmd_validate_infer

        return cmd_validate_infer(a, _check_options)
    if a.profile is None:
        raise RingsimError("validate needs --profile PROFILE.json (or --trace PATH to validate on a profiler trace)")
    # the outputs before any work: --out is resumed (read and rewritten), and the
    # Markdown beside a resumed report is rewritten with it
    check_output(a.out, a.force, resumes=True)
    check_output(a.markdown, a.force or bool(a.out and os.path.exists(a.out)))
    # the profile, the run's modules and torch load when the command runs (module docstring)
    from hw.config import RunConfig
    from sim.hardware.profile import load_profile

    profile = load_profile(a.profile)
    kind = profile.measured_on.get("kind", "cpu")
    elsewhere = _elsewhere(profile, kind, a.profile)
    _check_options(a)
    cases = _cases(a)
    # every case's configuration is checked (sizes, layouts, scheme rules) before anything runs
    configs = {c.key: RunConfig(workload=_workload(a, c), n_gpus=c.n_gpus, layout=c.layout,
                                scheme=c.scheme, warmup=a.warmup, repeats=a.repeats, seed=a.seed)
               for c in cases}
    used = profile_compute_groups(profile, a.dtype, cases)
    for block, group in used.items():
        if group.endswith("(fallback)"):
            print(f"profile has no {block} compute measurements: timed from {group}", file=sys.stderr)
    settings = _settings(a, cases, a.profile)
    rows, measured_on, resumed = _resumed(a, settings, len(cases))
    check_output(a.markdown, a.force or resumed)
    if elsewhere:       # the kernel runs here: a profile of another host predicts that host
        print(elsewhere, file=sys.stderr)

    # the report's first save creates it exclusively unless it replaces or resumes one;
    # later saves replace this run's own
    replace = [a.force or resumed]

    def save(measured_on: dict[str, Any]) -> None:
        if a.out:
            write_json(a.out, _report(a, settings, cases, rows, measured_on, used), overwrite=replace[0])
            replace[0] = True

    measured_on = _measure_cases(a, cases, configs, profile, kind, rows, measured_on, save)
    report = _report(a, settings, cases, rows, measured_on, used)
    check_rows(report["cases"], {"profile": a.profile})
    save(measured_on)
    if a.markdown:
        write_text(a.markdown, markdown(report), overwrite=True)  # checked above
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(markdown(report))
    failed = _failures(a, report)
    for f in failed:
        print(f"ringsim: validation failed: {f}", file=sys.stderr)
    return 1 if failed else 0


def cmd_validate_trace(a: argparse.Namespace) -> int:
    """`validate --trace`: the trace's ring replayed on the profile fitted to it (no torch)."""
    from sim.calibration.from_profiler import read_profiled, validate_trace
    from sim.cli.step import print_step_replay
    from sim.profiler.step_replay import is_tensor_parallel_iteration
    from sim.units import fmt_s, table

    for name in ("profile", "out", "markdown"):
        if getattr(a, name) is not None:
            raise RingsimError(f"--{name} does not go with --trace (use --profile-out to keep the fitted profile)")
    check_output(a.profile_out, a.force)
    run = read_profiled(a.trace, partial=a.partial)
    if is_tensor_parallel_iteration(run):
        if a.profile_out:
            raise RingsimError("--profile-out keeps a ring's fitted profile; this trace is a tensor-parallel "
                               "iteration without attention kernels (its fits are printed)")
        return print_step_replay(run, a.iteration, a.json)
    if a.iteration is not None:
        raise RingsimError("--iteration picks the ProfilerStep of a tensor-parallel iteration; a ring's replay "
                           "reads every iteration")
    report, profile = validate_trace(a.trace, partial=a.partial, run=run)
    if a.profile_out:
        check_calibration(profile.report, {"trace": ", ".join(a.trace)})
        profile.save(a.profile_out, overwrite=a.force)    # checked above, published exclusively
        report["profile_out"] = a.profile_out
    if a.json:
        print(json.dumps(report, indent=2))
        return 0
    c, m = report["config"], report["measured"]
    print(f"ring found: {c['n_gpus']} ranks, {c['transport']}, {c['layout']} layout, {c['seq']} tokens "
          f"({c['seq'] // c['n_gpus']} per rank), batch {c['batch']}, {c['heads']}/{c['kv_heads']} heads x "
          f"{c['head_dim']}, {c['dtype']}, {'causal' if c['causal'] else 'full'}, {c['pass']}")
    for line in c["assumed"]:
        print(f"assumed: {line}")
    for line in report["unmatched"]:
        print(f"not matched: {line}")
    for line in report["notes"]:
        print(f"note: {line}")
    rows = [[f"iteration {it}", fmt_s(t)] for it, t in zip(m["iterations"], m["iterations_s"])]
    rows += [["measured median", fmt_s(m["median_s"])], ["measured range", f"{fmt_s(m['min_s'])} - {fmt_s(m['max_s'])}"],
             ["simulated", fmt_s(report["simulated_s"])], ["error", f"{report['error']:+.1%}"]]
    print(table(["attention phase (slowest rank)", "time"], rows))
    print(f"the median rank's phase {fmt_s(m['rank_median_s'])} ({report['error_vs_rank_median']:+.1%}); a rank not "
          f"computing (waiting on blocks or on slower ranks) {fmt_s(m['waiting_median_s'])} of it, simulated "
          f"{fmt_s(report['simulated_waiting_s'])}; the ranks entered the attention "
          f"{fmt_s(m['entry_skew_median_s'])} apart (median; not in the phase)")
    link = report["profile"]["link"]
    print(f"fitted: link {link['latency_s'] * 1e6:.1f} us + {link['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s; compute "
          + ", ".join(f"{k} {g['flops_per_s'] / 1e9:.1f} GFLOP/s" for k, g in report["profile"]["compute"].items()))
    if a.profile_out:
        print(f"profile: {a.profile_out} (ask what-ifs with `ringsim simulate --profile {a.profile_out} ...`)")
    return 0


def _elsewhere(profile, kind: str, path: str) -> str | None:
    """A line saying the profile was measured on another host than this one; None where
    it was measured here."""
    from sim.hardware.host import mismatch_line, this_host

    gpu = None
    if kind == "cuda":
        import torch

        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    here = this_host(kind=kind, device=gpu, threads_per_rank=profile.measured_on.get("threads_per_rank"))
    return mismatch_line(profile.measured_on, here, path)


def _check_options(a: argparse.Namespace) -> None:
    """Refuse the counts and fractions no validation can run with."""
    if a.repeats < 2:
        raise RingsimError("--repeats must be at least 2 to report a spread")
    bad = [n for n in a.gpus or () if n < 1]
    if bad:
        raise RingsimError(f"--gpus takes positive counts of processes, got {bad[0]}")
    for name in ("heads", "kv_heads", "head_dim"):
        if getattr(a, name) < 1:
            raise RingsimError(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if not 1 <= a.rounds <= a.repeats:
        raise RingsimError(f"--rounds must be a count from 1 to --repeats ({a.repeats}), got {a.rounds}")
    if a.replays < 1:
        raise RingsimError("--replays must be at least 1")
    if a.warmup < 0:
        raise RingsimError("--warmup must be non-negative")
    if not 0 <= a.reference_s <= 60:
        raise RingsimError("--reference-s must be a number of seconds from 0 to 60")
    if not 0 <= a.remeasure <= 5:
        raise RingsimError(f"--remeasure must be a count from 0 to 5, got {a.remeasure}")
    for name in ("max_median_error", "max_case_error"):
        if getattr(a, name) is not None and not getattr(a, name) >= 0:
            raise RingsimError(f"--{name.replace('_', '-')} must be a non-negative fraction")


def _cases(a: argparse.Namespace) -> list:
    """The validation matrix the options ask for; the GPU counts Ulysses leaves out are
    said on standard error."""
    cases = matrix(quick=a.quick, seqs=a.seqs, passes=a.passes, gpu_counts=a.gpus,
                   schemes=a.schemes, heads=a.heads, kv_heads=a.kv_heads)
    if "ulysses" in (a.schemes or default_schemes(a.quick)):
        left = [ws for ws in (a.gpus or GPU_COUNTS) if not ulysses_fits(ws, a.heads, a.kv_heads)]
        if left:
            print(f"ulysses left out on {', '.join(map(str, left))} ranks: the degree must divide the "
                  f"{a.heads} heads and the {a.kv_heads} K/V heads", file=sys.stderr)
    if not cases:
        raise RingsimError("no cases to run: no scheme fits these GPU counts and heads")
    return cases


def _workload(a: argparse.Namespace, case) -> Workload:
    return Workload(seq=case.seq, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
                    dtype=a.dtype, causal=case.causal, pass_=case.pass_)


def _resumed(a: argparse.Namespace, settings: dict[str, Any], n_cases: int) -> tuple[dict, dict, bool]:
    """What an unfinished report with the same settings in --out holds: (its rows by case
    key, the machine it names, whether there was one to resume)."""
    if not (a.out and os.path.exists(a.out) and not a.force):
        return {}, {}, False
    old = read_json(a.out, what="report", max_bytes=64 * 1024 * 1024)
    if not isinstance(old, dict) or old.get("settings") != settings:
        raise RingsimError(f"{a.out} holds a report with other settings; pass --force to start over")
    rows = {r["key"]: r for r in old.get("cases", []) if isinstance(r, dict) and "key" in r}
    measured_on = old["measured_on"] if isinstance(old.get("measured_on"), dict) else {}
    if rows:
        print(f"resuming: {len(rows)} of {n_cases} cases already in {a.out}", file=sys.stderr)
    return rows, measured_on, True


def _measure_cases(a: argparse.Namespace, cases, configs, profile, kind: str, rows: dict[str, dict],
                   measured_on: dict[str, Any], save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Measure and score the cases not yet in `rows`, batch by batch, each batch's rounds
    in round_order; a batch's rows go into `rows` (and `save` is called) once all its
    rounds are in. Returns the machine the last case ran on."""
    index = {c.key: i for i, c in enumerate(cases, 1)}
    started = time.perf_counter()
    todo = _batches(cases, rows)
    speed = _host_speed_reader(a, profile, kind) if todo else None
    before = speed() if speed else None
    per_round = [{key: dataclasses.replace(cfg, repeats=n) for key, cfg in configs.items()}
                 for n in split_repeats(a.repeats, a.rounds)]
    rounds: dict[int, list] = {i: [] for i in range(len(todo))}
    for i, r in round_order(len(todo), a.rounds):
        batch = todo[i]
        measured, kept_before, kept_after, tried, before = _measure_batch(batch, per_round[r], speed, before,
                                                                          a.remeasure)
        rounds[i].append({"measured": measured, "readings": [kept_before, kept_after], "tried": tried})
        if len(rounds[i]) < a.rounds:
            continue
        for k, case in enumerate(batch):
            row, traces = _score_case(a, case, k, rounds[i], configs[case.key].scenario(), profile)
            measured_on = dict(traces[0].hardware)
            rows[case.key] = row
            print(f"[{index[case.key]}/{len(cases)}] {case.key}: {_case_line(row)}  "
                  f"[{time.perf_counter() - started:.0f} s]", file=sys.stderr, flush=True)
        save(measured_on)
    return measured_on


def _score_case(a: argparse.Namespace, case, k: int, rounds: list[dict], scenario, profile) -> tuple[dict, list]:
    """Case `k` of a batch whose rounds are all in: its row (the prediction and errors;
    at the host's speed too where every reading holds one; every attempt where a round
    was measured again) and its measured traces, every round's."""
    readings = [x for rnd in rounds for x in rnd["readings"]]
    traces = [t for rnd in rounds for t in rnd["measured"][k]]
    row = compare_case(case, traces, simulate_replays(scenario, profile, a.replays))
    row["key"] = case.key
    if all(readings):
        row.update(at_host_speed(case, traces, scenario, profile, readings, a.replays))
    if any(len(rnd["tried"]) > 1 for rnd in rounds):
        row["attempts"] = [{**t, "measured_median_s": t["measured_median_s"][k],
                            **({"round": n} if a.rounds > 1 else {})}
                           for n, rnd in enumerate(rounds) for t in rnd["tried"]]
    return row, traces


def _case_line(row: dict[str, Any]) -> str:
    """A scored case's measured and simulated times, in a progress line."""
    at_speed = f", at the host's speed {row['error_at_host_speed']:+.1%}" if "host_speed" in row else ""
    return (f"measured {row['measured_median_s'] * 1e3:.1f} ms "
            f"(min {row['measured_min_s'] * 1e3:.1f}, max {row['measured_max_s'] * 1e3:.1f}, "
            f"cv {row['measured_cv']:.1%}), simulated {row['simulated_s'] * 1e3:.1f} ms "
            f"({row['error']:+.1%}{at_speed})")


def _failures(a: argparse.Namespace, report: dict[str, Any]) -> list[str]:
    """The thresholds (--max-median-error, --max-case-error) the report breaks, in words."""
    s = report["summary"]
    failed = []
    if a.max_median_error is not None and s["median_abs_error"] > a.max_median_error:
        failed.append(f"median |error| {s['median_abs_error']:.1%} > {a.max_median_error:.1%}")
    if a.max_case_error is not None:
        bad = [r["key"] for r in report["cases"]
               if not r["within_range"] and r["abs_error"] > a.max_case_error]
        if bad:
            failed.append(f"{len(bad)} cases off by more than {a.max_case_error:.1%}: {', '.join(bad)}")
    return failed


def _batch_factors(readings: list[dict[str, Any]]) -> dict[str, float]:
    """The host's state around a batch: the mean of the speed readings before and after
    it (and its other rounds), and of their sharing readings where every one holds one."""
    out = {"speed": statistics.fmean(r["factor"] for r in readings)}
    if all(r.get("sharing") for r in readings):
        out["sharing"] = statistics.fmean(r["sharing"]["factor"] for r in readings)
    return out


def _state_off(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, float] | None:
    """How far the host read from the profile around a batch (|factor - 1| of each of
    _batch_factors); None without readings."""
    if not (before and after):
        return None
    return {name: abs(f - 1) for name, f in _batch_factors([before, after]).items()}


def _measure_batch(batch, configs, speed, before, remeasure: int):
    """Measure a batch, and again (`remeasure` times at most, each after a fresh reading)
    while the host read around it lies more than hw.validate.STATE_OFF from the profile,
    in speed or in sharing: the host then computed, or served the ranks on its cores,
    unlike the host the profile describes, for reasons outside the run. Of the attempts,
    the one read closest to the profile is kept, chosen by the readings alone (never by
    the cases' errors); every attempt's readings and medians are returned for the
    report. Returns (traces by case, the kept attempt's readings before and after, the
    attempts, the last reading taken)."""
    tried, kept = [], None
    for attempt in range(remeasure + 1):
        if attempt:
            before = speed()
        measured = measure([configs[c.key] for c in batch])
        after = speed() if speed else None
        off = _state_off(before, after)
        worst = max(off.values()) if off else 0.0
        tried.append({"speed_readings": [before["factor"], after["factor"]] if off else None,
                      "sharing_readings": [before["sharing"]["slowdown"], after["sharing"]["slowdown"]]
                      if off and "sharing" in off else None,
                      "measured_median_s": [statistics.median(t.makespan_s for t in traces) for traces in measured]})
        if kept is None or worst < kept[0]:
            kept = (worst, measured, before, after, attempt)
        if worst <= STATE_OFF:
            break
        if attempt < remeasure:
            parts = ", ".join(f"{name} {value:.0%}" for name, value in off.items())
            print(f"the host read off the profile around this batch of {configs[batch[0].key].n_gpus} ranks "
                  f"({parts} off): measuring it again ({attempt + 1} of {remeasure})", file=sys.stderr, flush=True)
    latest = after
    _, measured, before, after, chosen = kept
    for i, t in enumerate(tried):
        t["kept"] = i == chosen
    return measured, before, after, tried, latest


def _host_speed_reader(a: argparse.Namespace, profile, kind: str):
    """A function that reads the host's compute speed and sharing against the profile
    (hw.reference), printing each reading; None where there is nothing to read
    (--reference-s 0, a GPU profile, or a profile without the reference block, which is
    said once)."""
    if kind != "cpu" or a.reference_s == 0:
        return None
    from hw import reference

    if reference.reference_block(profile, a.dtype, a.heads, a.head_dim) is None:
        print(f"profile has no full {a.dtype} forward block of {a.heads} heads x {a.head_dim}: "
              f"the host's speed is not read", file=sys.stderr)
        return None
    threads = int(profile.measured_on.get("threads_per_rank") or 1)

    def read() -> dict[str, Any] | None:
        r = reference.host_speed(profile, dtype=a.dtype, heads=a.heads, head_dim=a.head_dim, threads=threads,
                                 seconds=a.reference_s)
        if r:
            print(f"host speed: the {r['tokens']}-token reference block takes {r['now_s'] * 1e3:.1f} ms, "
                  f"{r['factor']:.2f}x the profile's {r['profile_s'] * 1e3:.1f} ms", file=sys.stderr, flush=True)
            r["sharing"] = reference.host_sharing(profile, dtype=a.dtype, heads=a.heads, head_dim=a.head_dim,
                                                  threads=threads, seconds=a.reference_s)
            if r["sharing"]:
                print(f"host sharing: {reference.sharing_line(r['sharing'])}", file=sys.stderr, flush=True)
        return r
    return read


def at_host_speed(case, traces: list[Trace], scenario, profile, readings: list[dict[str, Any]],
                  replays: int = 1) -> dict[str, Any]:
    """A case's prediction and errors at the host's compute speed of its batch: the mean
    of the readings before and after it (each round's, with --rounds), applied to the
    profile's compute times; and, where every reading holds the host's sharing, at its
    state (speed and sharing, each the mean of its readings:
    sim.hardware.profile.Profile.at_host_state)."""
    factors = _batch_factors(readings)
    factor = factors["speed"]
    row = compare_case(case, traces, simulate_replays(scenario, profile.at_compute_speed(factor), replays))
    out = {"host_speed": factor,
           "host_speed_readings": [r["factor"] for r in readings],
           "simulated_at_host_speed_s": row["simulated_s"],
           "error_at_host_speed": row["error"],
           "within_range_at_host_speed": row["within_range"],
           "step_abs_errors_at_host_speed": [st["abs_error"] for st in row["steps"]]}
    if "sharing" in factors:
        sharing = factors["sharing"]
        state = compare_case(case, traces, simulate_replays(scenario, profile.at_host_state(factor, sharing), replays))
        out.update({"host_sharing": sharing,
                    "host_sharing_readings": [r["sharing"]["slowdown"] for r in readings],
                    "profile_sharing": readings[0]["sharing"]["profile_slowdown"],
                    "simulated_at_host_state_s": state["simulated_s"],
                    "error_at_host_state": state["error"],
                    "within_range_at_host_state": state["within_range"],
                    "step_abs_errors_at_host_state": [st["abs_error"] for st in state["steps"]]})
    return out


def _report(a, settings, cases, rows, measured_on, used) -> dict[str, Any]:
    ordered = [rows[c.key] for c in cases if c.key in rows]
    summary = summarize(ordered, max_case_error=a.max_case_error if a.max_case_error is not None else 0.10)
    return {"settings": settings, "profile": a.profile, "measured_on": measured_on or {},
            "profile_compute": used, "warmup": a.warmup, "repeats": a.repeats, "rounds": a.rounds,
            "complete": len(ordered) == len(cases),
            "summary": summary, "median_abs_error": summary.get("median_abs_error"),
            "cases": ordered}
