"""`ringsim calibrate`: a hardware profile from measurements, and a check that one still
holds.

Three modes:
- `ringsim calibrate BENCH.json... -o PROFILE`: fit the microbenchmarks of `ringsim hw
  bench` (sim.calibration.calibrate);
- `ringsim calibrate --from-traces TRACE... -o PROFILE [--holdout TRACE...] [--compare
  PROFILE]`: fit measured ring traces (sim.calibration.from_traces), then predict held-out runs
  with it and with another profile, side by side;
- `ringsim calibrate --check PROFILE`: a probe of under a minute that runs the real kernel
  here and says whether the profile still predicts this host within 10% (hw.check);
  exit status 1 when it does not.

It lives beside the kernel because `--check` runs it; `ringsim validate` is the long form
of the check (hw.validate_cli). The `ringsim` CLI imports this module on every start to
register the command, so each mode's modules (and with `--check`, torch) are imported
when it runs, not here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from hw.validate import SHARING_OFF
from sim.calibration.validation import REPLAYS
from sim.errors import RingsimError
from sim.files import check_output
from sim.inputs import read_json
from sim.invariants import check_calibration
from sim.trace.format import Trace

MAX_BENCH_BYTES = 64 * 1024 * 1024
"""A bench file: thousands of entries of a few hundred bytes each (the full CPU bench's is about 1 MB)."""


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit a hardware profile to `ringsim hw bench` results or measured "
                                         "traces, or check one against this host")
    p.add_argument("bench", metavar="BENCH.json", nargs="*",
                   help="output of `ringsim hw bench` (several files of one device are merged)")
    p.add_argument("-o", "--output", metavar="PROFILE.json", help="the profile to write")
    p.add_argument("--from-traces", nargs="+", metavar="TRACE", default=None,
                   help="fit measured ring traces (`ringsim hw run --trace`) instead of microbenchmarks")
    p.add_argument("--holdout", nargs="+", metavar="TRACE", default=None,
                   help="with --from-traces: measured runs kept out of the fit, predicted to validate it")
    p.add_argument("--compare", metavar="PROFILE.json", default=None,
                   help="with --holdout: also predict the held-out runs with this profile (e.g. from microbenchmarks)")
    p.add_argument("--check", metavar="PROFILE.json", default=None,
                   help="run a short probe here and say whether PROFILE still predicts this host")
    p.add_argument("--tolerance", type=float, default=0.10,
                   help="with --check: the largest |makespan error| that passes (default 0.10)")
    p.add_argument("--replays", type=int, default=None, metavar="N",
                   help="with --check or --holdout: predict each run by the median of N plays seeded with the "
                        f"profile's measured spread, as bench/calibration/calibrate_cpu.sh validates (default {REPLAYS}; "
                        "1: one play at the mean rate; a profile without a spread plays once)")
    p.add_argument("--gpu", default=None,
                   help="with a GPU's compute-only bench: the GPU preset it calibrates (default: from the device name)")
    p.add_argument("--force", action="store_true", help="overwrite an existing profile")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(a: argparse.Namespace) -> int:
    modes = [m for m, on in (("BENCH.json", bool(a.bench)), ("--from-traces", a.from_traces is not None),
                             ("--check", a.check is not None)) if on]
    if len(modes) != 1:
        raise RingsimError("calibrate needs one of BENCH.json..., --from-traces TRACE... or --check PROFILE"
                           + (f" (got {' and '.join(modes)})" if modes else ""))
    if (a.holdout or a.compare) and a.from_traces is None:
        raise RingsimError("--holdout and --compare go with --from-traces")
    if a.compare and not a.holdout:
        raise RingsimError("--compare needs --holdout: the runs to predict")
    if a.replays is not None and a.check is None and not a.holdout:
        raise RingsimError("--replays goes with --check or --holdout")
    if a.gpu is not None and not a.bench:
        raise RingsimError("--gpu goes with a GPU's compute-only bench (BENCH.json...)")
    if a.replays is not None and a.replays < 1:
        raise RingsimError("--replays must be at least 1")
    if a.check is not None:
        return cmd_check(a)
    if not a.output:
        raise RingsimError("calibrate needs -o PROFILE.json: where to write the profile")
    check_output(a.output, a.force)
    if a.from_traces is not None:
        return cmd_from_traces(a)
    return cmd_bench(a)


def _load_traces(paths: list[str]) -> list:
    return [(Trace.load(p), p) for p in paths]


def cmd_from_traces(a: argparse.Namespace) -> int:
    # each mode's modules load when it runs (module docstring)
    from sim.calibration.from_traces import calibrate_from_traces, holdout
    from sim.hardware.profile import load_profile

    fit_on = _load_traces(a.from_traces)
    held = _load_traces(a.holdout) if a.holdout else []
    overlap = {p for _, p in fit_on} & {p for _, p in held}
    if overlap:
        raise RingsimError(f"{sorted(overlap)[0]} is both fitted and held out: keep held-out runs apart")
    compare = load_profile(a.compare) if a.compare else None
    profile = calibrate_from_traces(fit_on, ", ".join(a.from_traces))
    result = None
    if held:
        profiles = {"traces": profile}
        if compare is not None:
            profiles["compare"] = compare
        result = holdout(held, profiles, replays=REPLAYS if a.replays is None else a.replays)
        profile.report["holdout"] = {**result, "compare_profile": a.compare}
    check_calibration(profile.report, {"traces": ", ".join(a.from_traces)})
    profile.save(a.output, overwrite=a.force)
    if a.json:
        print(json.dumps(profile.report, indent=2))
        return 0
    r = profile.report
    print(f"profile for {profile.measured_on.get('device', '?')} from {len(fit_on)} measured traces "
          f"({len(r['cases'])} cases) written to {a.output}")
    _print_fits(r)
    if result is None:
        print("no held-out runs (--holdout): the fit is not validated")
        return 0
    names = list(result["summary"])
    head = f"{'held-out case':42} {'measured':>10}" + "".join(f" {n:>22}" for n in names)
    print(head)
    for row in result["cases"]:
        cells = "".join(f" {row[n]['predicted_s'] * 1e3:9.1f} ms ({row[n]['error']:+6.1%})" for n in names)
        print(f"{row['key']:42} {row['measured_s'] * 1e3:7.1f} ms{cells}")
    for n in names:
        s = result["summary"][n]
        label = "from these traces" if n == "traces" else f"from {a.compare}"
        step = s["step_median_abs_error"]
        print(f"{label}: median |makespan error| {s['median_abs_rel']:.1%}, worst {s['max_abs_rel']:.1%}, "
              f"{s['within_10pct']} of {s['n']} within 10%, per-step median "
              f"{'-' if step is None else f'{step:.1%}'}"
              + (f" (each the median of {s['plays']} seeded plays)" if s["plays"] > 1 else " (one play each)"))
    if len(names) > 1:
        print(f"predicts the held-out runs better: {'these traces' if result['better'] == 'traces' else a.compare}")
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    from hw.check import check
    from sim.hardware.profile import load_profile

    if not 0 < a.tolerance < 1:
        raise RingsimError("--tolerance must lie between 0 and 1")
    replays = REPLAYS if a.replays is None else a.replays
    profile = load_profile(a.check)

    def show(row) -> None:
        if not a.json:
            parts = row["parts"]
            print(f"  {row['key']:39} measured {row['measured_median_s'] * 1e3:7.1f} ms, predicted "
                  f"{row['simulated_s'] * 1e3:7.1f} ms ({row['error']:+.1%}); compute "
                  f"{parts['compute_s']['error']:+.1%}, transfer {parts['mean_transfer_s']['error']:+.1%}"
                  + (f"; at the host's speed {row['error_at_host_speed']:+.1%}"
                     if "error_at_host_speed" in row else "")
                  + (f", and sharing {row['error_at_host_state']:+.1%}" if "error_at_host_state" in row else ""),
                  file=sys.stderr, flush=True)

    result = check(profile, tolerance=a.tolerance, on_probe=show, replays=replays)
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        if result["host_differences"]:
            print(f"measured on another host: {'; '.join(result['host_differences'])}")
        speed = result["host_speed"]
        if speed:
            print(f"this host computes the profile's {speed['tokens']}-token reference block in "
                  f"{speed['now_s'] * 1e3:.1f} ms, {speed['factor']:.2f}x its {speed['profile_s'] * 1e3:.1f} ms "
                  f"there; at that speed the median |makespan error| is "
                  f"{result['median_abs_error_at_host_speed']:.1%}")
        sharing = result.get("host_sharing")
        if sharing:
            from hw.reference import sharing_line

            print(f"{sharing_line(sharing)}; at that speed and sharing the median |makespan error| is "
                  f"{result['median_abs_error_at_host_state']:.1%}")
            if abs(sharing["factor"] - 1) > SHARING_OFF:
                print(f"note: this host's cores serve {sharing['processes']} processes "
                      f"{'worse' if sharing['factor'] > 1 else 'better'} than when the profile was measured: "
                      "on a virtual machine, its physical cores are shared with other tenants now and then")
        verdict = "still predicts" if result["holds"] else "no longer predicts"
        print(f"{a.check} {verdict} this host within {a.tolerance:.0%}: worst |makespan error| "
              f"{result['worst_abs_error']:.1%}, median {result['median_abs_error']:.1%} "
              f"({len(result['probes'])} probes, {result['wall_s']:.0f} s"
              + (f"; each predicted by the median of {result['replays']} seeded plays" if result["replays"] > 1
                 else "") + ")")
        cores = os.cpu_count() or 1
        if result["load_avg_1m"] > 0.5 * cores + 1:
            print(f"note: load average {result['load_avg_1m']:.1f} on {cores} cores: other processes shared "
                  "this host during the probe, and its times include them")
        if not result["holds"]:
            print("recalibrate here: bench/calibration/calibrate_cpu.sh --force (or `ringsim hw bench` then "
                  "`ringsim calibrate`)")
    return 0 if result["holds"] else 1


def _print_fits(r: dict) -> None:
    chosen = r["compute"]["chosen"]
    fit, tab = chosen["held_out_median_abs_rel_fit"], chosen["held_out_median_abs_rel_table"]
    if fit is None:
        print(f"compute model: {chosen['model']} (too few sizes per group for held-out errors)")
    else:
        print(f"compute model: {chosen['model']} (held-out median |error|: fit {fit:.1%}, table {tab:.1%})")
    drift = r["compute"].get("host_speed")
    if drift:
        print(f"host speed over the compute part: the reference block took {drift['fastest_over_median']:.2f}x-"
              f"{drift['slowest_over_median']:.2f}x its median {drift['reference_median_s'] * 1e3:.1f} ms; "
              f"every entry brought to the median"
              + (f" ({drift['paired']} of {drift['entries']} by their samples' ratios to the reference around each)"
                 if drift.get("paired") else ""))
    for key, g in r["compute"].items():
        if key in ("chosen", "host_speed"):
            continue
        print(f"  {key:18} {g['points']:2} points  overhead {g['overhead_s'] * 1e6:8.1f} us  "
              f"rate {g['flops_per_s'] / 1e9:7.2f} GFLOP/s  in-sample |err| median "
              f"{g['in_sample_fit'].get('median_abs_rel', 0):.1%}")
    for direction, l in r["link"].items():
        print(f"link {direction:9}: latency {l['latency_s'] * 1e6:.1f} us, bandwidth "
              f"{l['bandwidth_bytes_per_s'] / 1e9:.3f} GB/s, residual median "
              f"{l['residuals'].get('median_abs_rel', 0):.1%}")


def _compute_only_gpu(benches: list) -> bool:
    """Whether the benches are one GPU's compute grid (no transfers: a GPU profile)."""
    return all(isinstance(b, dict) and isinstance(b.get("device"), dict) and b["device"].get("kind") == "cuda"
               and not any(b.get(part) for part in ("transfer", "collective", "ring_conditions"))
               for b, _ in benches)


def cmd_gpu(a: argparse.Namespace, benches: list) -> int:
    from sim.calibration.gpu_profile import calibrate_gpu

    profile = calibrate_gpu(benches, a.gpu)
    check_calibration(profile.report, {"benches": ", ".join(a.bench)})
    profile.save(a.output, overwrite=a.force)
    if a.json:
        print(json.dumps(profile.to_dict(), indent=2))
        return 0
    print(f"GPU profile for {profile.measured_on.get('device')} (the {profile.gpu} preset's block model) written to "
          f"{a.output}; it replaces the GPU and keeps --link, --inter-link and the nodes")
    for kernel, r in profile.report["kernels"].items():
        floors = ", ".join(f"{k} call {v:.1f} us" for k, v in r["floors_us"].items())
        scale = ", ".join(f"{g} x{v:.3f}" for g, v in r["rate_scale"].items())
        print(f"  {kernel}: {r['entries']} blocks; floor {floors}; rate {scale or 'as published'}; in-sample "
              f"median |error| {r['median_abs_rel']:.1%}, worst {r['max_abs_rel']:.1%}, "
              f"{r['within_10pct']} of {r['n']} within 10%")
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from sim.calibration.calibrate import calibrate, merge_benches

    benches = [(read_json(path, what="bench results", max_bytes=MAX_BENCH_BYTES), path) for path in a.bench]
    if _compute_only_gpu(benches):
        return cmd_gpu(a, benches)
    if a.gpu:
        raise RingsimError("--gpu goes with a GPU's compute-only bench (a GPU profile)")
    bench = merge_benches(benches)
    profile = calibrate(bench, ", ".join(a.bench))
    check_calibration(profile.report, {"benches": ", ".join(a.bench)})
    profile.save(a.output, overwrite=a.force)
    r = profile.report
    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"profile for {profile.measured_on.get('device', '?')} written to {a.output}")
    _print_fits(r)
    inter = r["interference"]
    ms = inter["median_slowdown"]
    print(f"interference: compute {'-' if ms is None else f'{ms:.3f}x'} slower while a transfer is in flight"
          f" (model uses {inter['used']:.3f}x)")
    for op, c in (r.get("collectives") or {}).items():
        if "skipped" in c:
            print(f"collective {op:13}: not fitted ({c['skipped']})")
            continue
        by_gpus = ", ".join(f"{w} GPUs {e.get('median_abs_rel', 0):.1%}" for w, e in c["residuals_by_gpus"].items())
        print(f"collective {op:13}: {c['latency_per_round_s'] * 1e6:.1f} us per round, "
              f"{c['bandwidth_bytes_per_s'] / 1e9:.3f} GB/s; residual median by GPU count: {by_gpus}")
        for w, f in c["by_gpus"].items():
            print(f"  on {w} GPUs: {f['latency_per_round_s'] * 1e6:.1f} us per round, "
                  f"{f['bandwidth_bytes_per_s'] / 1e9:.3f} GB/s, residual median "
                  f"{f['residuals'].get('median_abs_rel', 0):.1%}")
    conc = r.get("concurrency_slowdown")
    if conc:
        print("ranks computing at once: " + ", ".join(f"{k:g} -> {f:.2f}x slower" for k, f in conc))
        bwd = r.get("concurrency_slowdown_bwd")
        if bwd:
            print("  on a backward block: " + ", ".join(f"{k:g} -> {f:.2f}x slower" for k, f in bwd))
    else:
        print(f"compute slots {r['compute_slots'] or 'unlimited'}")
    host = r.get("host")
    if host:
        for name, what in (("law_passes", "forward"), ("law_bwd_passes", "backward")):
            if host.get(name):
                print(f"  {what} by pass (the median counts): "
                      + "; ".join(f"{k:g} -> " + ", ".join(f"{f:.2f}x" for f in fs) for k, fs in host[name]))
        print(f"host: {host['cores']:g} cores, {host['threads_per_rank']:g} threads per rank, "
              f"{host['transfer_cores']:.2f} cores per transfer in flight, a transfer "
              f"{host.get('transfer_weight', 1.0):.2f}x as slowed as a compute beside it "
              f"(from {host['ring_entries']} ring-conditions entries)")
        _ring_rows(host.get("points", []), "")
        bwd = host.get("backward")
        if bwd:
            print(f"  backward blocks with two hops in flight: {bwd['residual_in_flight_slowdown']:.2f}x slower in "
                  f"flight than the host model says (from {bwd['ring_entries']} entries)")
            _ring_rows(bwd.get("points", []), "  ")
    for why in r.get("rejected", []):
        print(f"rejected, not fitted: {why}", file=sys.stderr)
    return 0


def _ring_rows(points: list[dict], indent: str) -> None:
    for p in points:
        by_pass = (" (by pass: compute " + ", ".join(f"{q['compute_slowdown']:.2f}x" for q in p["passes"])
                   + "; transfer " + ", ".join(f"{q['transfer_slowdown']:.2f}x" for q in p["passes"]) + ")"
                   if p.get("passes") else "")
        print(f"  {indent}{p['processes']:g} ranks in a ring: compute {p['compute_slowdown']:.2f}x "
              f"(model {p['predicted_compute_slowdown']:.2f}x), transfer {p['transfer_slowdown']:.2f}x "
              f"(model {p['predicted_transfer_slowdown']:.2f}x)" + by_pass)
