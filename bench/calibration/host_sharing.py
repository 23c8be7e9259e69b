"""How a CPU host's speed and sharing move over minutes, against a profile: the
readings `ringsim validate` takes around each batch (hw.reference: the profile's
reference block timed by one process, then by two at once against each alone), taken
back to back for `--seconds`. Prints one line per reading and a summary, writes JSON.

A reading whose sharing lies more than 15% from the profile's law is one in which two
ranks would run unlike at calibration, whatever the model.

    .venv/bin/python bench/calibration/host_sharing.py \
        --profile bench/results/calibration/cpu-2core/profile.json \
        --seconds 300 --out bench/results/calibration/cpu-2core/host-sharing-300s.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hw import reference  # noqa: E402
from hw.check import dtype_of  # noqa: E402
from hw.validate import SHARING_OFF  # noqa: E402
from sim.files import write_json  # noqa: E402
from sim.hardware.profile import load_profile  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, help="a CPU profile with a host model")
    p.add_argument("--seconds", type=float, default=300.0, help="how long to keep reading (default 300)")
    p.add_argument("--reading-s", type=float, default=3.0, help="seconds of each reading (default 3)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--out", default=None, help="JSON of every reading")
    p.add_argument("--force", action="store_true", help="overwrite --out")
    a = p.parse_args()
    if a.out and os.path.exists(a.out) and not a.force:
        print(f"host_sharing: {a.out} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    profile = load_profile(a.profile)
    dtype = dtype_of(profile)
    threads = int(profile.measured_on.get("threads_per_rank") or 1)
    read = dict(dtype=dtype, heads=a.heads, head_dim=a.head_dim, threads=threads, seconds=a.reading_s)
    if profile.contention.host is None or reference.reference_block(profile, dtype, a.heads, a.head_dim) is None:
        print(f"host_sharing: {a.profile} has no host model or no {a.heads} x {a.head_dim} reference block",
              file=sys.stderr)
        return 2
    started = time.time()
    rows = []
    print(f"{'t (s)':>6}  {'one process':>12}  {'two at once':>12}  {'over the law':>12}")
    while time.time() - started < a.seconds:
        speed = reference.host_speed(profile, **read)
        sharing = reference.host_sharing(profile, **read)
        rows.append({"t_s": time.time() - started, "speed": speed["factor"], "alone_s": speed["now_s"],
                     "sharing_slowdown": sharing["slowdown"], "sharing": sharing["factor"],
                     "profile_slowdown": sharing["profile_slowdown"], "load_avg_1m": os.getloadavg()[0]})
        r = rows[-1]
        print(f"{r['t_s']:6.0f}  {r['speed']:11.2f}x  {r['sharing_slowdown']:11.2f}x  {r['sharing']:11.2f}x",
              flush=True)
    off = [r for r in rows if abs(r["sharing"] - 1) > SHARING_OFF]
    summary = {"readings": len(rows), "seconds": time.time() - started,
               "profile_slowdown": rows[0]["profile_slowdown"] if rows else None,
               "speed": {"median": statistics.median(r["speed"] for r in rows),
                         "min": min(r["speed"] for r in rows), "max": max(r["speed"] for r in rows)},
               "sharing_slowdown": {"median": statistics.median(r["sharing_slowdown"] for r in rows),
                                    "min": min(r["sharing_slowdown"] for r in rows),
                                    "max": max(r["sharing_slowdown"] for r in rows)},
               "readings_off": len(off), "off_by": SHARING_OFF}
    print(f"\n{len(rows)} readings over {summary['seconds']:.0f} s; one process "
          f"{summary['speed']['min']:.2f}x-{summary['speed']['max']:.2f}x the profile (median "
          f"{summary['speed']['median']:.2f}x); two at once {summary['sharing_slowdown']['min']:.2f}x-"
          f"{summary['sharing_slowdown']['max']:.2f}x slower than one (median "
          f"{summary['sharing_slowdown']['median']:.2f}x; the profile's law {summary['profile_slowdown']:.2f}x); "
          f"{len(off)} readings more than {SHARING_OFF:.0%} off the law")
    if a.out:
        write_json(a.out, {"profile": a.profile, "summary": summary, "readings": rows}, overwrite=True)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
