"""Microbenchmarks for calibration: `ringsim hw bench -o FILE`.

Three parts, each an input to calibrating the simulator's hardware model (docs/design.md,
"Compute time of a block" and "Link time"), measured apart from any run used to
validate it:

- compute: one block of the ring's own per-block operator (`hw.blocks`), forward and
  backward, over a grid of block sizes, head counts, dtypes and masks ("full": every
  pair, "diagonal": the causal square), on one process with a rank's thread count;
- transfer: point-to-point time between two ranks over message sizes, one way (half a
  ping-pong round trip) and both ways at once (each rank sends and receives, as in a
  ring step);
- interference: a block's compute time alone and while a both-ways transfer is in
  flight on the same ranks (on a 2-core host a transfer takes CPU the compute needs;
  on a GPU the compute is timed on its own stream, not until NCCL's is done too);
- concurrency: the same block computed by k processes at once (k = 1, 2, ...), each
  with a rank's thread count, back to back over one common window (a start time and a
  deadline every process shares, so that all k run at once the whole time): how much
  slower compute runs when ranks share the host's cores and memory (CPU only; on GPUs
  each rank has its own device); the forward block, and its backward where the kinds
  hold bwd (time-sliced, a backward can lose more than its share of the cores);
- ring_conditions: k ranks (k = 2, 3, ...) in a ring, as a ring run loads the host:
  every rank computes the block back to back while it sends the block's K/V to the next
  rank and receives from the previous one, exchange after exchange; the compute time
  and the exchange time under those conditions, and both alone on the same ranks (each
  rank computing in turn with the others idle; the exchanges with no compute). The
  forward block with one hop each exchange, as a forward step; where the kinds hold bwd,
  the backward block with two (K/V and dK/dV), as a step of the backward pass. CPU only;
- collective: the collectives the all-gather and Ulysses schemes run (all_gather,
  reduce_scatter, all_to_all, the list forms their kernels call), over shard sizes and
  world sizes, each timed from a barrier to the slowest rank's completion: the input of
  the alpha-beta fit of each collective (sim.calibrate.calibrate_collectives).

Physical bounds are checked before a measurement is kept: k busy processes of t
threads on C cores cannot each run faster than k·t/C times slower than one alone
(sim.calibrate.bound_violation, with 5% for noise). A concurrency entry (against the
1-process entry) or a ring-conditions entry (its compute) below the bound is measured
again, up to three times in all; if every attempt violates it, the last is written
with "rejected" (why) and a one-line message goes to stderr: calibration does not fit
it. A concurrency entry whose median block is more than 1.5 times slower than its bound
is measured again as well, up to three times, and the least slowed attempt is kept
(other load on the host only ever slows a measurement; "attempt_slowdowns" lists them
all). A ring-conditions slowdown is the mean of the samples under sharing (throughput: a
time-sliced process's short blocks are untouched or very slow, and only the mean counts
both) over the median alone (bench.ring_slowdown).

Results are written to FILE as each completes (atomically), so an interrupted run
keeps what it measured; `--resume` measures only what FILE lacks, `--force` starts
over. Progress goes to stderr.

The JSON file (format "ringsim-hw-bench", version 1):

    {"format": "ringsim-hw-bench", "version": 1,
     "complete": true once every requested entry is measured,
     "device": {"kind": "cpu"|"cuda", "name": CPU model or GPU name, "torch": version,
                "backend": "gloo"|"nccl", "threads_per_rank": int|null, "cpu_count": int,
                "hostname": str},
     "settings": {"samples": int, "warmup": int, "quick": bool},
     "compute": [{"kind": "fwd"|"bwd", "dtype": "fp32"|"bf16"|"fp16", "batch", "heads",
                  "kv_heads", "head_dim", "q_tokens", "kv_tokens",
                  "mask": "full"|"diagonal", "flops": work of the block (docs/design.md: 4·d·pairs
                  ·heads·batch, backward 2.5x), "impl": per-block operator,
                  "time_s": [samples], "median_s", "rate_flops": flops / median_s,
                  "reference_s": [samples of the reference block (full forward, 1024
                  tokens): one before the entry's first sample and one after each; CPU
                  only (files before speed_ratios: the samples just before the entry)],
                  "speed_ratios": [each sample over the mean of the references just
                  before and after it; CPU only],
                  "pass_medians_s": [median of each pass over the grid, with
                  --compute-passes 2 or more; the samples above are every pass's],
                  "pass_references_s": [median of each pass's reference_s],
                  "pass_speed_ratios": [median of each pass's speed_ratios]}],
     "reference_block": {the block reference_s times: kind, dtype, batch, heads, kv_heads,
                         head_dim, q_tokens, kv_tokens, mask, flops; CPU only},
     "transfer": [{"bytes", "direction": "one_way"|"both_ways", "time_s": [samples],
                   "median_s", "gbps": bytes / median_s / 1e9}],
     "interference": [{"kind": "fwd", "dtype", "batch", "heads", "kv_heads", "head_dim",
                       "q_tokens", "kv_tokens", "mask", "flops", "bytes" (each way),
                       "compute_alone_s": [samples], "compute_with_transfer_s": [samples],
                       "median_alone_s", "median_with_s", "slowdown": with / alone}],
     "concurrency": [{"processes": k, "kind": "fwd"|"bwd", "dtype", "batch", "heads", "kv_heads",
                      "head_dim", "q_tokens", "kv_tokens", "mask", "flops",
                      "threads_per_rank", "time_s": [samples of every process, all at once],
                      "time_by_process_s": [[the same samples, one list per process]],
                      "alone_s": [samples of every process alone, just before], "median_s",
                      "rounds": [{"alone_s", "time_s", "time_by_process_s"}: the samples
                                 of each of the rounds the entry alternated alone and
                                 shared, every process's],
                      "mean_s", "slowdown": the rounds' median of mean shared / median
                      alone (k > 1),
                      "bound": k·threads/cores (at least 1), "attempts": int,
                      "rejected": why (only when every attempt broke the bound),
                      "pass": which of the --host-passes measured it (1 in older files)}],
     "ring_conditions": [{"processes": k, "kind": "fwd"|"bwd", "dtype", "batch", "heads",
                          "kv_heads", "head_dim", "q_tokens", "kv_tokens", "mask", "flops",
                          "bytes" (each way per hop), "hops": hops each exchange (bwd: 2,
                          K/V and dK/dV; absent: 1), "threads_per_rank",
                          "compute_alone_s", "transfer_alone_s", "compute_ring_s",
                          "transfer_ring_s": [samples of every rank],
                          "compute_ring_by_process_s": [[compute_ring_s, one list per rank]],
                          "compute_slowdown", "transfer_slowdown": mean ring / median alone,
                          "bound", "attempts", "rejected", "pass" (as in concurrency)}],
     "collective": [{"op": "allgather"|"reducescatter"|"alltoall", "world": ranks,
                     "shard_bytes": a rank's piece (all-gather input, reduce-scatter output,
                     all-to-all piece for one peer), "sent_bytes": what each rank sends,
                     (world - 1) x shard_bytes, "time_s": [samples, each the slowest rank's],
                     "median_s", "gbps": sent_bytes / median_s / 1e9}]}


Files written before ring_conditions (or its backward entries) and the concurrency
fields after "median_s" existed lack them; calibration reads them as before.

Times are seconds (CUDA events on GPU, perf_counter on CPU); samples follow `warmup`
untimed calls. Every entry also has "load_avg_1m", the host's 1-minute load average when
it completed: on a shared host, a high value flags an entry measured under contention.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import statistics
import sys
import time
from typing import Any, Callable

from sim.calibrate import bound_violation, round_ratios
from sim.config import BWD_FLOPS_FACTOR, DTYPE_BYTES
from sim.contention import sharing_bound
from sim.errors import RingsimError
from sim.trace import read_json, write_json

FORMAT = "ringsim-hw-bench"
VERSION = 1
PARTS = ("compute", "transfer", "interference", "concurrency", "ring_conditions", "collective")
COLLECTIVES = ("allgather", "reducescatter", "alltoall")

QUICK = dict(dtypes="fp32", heads="4", head_dims="64", blocks="128,256,512", masks="full,diagonal",
             kinds="fwd", sizes="64K,1M", interference_blocks="512", interference_sizes="1M",
             concurrency="1,2", ring_processes="2,3", collectives="allgather,reducescatter,alltoall",
             collective_worlds="2,3", collective_sizes="64K,1M", samples=3, warmup=1, compute_passes=1,
             host_passes=1)
FULL = dict(dtypes="fp32,bf16", heads="8", head_dims="64", blocks="256,512,1024,2048,4096",
            masks="full,diagonal", kinds="fwd,bwd", sizes="64K,256K,1M,4M,16M,64M",
            interference_blocks="1024,2048", interference_sizes="kv,8M", concurrency="1,2,3,4",
            ring_processes="2,3,4", collectives="allgather,reducescatter,alltoall", collective_worlds="2,3,4",
            collective_sizes="64K,256K,1M,4M", samples=5, warmup=2, compute_passes=2, host_passes=3)


CONCURRENCY_ROUNDS = 3
"""Rounds of (alone, shared) a concurrency entry alternates: see _concurrency_worker."""

HOST_PASSES = ("start", "middle", "end")
"""Where the host parts' passes run, in time order, with --host-passes 3: before the
compute part, after the transfer and interference parts (the one place of a single pass)
and after the collectives; two passes take the last two places."""


def add_bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="JSON results, written as they complete")
    p.add_argument("--force", action="store_true", help="overwrite FILE and start over")
    p.add_argument("--resume", action="store_true", help="keep FILE's results and measure the rest")
    p.add_argument("--quick", action="store_true", help="a small grid (seconds, for a smoke test)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {','.join(PARTS)} (default all)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="(default: cuda when available)")
    p.add_argument("--dtypes", default=None, help=f"comma list (default {FULL['dtypes']})")
    p.add_argument("--heads", default=None, help=f"query head counts, comma list (default {FULL['heads']})")
    p.add_argument("--kv-heads", type=int, default=None, help="K/V heads of every entry (default: = heads)")
    p.add_argument("--head-dims", default=None, help=f"comma list (default {FULL['head_dims']})")
    p.add_argument("--batch", type=int, default=1, help="(default 1)")
    p.add_argument("--blocks", default=None, help=f"block sizes in tokens, comma list (default {FULL['blocks']})")
    p.add_argument("--masks", default=None, help="comma list of full,diagonal (default both)")
    p.add_argument("--kinds", default=None, help=f"comma list of fwd,bwd (default {FULL['kinds']})")
    p.add_argument("--sizes", default=None,
                   help=f"transfer sizes in bytes (K/M/G suffixes), comma list (default {FULL['sizes']})")
    p.add_argument("--interference-blocks", default=None,
                   help=f"block sizes for the interference part (default {FULL['interference_blocks']})")
    p.add_argument("--interference-sizes", default=None,
                   help="bytes each way during the compute; 'kv' is the block's K/V "
                        f"(default {FULL['interference_sizes']})")
    p.add_argument("--concurrency", default=None,
                   help=f"process counts computing at once, comma list (default {FULL['concurrency']}; CPU only): "
                        "the interference part's first block forward, and backward where --kinds holds bwd, "
                        f"in {CONCURRENCY_ROUNDS} rounds alternating alone and shared")
    p.add_argument("--collectives", default=None,
                   help=f"collectives of the collective part, comma list (default {FULL['collectives']})")
    p.add_argument("--collective-worlds", default=None,
                   help=f"world sizes of the collective part, comma list (default {FULL['collective_worlds']})")
    p.add_argument("--collective-sizes", default=None,
                   help=f"shard sizes of the collective part, bytes (default {FULL['collective_sizes']})")
    p.add_argument("--ring-processes", default=None,
                   help="ranks of the ring-conditions part, comma list "
                        f"(default {FULL['ring_processes']}; CPU only)")
    p.add_argument("--samples", type=int, default=None, help=f"timed calls per entry (default {FULL['samples']})")
    p.add_argument("--compute-passes", type=int, default=None,
                   help="times the compute grid is measured, the second pass in reverse order; each entry "
                        f"keeps every pass, calibration their mean (default {FULL['compute_passes']}, 1 with --quick)")
    p.add_argument("--host-passes", type=int, default=None,
                   help="times the concurrency and ring-conditions parts are measured, minutes apart (1 to 3: "
                        "before the compute part, after the interference part, at the end); calibration takes "
                        "each count's median over the passes, so that a spell of the host's cores serving "
                        f"something else weighs on one pass only (default {FULL['host_passes']}, 1 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help=f"untimed calls first (default {FULL['warmup']})")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads of the compute part, as a rank of a 2-rank run has (default: cores / 2)")
    p.add_argument("--block-impl", choices=["auto", "fused", "matmul"], default="auto")
    p.add_argument("--timeout", type=float, default=120.0, help="process-group timeout, s (default 120)")


# ---- parsing --------------------------------------------------------------------------

def _list(text: str, what: str, conv: Callable[[str], Any] = str) -> list:
    try:
        items = [conv(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise RingsimError(f"--{what}: cannot read {text!r}") from None
    if not items:
        raise RingsimError(f"--{what}: empty list")
    return items


def parse_bytes(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in "KMG" else t
    value = int(float(digits) * scale)
    if value <= 0:
        raise ValueError(text)
    return value


def _positive(v: int) -> int:
    if v <= 0:
        raise ValueError(v)
    return v


def _at_least_2(v: int) -> int:
    if v < 2:
        raise ValueError(v)
    return v


def plan_from_args(a: argparse.Namespace) -> dict[str, Any]:
    base = QUICK if a.quick else FULL

    def pick(name: str) -> Any:
        v = getattr(a, name)
        return base[name] if v is None else v

    plan = {
        "parts": _list(a.parts, "parts"),
        "dtypes": _list(pick("dtypes"), "dtypes"),
        "heads": _list(pick("heads"), "heads", lambda x: _positive(int(x))),
        "head_dims": _list(pick("head_dims"), "head-dims", lambda x: _positive(int(x))),
        "blocks": _list(pick("blocks"), "blocks", lambda x: _positive(int(x))),
        "masks": _list(pick("masks"), "masks"),
        "kinds": _list(pick("kinds"), "kinds"),
        "sizes": _list(pick("sizes"), "sizes", parse_bytes),
        "interference_blocks": _list(pick("interference_blocks"), "interference-blocks",
                                     lambda x: _positive(int(x))),
        "interference_sizes": _list(pick("interference_sizes"), "interference-sizes",
                                    lambda x: "kv" if x.lower() == "kv" else parse_bytes(x)),
        "concurrency": _list(pick("concurrency"), "concurrency", lambda x: _positive(int(x))),
        "collectives": _list(pick("collectives"), "collectives"),
        "collective_worlds": _list(pick("collective_worlds"), "collective-worlds", lambda x: _positive(int(x))),
        "collective_sizes": _list(pick("collective_sizes"), "collective-sizes", parse_bytes),
        "ring_processes": _list(pick("ring_processes"), "ring-processes", lambda x: _at_least_2(int(x))),
        "samples": pick("samples"), "warmup": pick("warmup"), "compute_passes": pick("compute_passes"),
        "host_passes": pick("host_passes"),
        "batch": a.batch,
        "kv_heads": a.kv_heads, "quick": a.quick,
    }
    for name, allowed in (("parts", PARTS), ("dtypes", tuple(DTYPE_BYTES)), ("masks", ("full", "diagonal")),
                          ("kinds", ("fwd", "bwd")), ("collectives", COLLECTIVES)):
        bad = [x for x in plan[name] if x not in allowed]
        if bad:
            raise RingsimError(f"--{name}: {', '.join(map(str, bad))} not among {', '.join(allowed)}")
    if "collective" in plan["parts"] and min(plan["collective_worlds"]) < 2:
        raise RingsimError("--collective-worlds: a collective needs two ranks or more")
    if plan["samples"] <= 0 or plan["warmup"] < 0 or a.batch <= 0 or plan["compute_passes"] <= 0:
        raise RingsimError("--samples, --compute-passes and --batch must be positive, --warmup non-negative")
    if not 1 <= plan["host_passes"] <= len(HOST_PASSES):
        raise RingsimError(f"--host-passes must be 1 to {len(HOST_PASSES)}, got {plan['host_passes']}")
    for h in plan["heads"]:
        if plan["kv_heads"] is not None and (plan["kv_heads"] <= 0 or h % plan["kv_heads"]):
            raise RingsimError(f"--kv-heads {plan['kv_heads']} must divide every head count (got {h})")
    return plan


# ---- measuring --------------------------------------------------------------------------

def _timer(device) -> Callable[[Callable[[], Any], int, int], list[float]]:
    import torch

    def samples(fn: Callable[[], Any], n: int, warmup: int) -> list[float]:
        for _ in range(warmup):
            fn()
        out = []
        for _ in range(n):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                out.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
        return out
    return samples


def time_compute(fn: Callable[[], Any], device) -> float:
    """Seconds `fn`'s work takes on the compute stream alone.

    On CUDA, events recorded on the current stream around `fn` and a wait for the end
    event only: a device-wide synchronize would also wait for NCCL's stream, and so
    time max(compute, transfer) while a transfer is in flight. On CPU, wall time.
    """
    import torch

    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def block_flops(kind: str, batch: int, heads: int, head_dim: int, q_tokens: int, kv_tokens: int,
                mask: str) -> float:
    pairs = q_tokens * (q_tokens + 1) // 2 if mask == "diagonal" else q_tokens * kv_tokens
    return (BWD_FLOPS_FACTOR if kind == "bwd" else 1.0) * 4.0 * head_dim * pairs * heads * batch


def make_block(device, dtype: str, batch: int, heads: int, kv_heads: int, head_dim: int,
               tokens: int, seed: int = 0):
    """q, k, v, dout of one block as the operators take them: (batch, heads, tokens, d)."""
    import torch

    from hw.blocks import TORCH_DTYPES

    gen = torch.Generator().manual_seed(seed)

    def rnd(h: int):
        return torch.randn(batch, tokens, h, head_dim, generator=gen).to(
            device=device, dtype=TORCH_DTYPES[dtype]).transpose(1, 2)

    return rnd(heads), rnd(kv_heads), rnd(kv_heads), rnd(heads)


def _block_fn(entry: dict[str, Any], ops, device) -> Callable[[], Any]:
    """A call computing one block of `ops` (forward or backward) for the shape in `entry`."""
    q, k, v, dout = make_block(device, entry["dtype"], entry["batch"], entry["heads"],
                               entry["kv_heads"], entry["head_dim"], entry["q_tokens"])
    causal = entry["mask"] == "diagonal"
    if entry["kind"] == "fwd":
        def fn():
            return ops.forward(q, k, v, causal)
    else:
        out, lse = ops.forward(q, k, v, causal)

        def fn():
            return ops.backward(dout, q, k, v, out, lse, causal)
    return fn


def _timed(entry: dict[str, Any], ops, times: list[float]) -> dict[str, Any]:
    med = statistics.median(times)
    return {**entry, "impl": ops.describe(), "time_s": times, "median_s": med,
            "rate_flops": entry["flops"] / med if med > 0 else None}


def measure_compute(entry: dict[str, Any], ops, device, samples: int, warmup: int) -> dict[str, Any]:
    """Time one block of `ops` (forward or backward) for the shape in `entry`."""
    return _timed(entry, ops, _timer(device)(_block_fn(entry, ops, device), samples, warmup))


def measure_compute_paired(entry: dict[str, Any], ops, reference: dict[str, Any], ref_ops, samples: int,
                           warmup: int) -> dict[str, Any]:
    """Time one block on the CPU with the reference block timed just before and just after
    every sample: reference, sample, reference, ... (`samples` + 1 references). A shared
    host's speed swings by up to 1.5x over seconds, and a block timed between two
    readings of the reference, a fraction of a second apart, meets the speed they read:
    each sample over the mean of its two references (`speed_ratios`) leaves the block's
    own time in units of the reference's. bench/experiments/paired_reference.py (20 measurements of
    three blocks of 768-2048 tokens over 90 s on the 2-core VM): timed this way they
    spread by 2.3-2.9% (standard deviation over mean), against 7.1-8.1% for their plain
    median and 7.2-12.8% for their median over that of five references taken before."""
    import torch

    cpu = torch.device("cpu")
    fn, ref = _block_fn(entry, ops, cpu), _block_fn(reference, ref_ops, cpu)
    for _ in range(warmup):
        fn()
    ref()
    refs, times = [time_compute(ref, cpu)], []
    for _ in range(samples):
        times.append(time_compute(fn, cpu))
        refs.append(time_compute(ref, cpu))
    ratios = [t / ((a + b) / 2) for t, a, b in zip(times, refs, refs[1:])]
    return {**_timed(entry, ops, times), "reference_s": refs, "speed_ratios": ratios}


def _rank_device(ctx, device_kind: str, threads: int):
    """The device of a spawned rank: its own GPU, or the CPU with `threads` threads."""
    import torch

    if device_kind == "cuda":
        from hw.runner import pick_device

        return pick_device("cuda", ctx.rank, ctx.world)
    torch.set_num_threads(threads)
    return torch.device("cpu")


def _sync(device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _comm_worker(ctx, jobs: list[dict[str, Any]], samples: int, warmup: int, device_kind: str,
                 threads: int, impl: str) -> None:
    """Rank 0 and 1 of the transfer and interference parts; rank 0 reports each entry."""
    import torch
    import torch.distributed as dist

    from hw.blocks import select_block_ops

    device = _rank_device(ctx, device_kind, threads)
    peer = 1 - ctx.rank
    timer = _timer(device)

    def exchange(send, recv) -> None:
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer, ctx.group),
                                        dist.P2POp(dist.irecv, recv, peer, ctx.group)])
        for w in works:
            w.wait()

    for job in jobs:
        if job["part"] == "transfer":
            n = job["bytes"]
            send = torch.ones(n, dtype=torch.uint8, device=device)
            recv = torch.empty(n, dtype=torch.uint8, device=device)
            if job["direction"] == "one_way":
                def fn():
                    if ctx.rank == 0:
                        dist.send(send, peer, group=ctx.group)
                        dist.recv(recv, peer, group=ctx.group)
                    else:
                        dist.recv(recv, peer, group=ctx.group)
                        dist.send(send, peer, group=ctx.group)
                    _sync(device)
                ctx.barrier()
                times = [t / 2 for t in timer(fn, samples, warmup)]  # half a round trip
            else:
                def fn():
                    ctx.barrier()
                    t0 = time.perf_counter()
                    exchange(send, recv)
                    _sync(device)
                    return time.perf_counter() - t0
                for _ in range(warmup):
                    fn()
                times = [fn() for _ in range(samples)]
            med = statistics.median(times)
            entry = {"bytes": n, "direction": job["direction"], "time_s": times, "median_s": med,
                     "gbps": n / med / 1e9 if med > 0 else None}
        else:
            e = job["entry"]
            ops = select_block_ops(device.type, e["dtype"], e["head_dim"], impl)
            q, k, v, _ = make_block(device, e["dtype"], e["batch"], e["heads"], e["kv_heads"],
                                    e["head_dim"], e["q_tokens"])
            causal = e["mask"] == "diagonal"
            send = torch.ones(e["bytes"], dtype=torch.uint8, device=device)
            recv = torch.empty(e["bytes"], dtype=torch.uint8, device=device)
            alone, with_transfer = [], []

            def compute() -> None:
                ops.forward(q, k, v, causal)

            for i in range(warmup + samples):
                ctx.barrier()
                _sync(device)
                t_alone = time_compute(compute, device)
                ctx.barrier()
                works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer, ctx.group),
                                                dist.P2POp(dist.irecv, recv, peer, ctx.group)])
                # the compute's own stream: the transfer runs on NCCL's (on CUDA)
                t_with = time_compute(compute, device)
                for w in works:
                    w.wait()
                _sync(device)
                if i >= warmup:
                    alone.append(t_alone)
                    with_transfer.append(t_with)
            ma, mw = statistics.median(alone), statistics.median(with_transfer)
            entry = {**e, "compute_alone_s": alone, "compute_with_transfer_s": with_transfer,
                     "median_alone_s": ma, "median_with_s": mw,
                     "slowdown": mw / ma if ma > 0 else None}
        if ctx.rank == 0:
            ctx.report((job["part"], entry))


# ---- the command ----------------------------------------------------------------------

def _key(part: str, e: dict[str, Any]) -> tuple:
    if part == "compute":
        return tuple(e[k] for k in ("kind", "dtype", "batch", "heads", "kv_heads", "head_dim",
                                    "q_tokens", "kv_tokens", "mask"))
    if part == "transfer":
        return (e["bytes"], e["direction"])
    if part == "collective":
        return (e["op"], e["world"], e["shard_bytes"])
    if part == "concurrency":
        return (e.get("kind", "fwd"),) + tuple(e[k] for k in ("processes", "dtype", "batch", "heads", "kv_heads",
                                                              "head_dim", "q_tokens", "mask")) + (e.get("pass", 1),)
    if part == "ring_conditions":
        return ((e.get("kind", "fwd"), e.get("hops", 1))
                + tuple(e[k] for k in ("processes", "dtype", "batch", "heads", "kv_heads", "head_dim", "q_tokens",
                                       "mask", "bytes")) + (e.get("pass", 1),))
    return tuple(e[k] for k in ("dtype", "batch", "heads", "kv_heads", "head_dim", "q_tokens",
                                "mask", "bytes"))


def _describe_device(device, backend: str, threads: int | None) -> dict[str, Any]:
    import torch

    from hw.runner import describe_device

    return {"kind": device.type, "name": describe_device(device), "torch": torch.__version__,
            "backend": backend, "threads_per_rank": threads if device.type == "cpu" else None,
            "cpu_count": os.cpu_count(), "hostname": socket.gethostname()}


def _open_doc(a: argparse.Namespace, device_desc: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    path = a.output
    if os.path.exists(path):
        if a.resume and not a.force:
            doc = read_json(path, what="bench file")
            if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
                raise RingsimError(f"{path} is not a ringsim-hw-bench file (version {VERSION})")
            old = doc.get("device", {})
            if (old.get("kind"), old.get("name")) != (device_desc["kind"], device_desc["name"]):
                raise RingsimError(f"{path} was measured on {old.get('name')!r}, not on this "
                                   f"{device_desc['name']!r}; use another file or --force")
            for part in PARTS:
                if not isinstance(doc.get(part, []), list):
                    raise RingsimError(f"{path}: {part} must be a list")
                doc.setdefault(part, [])
            return doc
        if not a.force:
            raise RingsimError(f"{path} exists; pass --force to overwrite it or --resume to continue it")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise RingsimError(f"cannot write {path}: no directory {parent}")
    return {"format": FORMAT, "version": VERSION, "complete": False, "device": device_desc,
            "settings": {"samples": plan["samples"], "warmup": plan["warmup"], "quick": plan["quick"]},
            **{part: [] for part in PARTS}}


def _fmt(entry_part: str, e: dict[str, Any]) -> str:
    if entry_part == "compute":
        return (f"compute {e['kind']} {e['dtype']} b={e['batch']} h={e['heads']}/{e['kv_heads']} "
                f"d={e['head_dim']} {e['q_tokens']}x{e['kv_tokens']} {e['mask']}: "
                f"{e['median_s'] * 1e3:.3f} ms, {e['rate_flops'] / 1e9:.2f} GFLOP/s")
    if entry_part == "concurrency":
        return (f"concurrency {e['processes']} processes, {e.get('kind', 'fwd')} {e['dtype']} {e['q_tokens']} tokens: "
                f"{e['mean_s'] * 1e3:.3f} ms per block" + _checked(e) + _pass(e))
    if entry_part == "ring_conditions":
        return (f"ring conditions {e['processes']} ranks, {e.get('kind', 'fwd')} {e['q_tokens']} tokens, "
                f"{e.get('hops', 1)} x {e['bytes']} B per exchange: "
                f"compute x{e['compute_slowdown']:.2f}, transfer x{e['transfer_slowdown']:.2f}" + _checked(e)
                + _pass(e))
    if entry_part == "collective":
        return (f"collective {e['op']} world {e['world']}, {e['shard_bytes']} B shard: "
                f"{e['median_s'] * 1e3:.3f} ms, {e['gbps']:.3f} GB/s sent per rank")
    if entry_part == "transfer":
        return (f"transfer {e['direction']} {e['bytes']} B: {e['median_s'] * 1e3:.3f} ms, "
                f"{e['gbps']:.3f} GB/s")
    return (f"interference {e['dtype']} {e['q_tokens']} tokens, {e['bytes']} B each way: "
            f"{e['median_alone_s'] * 1e3:.3f} ms alone, {e['median_with_s'] * 1e3:.3f} ms with "
            f"transfer (x{e['slowdown']:.2f})")


def _pass(e: dict[str, Any]) -> str:
    return f", pass {e['pass']}" if e.get("pass", 1) > 1 else ""


def _checked(e: dict[str, Any]) -> str:
    if e.get("rejected"):
        return f" REJECTED after {e['attempts']} attempts"
    return f" (bound x{e['bound']:.2f})" if "bound" in e else ""


# ---- physical bounds ------------------------------------------------------------------

MAX_ATTEMPTS = 3
"""Measurements of a concurrency or ring-conditions entry before one breaking a physical
bound is given up on (written as rejected)."""
SUSPECT = 1.5
"""A slowdown this many times its physical bound is measured again (and the least kept)."""


def add_pass(entry: dict[str, Any], again: dict[str, Any]) -> None:
    """Fold another pass over a compute entry into it, in place: its samples and its
    reference block's samples join the entry's, and every pass's median and reference
    median are listed (`pass_medians_s`, `pass_references_s`), and so are the samples'
    ratios to their references and each pass's median of them (`speed_ratios`,
    `pass_speed_ratios`). A shared host's speed
    swings by 20% within seconds; a run meets the host at its typical speed, not at the
    best moment of a pass, so calibration (sim.calibrate) takes the mean of the passes."""
    listed = (("reference_s", "pass_references_s"), ("speed_ratios", "pass_speed_ratios"))
    if "pass_medians_s" not in entry:
        entry["pass_medians_s"] = [entry["median_s"]]
        for key, per_pass in listed:
            if entry.get(key):
                entry[per_pass] = [statistics.median(entry[key])]
    entry["pass_medians_s"].append(again["median_s"])
    entry["time_s"] = list(entry["time_s"]) + list(again["time_s"])
    for key, per_pass in listed:
        if again.get(key) and per_pass in entry:
            entry[per_pass].append(statistics.median(again[key]))
            entry[key] = list(entry[key]) + list(again[key])
    entry["median_s"] = statistics.median(entry["time_s"])
    if entry.get("flops") and entry["median_s"] > 0:
        entry["rate_flops"] = entry["flops"] / entry["median_s"]


def ring_slowdown(shared_s: list[float], alone_s: list[float]) -> float:
    """How much slower under sharing than alone: the mean of the samples taken back to
    back under sharing (their throughput: a time-sliced process's calls are either
    untouched or very slow, and only the mean counts both) over the median alone (the
    uncontended time, as the compute part measures it). 0 when nothing was measured."""
    if not shared_s or not alone_s or statistics.median(alone_s) <= 0:
        return 0.0
    return statistics.fmean(shared_s) / statistics.median(alone_s)


def round_slowdown(entry: dict[str, Any], median: bool = False) -> float:
    """A concurrency entry's slowdown: the median over its rounds of each round's shared
    samples over its samples alone (sim.calibrate.round_ratios: their mean over the
    median alone, as ring_slowdown; with `median`, their medians' ratio), so that the
    host's drift between rounds cancels; an entry without rounds (older files) over all
    its samples. 0 when nothing was measured."""
    ratios = round_ratios(entry.get("rounds"), not median, "concurrency entry")
    if ratios:
        return statistics.median(ratios)
    shared, alone = entry.get("time_s") or [], entry.get("alone_s") or []
    if not median:
        return ring_slowdown(shared, alone)
    return statistics.median(shared) / statistics.median(alone) if shared and alone else 0.0


def concurrency_violation(entry: dict[str, Any], alone_s: float | None, cores: int) -> str | None:
    """Why a concurrency entry cannot be right against the 1-process median block time
    `alone_s` (None: nothing to check against), or None; an entry with rounds is checked
    by its rounds' median (round_slowdown)."""
    if alone_s is None or alone_s <= 0 or entry["processes"] == 1:
        return None
    slowdown = round_slowdown(entry) if entry.get("rounds") else ring_slowdown(entry["time_s"], [alone_s])
    return bound_violation(slowdown, entry["processes"], entry["threads_per_rank"], cores)


def ring_violation(entry: dict[str, Any], cores: int) -> str | None:
    """Why a ring-conditions entry's compute slowdown cannot be right, or None."""
    return bound_violation(entry["compute_slowdown"], entry["processes"], entry["threads_per_rank"], cores)


def measure_within_bounds(measure: Callable[[], dict[str, Any]],
                          violation: Callable[[dict[str, Any]], str | None], what: str,
                          attempts: int = MAX_ATTEMPTS,
                          slowdown: Callable[[dict[str, Any]], float] | None = None) -> dict[str, Any]:
    """`measure()` until `violation` finds nothing wrong, `attempts` times at most. The
    entry gets "attempts"; if the last still breaks its bound it gets "rejected" (why)
    and stderr gets one line.

    With `slowdown`, an entry more than SUSPECT times slower than its physical bound is
    measured again too (other load on the host only ever slows a measurement), and of
    the attempts that keep the bound the least slowed one is kept; every attempt's
    slowdown is recorded ("attempt_slowdowns")."""
    kept: dict[str, Any] | None = None
    seen: list[float] = []
    for attempt in range(1, attempts + 1):
        entry = measure()
        entry["attempts"] = attempt
        why = violation(entry)
        if why is not None:
            continue
        if slowdown is None:
            return entry
        seen.append(slowdown(entry))
        if kept is None or seen[-1] < slowdown(kept):
            kept = entry
        if seen[-1] <= SUSPECT * entry["bound"]:
            break
    if kept is not None:
        kept["attempts"] = attempt
        kept["attempt_slowdowns"] = seen
        return kept
    entry["rejected"] = why
    print(f"{what}: rejected after {attempts} attempts: {why}", file=sys.stderr, flush=True)
    return entry


def _plan_jobs(plan: dict[str, Any], seen: dict[str, set]) -> tuple[list, list]:
    """The entries still to measure: compute entries, and jobs for the two-rank parts.

    `seen` holds the keys measured already; each planned key is added, so an entry
    named twice (a 'kv' size equal to an explicit one) is measured once.
    """
    def fresh(part: str, entry: dict[str, Any]) -> bool:
        key = _key(part, entry)
        if key in seen[part]:
            return False
        seen[part].add(key)
        return True

    b, kvh = plan["batch"], plan["kv_heads"]
    compute = []
    if "compute" in plan["parts"]:
        for dt, h, d, c, mask, kind in itertools.product(plan["dtypes"], plan["heads"], plan["head_dims"],
                                                        plan["blocks"], plan["masks"], plan["kinds"]):
            e = {"kind": kind, "dtype": dt, "batch": b, "heads": h, "kv_heads": kvh or h,
                 "head_dim": d, "q_tokens": c, "kv_tokens": c, "mask": mask,
                 "flops": block_flops(kind, b, h, d, c, c, mask)}
            if fresh("compute", e):
                compute.append(e)
    comm = []
    if "transfer" in plan["parts"]:
        for n, direction in itertools.product(plan["sizes"], ("one_way", "both_ways")):
            if fresh("transfer", {"bytes": n, "direction": direction}):
                comm.append({"part": "transfer", "bytes": n, "direction": direction})
    if "interference" in plan["parts"]:
        dt, h, d = plan["dtypes"][0], plan["heads"][0], plan["head_dims"][0]
        for c, size in itertools.product(plan["interference_blocks"], plan["interference_sizes"]):
            nbytes = 2 * b * (kvh or h) * c * d * DTYPE_BYTES[dt] if size == "kv" else size
            e = {**full_forward_block(dt, b, h, kvh or h, d, c), "bytes": nbytes}
            if fresh("interference", e):
                comm.append({"part": "interference", "entry": e})
    return compute, comm


def block_kv_bytes(block: dict[str, Any]) -> int:
    """The bytes of a block's K and V: what a ring-conditions entry sends each exchange."""
    return 2 * block["batch"] * block["kv_heads"] * block["q_tokens"] * block["head_dim"] * DTYPE_BYTES[block["dtype"]]


def full_forward_block(dtype: str, batch: int, heads: int, kv_heads: int, head_dim: int,
                       tokens: int, kind: str = "fwd") -> dict[str, Any]:
    """A square block without a mask, as the parts that time one block describe it (a
    forward one unless `kind` says bwd)."""
    return {"kind": kind, "dtype": dtype, "batch": batch, "heads": heads, "kv_heads": kv_heads,
            "head_dim": head_dim, "q_tokens": tokens, "kv_tokens": tokens, "mask": "full",
            "flops": block_flops(kind, batch, heads, head_dim, tokens, tokens, "full")}


REFERENCE_TOKENS = 1024
"""The compute part's reference block (about 30 ms on 2 CPU cores): see _reference_entry."""


def _reference_entry(plan: dict[str, Any]) -> dict[str, Any]:
    """The block the compute part times before every entry on CPU (full forward, 1024
    tokens, the plan's first dtype and shape): a shared host's speed drifts by up to 20%
    over tens of seconds, and `ringsim calibrate` brings every entry to one speed with it
    (sim.calibrate)."""
    h = plan["heads"][0]
    return full_forward_block(plan["dtypes"][0], plan["batch"], h, plan["kv_heads"] or h, plan["head_dims"][0],
                              REFERENCE_TOKENS)


def _host_block(plan: dict[str, Any], processes: int, kind: str = "fwd") -> dict[str, Any]:
    """The interference part's first block, as the host parts compute it with `processes`
    (its forward, or with kind bwd its backward)."""
    h = plan["heads"][0]
    return {"processes": processes, **full_forward_block(plan["dtypes"][0], plan["batch"], h, plan["kv_heads"] or h,
                                                         plan["head_dims"][0], plan["interference_blocks"][0],
                                                         kind)}


def host_pass_places(passes: int) -> tuple[str, ...]:
    """Where each of `passes` passes of the host parts runs, in time order (HOST_PASSES)."""
    return HOST_PASSES[1:2] if passes == 1 else HOST_PASSES[len(HOST_PASSES) - passes:]


def _plan_host(plan: dict[str, Any], part: str, counts: list[int], seen: dict[str, set],
               kinds: tuple[str, ...] = ("fwd",), pass_: int = 1) -> list[dict[str, Any]]:
    if part not in plan["parts"]:
        return []
    out = []
    for kind in kinds:
        for k in counts:
            e = {**_host_block(plan, k, kind), "pass": pass_}
            if part == "ring_conditions":
                e["bytes"] = block_kv_bytes(e)
                if kind == "bwd":
                    e["hops"] = 2
            key = _key(part, e)
            if key not in seen[part]:
                seen[part].add(key)
                out.append(e)
    return out


def _plan_concurrency(plan: dict[str, Any], seen: dict[str, set], pass_: int = 1) -> list[dict[str, Any]]:
    """The interference part's block computed by each planned number of processes, one
    process first (the bound checks compare with it): its forward, and its backward too
    where the plan's kinds hold bwd. Time-sliced processes can lose more than their share
    of the cores on a backward block: in probes on the 2-core VM four processes ran a
    1024-token backward 2.2-3.5x slower than one, the forward 2.0x."""
    kinds = ("fwd", "bwd") if "bwd" in plan["kinds"] else ("fwd",)
    return _plan_host(plan, "concurrency", sorted(set(plan["concurrency"]) | {1}), seen, kinds, pass_)


def _plan_ring(plan: dict[str, Any], seen: dict[str, set], pass_: int = 1) -> list[dict[str, Any]]:
    """The interference part's block and its K/V in a ring of each planned size: its
    forward beside one hop, as a forward step; and where the plan's kinds hold bwd, its
    backward beside two (K/V, then dK/dV), as a step of the ring's backward pass (hw.ring):
    calibration fits the transfers' share of the cores to both kinds, each with its own
    in-flight slowdown (sim.calibrate.fit_ring_conditions)."""
    kinds = ("fwd", "bwd") if "bwd" in plan["kinds"] else ("fwd",)
    return _plan_host(plan, "ring_conditions", sorted(set(plan["ring_processes"])), seen, kinds, pass_)


def _common_window(ctx, estimate_s: float, blocks: int) -> tuple[float, float]:
    """(start, deadline) on the host's monotonic clock, the same for every rank: long
    enough for `blocks` blocks of the slowest rank's estimate at full sharing."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([time.perf_counter() + 0.05, estimate_s], dtype=torch.float64)
    if ctx.world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.control)
    start, est = float(t[0]), float(t[1])
    return start, start + max(0.2, blocks * est * max(1.0, ctx.world / 2) * 1.5)


def _concurrency_worker(ctx, entry: dict[str, Any], samples: int, warmup: int, threads: int,
                        impl: str, rounds: int = CONCURRENCY_ROUNDS) -> dict[str, Any]:
    """Each process first computes the block alone, one after another while the others
    wait (`alone_s`), then all compute it back to back over one common window (`time_s`:
    only calls that end inside the window count, all were running); `rounds` times, each
    round's samples also kept apart (`rounds`). The slowdown is the ratio of the two,
    measured seconds apart in the same processes: a host whose speed drifts between the
    compute part and this one (20% on a shared VM) does not pass for sharing, and one
    that drifts within the entry (on the 2-core VM a backward block alone took 110 ms and
    165 ms a few seconds apart) lands on both sides of one round's ratio, of which the
    calibration takes the median (round_slowdown)."""
    import torch

    from hw.blocks import select_block_ops

    torch.set_num_threads(threads)
    ops = select_block_ops("cpu", entry["dtype"], entry["head_dim"], impl)
    block = _host_block_call(ops, entry, ctx.rank)

    def compute() -> float:
        t0 = time.perf_counter()
        block()
        return time.perf_counter() - t0

    by_round = []
    for i in range(rounds):
        alone: list[float] = []
        for r in range(ctx.world):
            ctx.barrier()
            if r == ctx.rank:
                for _ in range(max(1, warmup) if i == 0 else 1):
                    compute()
                alone = [compute() for _ in range(samples)]
        start, deadline = _common_window(ctx, statistics.median(alone), samples)
        while time.perf_counter() < start:
            pass
        times = []
        while True:
            t0 = time.perf_counter()
            block()
            t1 = time.perf_counter()
            if t1 > deadline:
                break
            times.append(t1 - t0)
        ctx.barrier()
        by_round.append({"alone_s": alone, "time_s": times})
    return {"time_s": [t for r in by_round for t in r["time_s"]],
            "alone_s": [t for r in by_round for t in r["alone_s"]], "rounds": by_round}


def gather_concurrency(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """The samples of every process of a _concurrency_worker run, as one entry holds
    them: all together, by process, and by round."""
    times = [t for r in per_rank for t in r["time_s"]]
    return {"time_s": times, "alone_s": [t for r in per_rank for t in r["alone_s"]],
            "time_by_process_s": [r["time_s"] for r in per_rank],
            "rounds": [{**{name: [t for r in per_rank for t in r["rounds"][i][name]] for name in ("alone_s", "time_s")},
                        "time_by_process_s": [r["rounds"][i]["time_s"] for r in per_rank]}
                       for i in range(len(per_rank[0]["rounds"]))],
            "median_s": statistics.median(times), "mean_s": statistics.fmean(times)}


def _plan_collectives(plan: dict[str, Any], seen: dict[str, set]) -> dict[int, list[dict[str, Any]]]:
    """The collective entries still to measure, by world size (one process group each)."""
    out: dict[int, list[dict[str, Any]]] = {}
    if "collective" not in plan["parts"]:
        return out
    for world, op, shard in itertools.product(plan["collective_worlds"], plan["collectives"],
                                              plan["collective_sizes"]):
        shard = max(4, shard - shard % 4)          # whole fp32 elements: reduce-scatter adds them
        e = {"op": op, "world": world, "shard_bytes": shard, "sent_bytes": (world - 1) * shard}
        key = _key("collective", e)
        if key not in seen["collective"]:
            seen["collective"].add(key)
            out.setdefault(world, []).append(e)
    return out


def _collective_worker(ctx, entries: list[dict[str, Any]], samples: int, warmup: int, device_kind: str,
                       threads: int) -> None:
    """Every rank runs each collective; a sample is the slowest rank's time from a barrier."""
    import torch
    import torch.distributed as dist

    device = _rank_device(ctx, device_kind, threads)
    n = ctx.world

    for e in entries:
        elems = e["shard_bytes"] // 4
        pieces = [torch.ones(elems, dtype=torch.float32, device=device) for _ in range(n)]
        out = [torch.empty(elems, dtype=torch.float32, device=device) for _ in range(n)]
        mine = torch.ones(elems, dtype=torch.float32, device=device)
        if e["op"] == "allgather":
            def op():
                dist.all_gather(out, mine, group=ctx.group)
        elif e["op"] == "reducescatter":
            def op():
                dist.reduce_scatter(mine, pieces, group=ctx.group)
        else:
            def op():
                dist.all_to_all(out, pieces, group=ctx.group)
        mine_times = []
        for i in range(warmup + samples):
            ctx.barrier()
            t0 = time.perf_counter()
            op()
            _sync(device)
            if i >= warmup:
                mine_times.append(time.perf_counter() - t0)
        every: list[Any] = [None] * n
        dist.all_gather_object(every, mine_times, group=ctx.control)
        if ctx.rank == 0:
            times = [max(ts) for ts in zip(*every)]
            med = statistics.median(times)
            ctx.report(("collective", {**e, "time_s": times, "median_s": med,
                                       "gbps": e["sent_bytes"] / med / 1e9 if med > 0 else None}))


def _host_block_call(ops, entry: dict[str, Any], seed: int) -> Callable[[], Any]:
    """The host parts' block as one call: its forward, or where the entry's kind is bwd its
    backward (on a forward computed once beforehand)."""
    import torch

    q, k, v, dout = make_block(torch.device("cpu"), entry["dtype"], entry["batch"], entry["heads"], entry["kv_heads"],
                               entry["head_dim"], entry["q_tokens"], seed=seed)
    if entry.get("kind", "fwd") == "bwd":
        out, lse = ops.forward(q, k, v, False)
        return lambda: ops.backward(dout, q, k, v, out, lse, False)
    return lambda: ops.forward(q, k, v, False)


def _ring_worker(ctx, entry: dict[str, Any], samples: int, warmup: int, threads: int,
                 impl: str) -> dict[str, list[float]]:
    """One rank of the ring-conditions part: its compute and exchange times alone, then
    under ring conditions (computing back to back while a thread runs exchanges). The
    block is the entry's kind: the plan's entries are forwards; `bench/experiments/ring_backward.py`
    measures backwards too, and with "hops": 2 an exchange posts two hops of "bytes" each
    way one after the other and waits for all, as a backward step has its K/V and its
    dK/dV hop in flight (hw.ring)."""
    import threading

    import torch
    import torch.distributed as dist

    from hw.blocks import select_block_ops

    torch.set_num_threads(threads)
    ops = select_block_ops("cpu", entry["dtype"], entry["head_dim"], impl)
    block = _host_block_call(ops, entry, ctx.rank)
    hops = entry.get("hops", 1)
    sends = [torch.ones(entry["bytes"], dtype=torch.uint8) for _ in range(hops)]
    recvs = [torch.empty(entry["bytes"], dtype=torch.uint8) for _ in range(hops)]
    nxt, prv = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world

    def compute() -> float:
        t0 = time.perf_counter()
        block()
        return time.perf_counter() - t0

    def exchange() -> float:
        t0 = time.perf_counter()
        works = [w for send, recv in zip(sends, recvs)     # one post per hop, as the kernel posts them
                 for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt, ctx.group),
                                                  dist.P2POp(dist.irecv, recv, prv, ctx.group)])]
        for w in works:
            w.wait()
        return time.perf_counter() - t0

    compute_alone: list[float] = []
    for r in range(ctx.world):          # one rank computes at a time, the others wait
        ctx.barrier()
        if r == ctx.rank:
            for _ in range(warmup):
                compute()
            compute_alone = [compute() for _ in range(samples)]
    ctx.barrier()
    for _ in range(max(1, warmup)):
        exchange()
    transfer_alone = [exchange() for _ in range(samples)]
    # exchanges enough to cover `samples` blocks and 0.2 s, the same count on every rank
    block_s, exchange_s = statistics.median(compute_alone), statistics.median(transfer_alone)
    n = torch.tensor([samples * block_s / exchange_s + 2, 0.2 / exchange_s, samples], dtype=torch.float64)
    dist.all_reduce(n, op=dist.ReduceOp.MAX, group=ctx.control)
    n_exchanges = min(1000, int(float(n.max())) + 1)
    transfer_ring: list[float] = []
    done = threading.Event()

    def exchanges() -> None:
        try:
            for _ in range(n_exchanges):
                transfer_ring.append(exchange())
        finally:
            done.set()

    ctx.barrier()
    thread = threading.Thread(target=exchanges, daemon=True)
    thread.start()
    compute_ring = []
    while not done.is_set():
        t = compute()
        if not done.is_set():           # a block that ended after the exchanges is not counted
            compute_ring.append(t)
    thread.join()
    ctx.barrier()
    return {"compute_alone_s": compute_alone, "transfer_alone_s": transfer_alone,
            "compute_ring_s": compute_ring, "transfer_ring_s": transfer_ring[1:] or transfer_ring}


def _measure_host_parts(conc_jobs: list[dict[str, Any]], ring_jobs: list[dict[str, Any]], plan: dict[str, Any],
                        threads: int, cores: int, a: argparse.Namespace,
                        progress: Callable[[str, dict[str, Any]], None]) -> None:
    """One pass of the concurrency and ring-conditions parts (CPU only): each entry in its
    own processes, measured again while it breaks its physical bound (measure_within_bounds),
    then handed to `progress`."""
    from hw.spawn import spawn

    def alone_s(e: dict[str, Any]) -> float | None:
        """The block's time alone, measured beside the entry's shared window."""
        return statistics.median(e["alone_s"]) if e.get("alone_s") else None

    for e in conc_jobs:
        def measure(e=e) -> dict[str, Any]:
            per_rank = spawn(_concurrency_worker, e["processes"],
                             args=(e, plan["samples"], plan["warmup"], threads, a.block_impl),
                             backend="gloo", timeout_s=a.timeout)
            out = {**e, "threads_per_rank": threads, **gather_concurrency(per_rank),
                   "bound": sharing_bound(e["processes"], threads, cores)}
            if e["processes"] > 1:
                out["slowdown"] = round_slowdown(out)
            return out

        progress("concurrency", measure_within_bounds(
            measure, lambda r: concurrency_violation(r, alone_s(r), cores),
            f"concurrency {e['processes']} processes, {e.get('kind', 'fwd')}",
            slowdown=lambda r: round_slowdown(r, median=True)))
    for e in ring_jobs:
        def measure(e=e) -> dict[str, Any]:
            per_rank = spawn(_ring_worker, e["processes"],
                             args=(e, plan["samples"], plan["warmup"], threads, a.block_impl),
                             backend="gloo", timeout_s=a.timeout)
            out = {**e, "threads_per_rank": threads,
                   **{name: [t for r in per_rank for t in r[name]] for name in per_rank[0]},
                   "compute_ring_by_process_s": [r["compute_ring_s"] for r in per_rank]}
            out["compute_slowdown"] = ring_slowdown(out["compute_ring_s"], out["compute_alone_s"])
            out["transfer_slowdown"] = ring_slowdown(out["transfer_ring_s"], out["transfer_alone_s"])
            out["bound"] = sharing_bound(e["processes"], threads, cores)
            return out

        progress("ring_conditions", measure_within_bounds(
            measure, lambda r: ring_violation(r, cores), f"ring conditions {e['processes']} ranks"))


def run_bench(a: argparse.Namespace) -> int:
    import torch

    from hw.blocks import select_block_ops
    from hw.config import default_threads
    from hw.spawn import spawn

    plan = plan_from_args(a)
    kind = a.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise RingsimError("--device cuda: no CUDA device is available")
    device = torch.device("cuda", torch.cuda.current_device()) if kind == "cuda" else torch.device("cpu")
    backend = "nccl" if kind == "cuda" else "gloo"
    if a.threads is not None and a.threads <= 0:
        raise RingsimError("--threads must be positive")
    threads = a.threads or default_threads(2)
    doc = _open_doc(a, _describe_device(device, backend, threads), plan)
    doc["complete"] = False
    # keys measured already (from --resume) or planned: each is measured once
    seen = {part: {_key(part, e) for e in doc[part]} for part in PARTS}

    def save() -> None:
        write_json(a.output, doc, overwrite=True)

    def add(part: str, entry: dict[str, Any]) -> None:
        # the host may be shared: how busy it was when this entry completed
        entry["load_avg_1m"] = os.getloadavg()[0]
        doc[part].append(entry)
        save()

    save()
    compute_jobs, comm_jobs = _plan_jobs(plan, seen)
    # the host parts' entries of each pass (CPU only), by where it runs (HOST_PASSES)
    host_jobs = ({place: (_plan_concurrency(plan, seen, i), _plan_ring(plan, seen, i))
                  for i, place in enumerate(host_pass_places(plan["host_passes"]), 1)} if kind == "cpu" else {})
    coll_jobs = _plan_collectives(plan, seen)
    if kind == "cuda":
        too_big = [w for w in coll_jobs if w > torch.cuda.device_count()]
        if too_big:
            print(f"collectives over {', '.join(map(str, too_big))} ranks need as many GPUs; skipped",
                  file=sys.stderr)
        coll_jobs = {w: es for w, es in coll_jobs.items() if w not in too_big}
    total = (len(compute_jobs) + len(comm_jobs) + sum(len(c) + len(r) for c, r in host_jobs.values())
             + sum(len(es) for es in coll_jobs.values()))
    count = 0

    def progress(part: str, entry: dict[str, Any]) -> None:
        nonlocal count
        count += 1
        add(part, entry)
        print(f"[{count}/{total}] {_fmt(part, entry)}", file=sys.stderr, flush=True)

    cores = doc["device"].get("cpu_count") or os.cpu_count() or 1

    def host_parts(place: str) -> None:
        if place in host_jobs:
            _measure_host_parts(*host_jobs[place], plan, threads, cores, a, progress)

    host_parts("start")
    if compute_jobs:
        saved_threads = torch.get_num_threads()
        if device.type == "cpu":
            torch.set_num_threads(threads)
        reference = _reference_entry(plan) if device.type == "cpu" else None
        if reference is not None:
            doc["reference_block"] = reference
        ref_ops = (select_block_ops("cpu", reference["dtype"], reference["head_dim"], a.block_impl)
                   if reference is not None else None)

        def measure_entry(e: dict[str, Any]) -> dict[str, Any]:
            ops = select_block_ops(device.type, e["dtype"], e["head_dim"], a.block_impl)
            if reference is not None:   # the host's speed of the moment, around every sample
                return measure_compute_paired(e, ops, reference, ref_ops, plan["samples"], plan["warmup"])
            return measure_compute(e, ops, device, plan["samples"], plan["warmup"])

        try:
            measured = []
            for e in compute_jobs:
                measured.append(measure_entry(e))
                progress("compute", measured[-1])
            for _ in range(plan["compute_passes"] - 1):     # again, last first
                for e, entry in reversed(list(zip(compute_jobs, measured))):
                    add_pass(entry, measure_entry(e))
                    save()
                    print(f"[compute, again] {_fmt('compute', entry)}", file=sys.stderr, flush=True)
        finally:
            torch.set_num_threads(saved_threads)
    skipped = bool(comm_jobs) and kind == "cuda" and torch.cuda.device_count() < 2
    if skipped:
        print("transfer and interference need two GPUs; skipped", file=sys.stderr)
    elif comm_jobs:
        spawn(_comm_worker, 2, args=(comm_jobs, plan["samples"], plan["warmup"], kind, threads,
                                     a.block_impl),
              backend=backend, timeout_s=a.timeout, on_progress=lambda _rank, msg: progress(*msg))
    host_parts("middle")
    for world, entries in sorted(coll_jobs.items()):
        spawn(_collective_worker, world, args=(entries, plan["samples"], plan["warmup"], kind, threads),
              backend=backend, timeout_s=a.timeout, on_progress=lambda _rank, msg: progress(*msg))
    host_parts("end")
    skipped = skipped or (kind == "cuda" and "collective" in plan["parts"]
                          and any(w > torch.cuda.device_count() for w in plan["collective_worlds"]))
    doc["complete"] = count == total and not skipped
    save()
    print(f"{count} entries measured, {sum(len(doc[p]) for p in PARTS)} in {a.output}", file=sys.stderr)
    return 0
