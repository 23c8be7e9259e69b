"""`ringsim calibrate`: `ringsim hw bench` JSON in, a hardware profile out (sim.calibrate).

Its counterpart, `ringsim validate`, runs the real kernel and so lives beside it
(hw.validate_cli).
"""

from __future__ import annotations

import argparse
import json
import sys

from sim.trace import read_json


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit a hardware profile to `ringsim hw bench` results")
    p.add_argument("bench", metavar="BENCH.json", help="output of `ringsim hw bench`")
    p.add_argument("-o", "--output", required=True, metavar="PROFILE.json", help="the profile to write")
    p.add_argument("--force", action="store_true", help="overwrite an existing profile")
    p.add_argument("--json", action="store_true", help="print the fit report as JSON")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(a: argparse.Namespace) -> int:
    from sim.calibrate import calibrate

    profile = calibrate(read_json(a.bench, what="bench results"), a.bench)
    profile.save(a.output, overwrite=a.force)
    r = profile.report
    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"profile for {profile.measured_on.get('device', '?')} written to {a.output}")
    chosen = r["compute"]["chosen"]
    print(f"compute model: {chosen['model']} (held-out median |error|: fit "
          f"{chosen['held_out_median_abs_rel_fit']:.1%}, table {chosen['held_out_median_abs_rel_table']:.1%})")
    for key, g in r["compute"].items():
        if key == "chosen":
            continue
        print(f"  {key:18} {g['points']:2} points  overhead {g['overhead_s'] * 1e6:8.1f} us  "
              f"rate {g['flops_per_s'] / 1e9:7.2f} GFLOP/s  in-sample |err| median "
              f"{g['in_sample_fit'].get('median_abs_rel', 0):.1%}")
    for direction, l in r["link"].items():
        print(f"link {direction:9}: latency {l['latency_s'] * 1e6:.1f} us, bandwidth "
              f"{l['bandwidth_bytes_per_s'] / 1e9:.3f} GB/s, residual median "
              f"{l['residuals'].get('median_abs_rel', 0):.1%}")
    inter = r["interference"]
    ms = inter["median_slowdown"]
    print(f"interference: compute {'-' if ms is None else f'{ms:.3f}x'} slower while a transfer is in flight"
          f" (model uses {inter['used']:.3f}x)")
    conc = r.get("concurrency_slowdown")
    if conc:
        print("ranks computing at once: " + ", ".join(f"{k:g} -> {f:.2f}x slower" for k, f in conc))
    else:
        print(f"compute slots {r['compute_slots'] or 'unlimited'}")
    host = r.get("host")
    if host:
        print(f"host: {host['cores']:g} cores, {host['threads_per_rank']:g} threads per rank, "
              f"{host['transfer_cores']:.2f} cores per transfer in flight "
              f"(from {host['ring_entries']} ring-conditions entries)")
        for p in host.get("points", []):
            print(f"  {p['processes']:g} ranks in a ring: compute {p['compute_slowdown']:.2f}x "
                  f"(model {p['predicted_compute_slowdown']:.2f}x), transfer {p['transfer_slowdown']:.2f}x "
                  f"(model {p['predicted_transfer_slowdown']:.2f}x)")
    for why in r.get("rejected", []):
        print(f"rejected, not fitted: {why}", file=sys.stderr)
    return 0
