"""Does a backward block slow more than a forward one under ring conditions?

The bench's ring-conditions part (hw.bench) times a forward block computed back to back
on k ranks while each rank's thread exchanges the block's K/V with its neighbours, against
the same block alone; the calibration fits the host model's transfer cores and weight to
those forwards and prices a backward by the same split, on its own sharing law. This
measures the same entry with the backward block as well, beside the forward's one hop and
beside the two hops a backward step has in flight (K/V and dK/dV), the variants taking
turns pass after pass (the host's drift lands on all), and prints each one's compute and
transfer slowdown next to what a profile's host model says for it.

    .venv/bin/python bench/experiments/ring_backward.py [--profile bench/results/calibration/cpu-2core/profile.json]
        [--ranks 2 3 4] [--passes 3] [--tokens 1024] [--samples 5] [--bwd-hops 1 2]
        [--json out.json [--force]]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.errors import RingsimError  # noqa: E402
from sim.files import kept_file, write_json

VARIANTS = (("fwd", 1), ("bwd", 1), ("bwd", 2))
"""(block kind, hops in flight per rank): a forward step carries the K/V hop; a backward
step of the ring's backward pass carries two, the K/V hop and the dK/dV hop (hw.ring)."""


def predicted(profile, k: int, kind: str) -> tuple[float, float] | None:
    """The profile's (compute, transfer) slowdown for k ranks each computing a `kind` block
    while one transfer of each is in flight, against each alone; None without a host model.
    The same with two hops in flight: the simulator plays a link's transfers one at a time
    (sim.engine.players), so a rank's K/V and dK/dV hops to its neighbour keep one transfer in
    flight, for longer."""
    from sim.calibration.calibrate import ring_conditions_slowdowns

    host = profile.contention.host if profile is not None else None
    if host is None:
        return None
    backward = kind == "bwd"
    return ring_conditions_slowdowns(host, profile.contention.in_flight(backward), k, backward=backward)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default=None, help="a CPU profile whose host model to set beside the measurement")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--passes", type=int, default=3, help="passes over every entry (default 3)")
    ap.add_argument("--tokens", type=int, default=1024, help="the block's tokens (default 1024, as the bench)")
    ap.add_argument("--samples", type=int, default=5, help="timed blocks alone per rank (default 5)")
    ap.add_argument("--bwd-hops", type=int, nargs="+", default=[1, 2],
                    help="hops in flight per rank beside a backward block (default 1 2: the "
                         "forward's one, and the backward pass's K/V and dK/dV)")
    ap.add_argument("--json", metavar="FILE", help="also write every pass as JSON")
    ap.add_argument("--force", action="store_true", help="overwrite the --json file")
    a = ap.parse_args(argv)
    variants = [("fwd", 1)] + [("bwd", m) for m in a.bwd_hops]
    if a.passes < 1 or a.samples < 1 or a.tokens < 1 or min(a.ranks) < 2 or min(a.bwd_hops) < 1:
        print("ring_backward: --passes, --samples, --tokens and --bwd-hops must be positive, --ranks at least 2",
              file=sys.stderr)
        return 2
    why = kept_file(a.json, a.force)
    if why:
        print(f"ring_backward: {why}", file=sys.stderr)
        return 2
    profile = None
    if a.profile:
        from sim.hardware.profile import load_profile
        try:
            profile = load_profile(a.profile)
        except (RingsimError, OSError) as e:
            print(f"ring_backward: {e}", file=sys.stderr)
            return 2

    from hw.bench.bounds import ring_slowdown
    from hw.bench.parts import _ring_worker, block_kv_bytes, full_forward_block
    from hw.spawn import spawn

    heads, head_dim = 8, 64
    runs: list[dict] = []
    for p in range(a.passes):
        for k in a.ranks:
            for kind, hops in variants:
                block = full_forward_block("fp32", 1, heads, heads, head_dim, a.tokens, kind)
                entry = {"processes": k, **block, "bytes": block_kv_bytes(block), "hops": hops}
                per_rank = spawn(_ring_worker, k, args=(entry, a.samples, 1, 1, "auto"), backend="gloo",
                                 timeout_s=600)
                got = {name: [t for r in per_rank for t in r[name]] for name in per_rank[0]}
                run = {"pass": p + 1, "ranks": k, "kind": kind, "hops": hops,
                       "compute_alone_ms": 1e3 * statistics.median(got["compute_alone_s"]),
                       "compute_slowdown": ring_slowdown(got["compute_ring_s"], got["compute_alone_s"]),
                       "transfer_slowdown": ring_slowdown(got["transfer_ring_s"], got["transfer_alone_s"])}
                runs.append(run)
                print(f"pass {p + 1}: {k} ranks, {kind} with {hops} hop(s): "
                      f"block alone {run['compute_alone_ms']:.1f} ms, "
                      f"compute x{run['compute_slowdown']:.2f}, transfer x{run['transfer_slowdown']:.2f}",
                      flush=True)
    rows = []
    print()
    print(f"{'ranks':>5} {'kind':<4} {'hops':>4} {'compute (passes)':<24} {'median':>7} {'model':>6}   "
          f"{'transfer':>8} {'model':>6}   over fwd compute")
    for k in a.ranks:
        fwd = None
        for kind, hops in variants:
            mine = [r for r in runs if r["ranks"] == k and r["kind"] == kind and r["hops"] == hops]
            c = statistics.median(r["compute_slowdown"] for r in mine)
            x = statistics.median(r["transfer_slowdown"] for r in mine)
            model = predicted(profile, k, kind)
            rows.append({"ranks": k, "kind": kind, "hops": hops, "compute_slowdown": c, "transfer_slowdown": x,
                         "compute_by_pass": [r["compute_slowdown"] for r in mine],
                         "model_compute_slowdown": model[0] if model else None,
                         "model_transfer_slowdown": model[1] if model else None})
            passes = ", ".join(f"{r['compute_slowdown']:.2f}" for r in mine)
            ratio = f"{c / fwd:.2f}x" if fwd else ""
            fwd = fwd or c
            mc, mx = (f"{model[0]:.2f}", f"{model[1]:.2f}") if model else ("-", "-")
            print(f"{k:>5} {kind:<4} {hops:>4} {passes:<24} {c:>7.2f} {mc:>6}   {x:>8.2f} {mx:>6}   {ratio}")
    if a.json:
        write_json(a.json, {"tokens": a.tokens, "heads": heads, "head_dim": head_dim, "profile": a.profile,
                            "rows": rows, "runs": runs}, overwrite=a.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
