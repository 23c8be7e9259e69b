"""Measuring blocks and transfers: timers, the block operator's calls, the point-to-point worker (hw.bench)."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

from hw.blocks import TORCH_DTYPES, select_block_ops
from hw.devices import pick_device, sync
from sim.scenario.quantities import BWD_FLOPS_FACTOR

# ---- measuring --------------------------------------------------------------------------

def _timer(device) -> Callable[[Callable[[], Any], int, int], list[float]]:
    def samples(fn: Callable[[], Any], n: int, warmup: int) -> list[float]:
        for _ in range(warmup):
            fn()
        return [time_compute(fn, device) for _ in range(n)]
    return samples


def time_compute(fn: Callable[[], Any], device) -> float:
    """Seconds `fn`'s work takes on the compute stream alone.

    On CUDA, events recorded on the current stream around `fn` and a wait for the end
    event only: a device-wide synchronize would also wait for NCCL's stream, and so
    time max(compute, transfer) while a transfer is in flight. On CPU, wall time.
    """
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
    if device_kind == "cuda":
        return pick_device("cuda", ctx.rank, ctx.n_gpus)
    torch.set_num_threads(threads)
    return torch.device("cpu")


def _comm_worker(ctx, jobs: list[dict[str, Any]], samples: int, warmup: int, device_kind: str,
                 threads: int, impl: str) -> None:
    """Rank 0 and 1 of the transfer and interference parts; rank 0 reports each entry."""
    device = _rank_device(ctx, device_kind, threads)
    for job in jobs:
        if job["part"] == "transfer":
            entry = _transfer_entry(ctx, job, device, samples, warmup)
        else:
            entry = _interference_entry(ctx, job["entry"], device, samples, warmup, impl)
        if ctx.rank == 0:
            ctx.report((job["part"], entry))


def _exchange(ctx, send, recv) -> list:
    """Post a send to the other rank and a receive from it at once; their works."""
    peer = 1 - ctx.rank
    return dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer, ctx.group),
                                   dist.P2POp(dist.irecv, recv, peer, ctx.group)])


def _transfer_entry(ctx, job: dict[str, Any], device, samples: int, warmup: int) -> dict[str, Any]:
    """A transfer entry: `job["bytes"]` one way (half a ping-pong round trip) or both ways
    at once (each rank sends and receives, as in a ring step)."""
    n = job["bytes"]
    peer = 1 - ctx.rank
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
            sync(device)
        ctx.barrier()
        times = [t / 2 for t in _timer(device)(fn, samples, warmup)]  # half a round trip
    else:
        def fn():
            ctx.barrier()
            t0 = time.perf_counter()
            for w in _exchange(ctx, send, recv):
                w.wait()
            sync(device)
            return time.perf_counter() - t0
        for _ in range(warmup):
            fn()
        times = [fn() for _ in range(samples)]
    med = statistics.median(times)
    return {"bytes": n, "direction": job["direction"], "time_s": times, "median_s": med,
            "gbps": n / med / 1e9 if med > 0 else None}


def _interference_entry(ctx, e: dict[str, Any], device, samples: int, warmup: int, impl: str) -> dict[str, Any]:
    """An interference entry: the block's forward timed alone, then while a both-ways
    transfer of `e["bytes"]` is in flight, sample after sample."""
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
        sync(device)
        t_alone = time_compute(compute, device)
        ctx.barrier()
        works = _exchange(ctx, send, recv)
        # the compute's own stream: the transfer runs on NCCL's (on CUDA)
        t_with = time_compute(compute, device)
        for w in works:
            w.wait()
        sync(device)
        if i >= warmup:
            alone.append(t_alone)
            with_transfer.append(t_with)
    ma, mw = statistics.median(alone), statistics.median(with_transfer)
    return {**e, "compute_alone_s": alone, "compute_with_transfer_s": with_transfer,
            "median_alone_s": ma, "median_with_s": mw,
            "slowdown": mw / ma if ma > 0 else None}
