"""How long a ring rank's post holds it, by who posted first.

gloo runs a send at once, in the posting thread, when its receiver has already posted
the receive; otherwise it tells the receiver and writes the send later from its own
thread. So a rank whose receiver posted first should go on only when its send ends
(sim.engine.players.times_simpy plays that rule for the K/V hops). This script runs the ring
kernel (gloo, CPU) on a few cases at each GPU count, and for every hop of every repeat
reads off the measured trace: how long before the sender's post the receiver posted its
receive (the lead), the time from the post to what the rank does next (the hold: for a
K/V hop the compute of its step, for a dK/dV hop, posted after a compute, the rank's
next span), and the send's time from post to completion. It prints, per kind of hop,
GPU count and side (the receiver first by more than `--lead-ms`, or not), the hops and
the medians of the hold, of the send and of the next start minus the send's end;
`--json` writes the same with every hop. dK/dV hops need `--pass fwdbwd`.

    .venv/bin/python bench/experiments/post_hold.py [--gpus 2 3 4] [--seq 6144] [--pass fwd]
        [--repeats 5] [--lead-ms 0.2] [--json out.json [--force]]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.errors import RingsimError  # noqa: E402
from sim.files import kept_file, write_json
from sim.trace.format import COMPUTE, KIND_NAMES, RECV, SEND, WAIT, Trace  # noqa: E402

KV, DKV = KIND_NAMES.index("kv"), KIND_NAMES.index("dkv")
CASES = (("contiguous", False), ("zigzag", True), ("contiguous", True))


def hops(trace: Trace) -> list[dict[str, float]]:
    """Per hop: the lead of the receiver's post, the hold (ms) from the post to what its
    rank does next (a K/V hop: the compute of its step; a dK/dV hop, posted after a
    compute: the rank's next span), the send's time from its post, and that next start
    minus the send's end."""
    c = trace.columns
    n = trace.n_gpus
    out = []
    for i in np.flatnonzero((c.stream == SEND) & ((c.kind == KV) | (c.kind == DKV))):
        r, step, kind = int(c.rank[i]), int(c.step[i]), int(c.kind[i])
        posted, ended = float(c.start_s[i]), float(c.end_s[i])
        recv = np.flatnonzero((c.stream == RECV) & (c.kind == kind) & (c.rank == (r + 1) % n) & (c.step == step))
        if kind == KV:
            after = np.flatnonzero((c.stream == COMPUTE) & (c.rank == r) & (c.step == step))
        else:   # the post's own spans start at the post; the kernel's next act after it
            # (not the wait it records for its own hold: hw.comm.RingComm.post)
            after = np.flatnonzero((c.rank == r) & (c.start_s > posted) & ~((c.stream == WAIT) & (c.kind == DKV)))
        if not recv.size or not after.size:
            continue
        started = float(c.start_s[after].min())
        out.append({"kind": KIND_NAMES[kind], "rank": r, "step": step,
                    "lead_ms": (posted - float(c.start_s[recv].min())) * 1e3,
                    "hold_ms": (started - posted) * 1e3, "send_ms": (ended - posted) * 1e3,
                    "start_minus_send_end_ms": (started - ended) * 1e3})
    return out


def summary(rows: list[dict], lead_ms: float) -> list[dict]:
    out = []
    for kind in ("kv", "dkv"):
        for ws in sorted({r["n_gpus"] for r in rows}):
            for side, first in (("receiver first", True), ("sender first", False)):
                g = [r for r in rows if r["kind"] == kind and r["n_gpus"] == ws
                     and (r["lead_ms"] > lead_ms) == first]
                if g:
                    out.append({"kind": kind, "n_gpus": ws, "side": side, "hops": len(g), **{
                        f"median_{k}": statistics.median(r[k] for r in g)
                        for k in ("hold_ms", "send_ms", "start_minus_send_end_ms")}})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--seq", type=int, default=6144, help="tokens (default 6144)")
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "fwdbwd"), default="fwd")
    ap.add_argument("--repeats", type=int, default=5, help="measured runs of each case (default 5)")
    ap.add_argument("--lead-ms", type=float, default=0.2,
                    help="a receiver posted first by more than this (default 0.2 ms)")
    ap.add_argument("--json", metavar="FILE", help="also write the table and every hop as JSON")
    ap.add_argument("--force", action="store_true", help="overwrite the --json file")
    a = ap.parse_args(argv)
    if a.repeats < 1 or any(w < 2 for w in a.gpus):
        print("post_hold: --repeats must be at least 1, GPU counts at least 2", file=sys.stderr)
        return 2
    why = kept_file(a.json, a.force)
    if why:
        print(f"post_hold: {why}", file=sys.stderr)
        return 2
    from outside_compute import measure_cases

    try:
        cfgs, measured = measure_cases(a.gpus, CASES, a.seq, a.repeats, a.pass_)
    except RingsimError as e:
        print(f"post_hold: {e}", file=sys.stderr)
        return 2
    rows = []
    for cfg, (_, traces) in zip(cfgs, measured):
        for repeat, t in enumerate(traces):
            for h in hops(t):
                rows.append({"case": f"{cfg.layout}/{'causal' if cfg.workload.causal else 'full'}",
                             "n_gpus": cfg.n_gpus, "repeat": repeat, **h})
    table = summary(rows, a.lead_ms)
    print(f"{a.pass_}, {a.seq} tokens, {a.repeats} runs of {len(CASES)} cases per GPU count; medians, ms")
    print(f"{'hop':<4} {'ranks':>5}  {'side':<15} {'hops':>5}  {'hold':>6}  {'send':>6}  "
          f"{'next start - send end':>21}")
    for r in table:
        print(f"{r['kind']:<4} {r['n_gpus']:>5}  {r['side']:<15} {r['hops']:>5}  {r['median_hold_ms']:>6.2f}  "
              f"{r['median_send_ms']:>6.2f}  {r['median_start_minus_send_end_ms']:>21.2f}")
    if a.json:
        write_json(a.json, {"seq": a.seq, "pass": a.pass_, "repeats": a.repeats, "lead_ms": a.lead_ms,
                            "table": table, "hops": rows}, overwrite=a.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
