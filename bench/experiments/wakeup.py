"""How long a rank blocked on a transfer takes to go on once the transfer is in, with the
host's cores idle and with other ranks computing.

A ring rank that waits for a hop blocks in `wait`; when the hop arrives, gloo's thread
has to run to complete it and the rank's thread to return, each on a core that other
ranks' computes may hold. The simulator's host model shares the cores as a fluid (a
rank that goes on gets its share at once), so it has no such latency. Here, on `n_gpus`
gloo processes (hw.spawn): rank 0 sends a small message (64 KB) to rank 1, stamping the
time just before the send, and rank 1, blocked in the receive's `wait`, stamps the time
it returns (perf_counter: one clock for every process of a host). With `busy`, rank 0
computes a 1024-token forward block before each send and ranks 2.. compute blocks back
to back meanwhile (as a ring's other ranks do); without, rank 0 sleeps as long between
sends and the others wait. Prints, per GPU count, the median and 90th percentile of the
latency both ways; `--json` writes every sample.

    .venv/bin/python bench/experiments/wakeup.py [--gpus 2 3 4] [--samples 40] [--json out.json [--force]]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from sim.files import kept_file, write_json  # noqa: E402

MESSAGE_BYTES = 64 * 1024
BLOCK_TOKENS = 1024


def worker(ctx, plan: dict) -> dict | None:
    """One rank: rank 0 sends, rank 1 waits and stamps, the others compute or idle."""
    import torch
    import torch.distributed as dist

    from hw.bench.measure import make_block
    from hw.blocks import select_block_ops

    torch.set_num_threads(1)
    ops = select_block_ops("cpu", "fp32", 64, "auto")
    q, k, v, _ = make_block(torch.device("cpu"), "fp32", 1, 8, 8, 64, BLOCK_TOKENS, seed=ctx.rank)
    ops.forward(q, k, v, False)
    t0 = time.perf_counter()
    ops.forward(q, k, v, False)
    block_s = time.perf_counter() - t0
    buf = torch.zeros(MESSAGE_BYTES // 4)
    out: dict = {}
    for busy in (False, True):
        ctx.barrier()
        window_s = plan["samples"] * (block_s + 0.002) + 0.5
        if ctx.rank == 0:
            stamps = []
            for _ in range(plan["samples"]):
                if busy:
                    ops.forward(q, k, v, False)
                else:
                    time.sleep(block_s)
                stamps.append(time.perf_counter())
                dist.send(buf, 1, group=ctx.group)
            out["sent" if busy else "sent_idle"] = stamps
        elif ctx.rank == 1:
            stamps = []
            for _ in range(plan["samples"]):
                dist.irecv(buf, 0, group=ctx.group).wait()
                stamps.append(time.perf_counter())
            out["got" if busy else "got_idle"] = stamps
        elif busy:
            end = time.perf_counter() + window_s
            while time.perf_counter() < end:
                ops.forward(q, k, v, False)
        ctx.barrier()
    every: list = [None] * ctx.n_gpus
    dist.all_gather_object(every, out, group=ctx.control)
    if ctx.rank != 0:
        return None
    return {"block_s": block_s,
            "idle_s": [g - s for s, g in zip(every[0]["sent_idle"], every[1]["got_idle"])],
            "busy_s": [g - s for s, g in zip(every[0]["sent"], every[1]["got"])]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--samples", type=int, default=40, help="messages per GPU count and state (default 40)")
    ap.add_argument("--json", metavar="FILE", help="also write every sample as JSON")
    ap.add_argument("--force", action="store_true", help="overwrite the --json file")
    a = ap.parse_args(argv)
    if a.samples < 2 or min(a.gpus) < 2:
        print("wakeup: --samples must be at least 2 and GPU counts at least 2", file=sys.stderr)
        return 2
    why = kept_file(a.json, a.force)
    if why:
        print(f"wakeup: {why}", file=sys.stderr)
        return 2
    import wakeup as me  # the ranks import the worker by this name

    from hw.spawn import spawn

    rows = []
    print(f"{MESSAGE_BYTES // 1024} KB from rank 0 to rank 1, blocked in wait; ms from the send to the return "
          f"({os.cpu_count()} cores)")
    print(f"{'ranks':>5}  {'busy processes':>14}  {'idle: median':>12}  {'p90':>6}  {'busy: median':>12}  {'p90':>6}")
    for n_gpus in a.gpus:
        res = spawn(me.worker, n_gpus, args=({"samples": a.samples},), timeout_s=120.0,
                    env={"PYTHONPATH": os.pathsep.join([ROOT, HERE])})[0]
        idle, busy = sorted(res["idle_s"]), sorted(res["busy_s"])
        row = {"n_gpus": n_gpus, "busy_processes": n_gpus - 1, "block_s": res["block_s"],
               "idle_median_s": statistics.median(idle), "idle_p90_s": idle[int(0.9 * (len(idle) - 1))],
               "busy_median_s": statistics.median(busy), "busy_p90_s": busy[int(0.9 * (len(busy) - 1))],
               "idle_s": res["idle_s"], "busy_s": res["busy_s"]}
        rows.append(row)
        print(f"{n_gpus:>5}  {n_gpus - 1:>14}  {row['idle_median_s'] * 1e3:>12.3f}  {row['idle_p90_s'] * 1e3:>6.2f}  "
              f"{row['busy_median_s'] * 1e3:>12.3f}  {row['busy_p90_s'] * 1e3:>6.2f}", flush=True)
    if a.json:
        write_json(a.json, {"message_bytes": MESSAGE_BYTES, "block_tokens": BLOCK_TOKENS, "samples": a.samples,
                            "cores": os.cpu_count(), "rows": rows}, overwrite=a.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
