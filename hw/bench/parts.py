"""The host parts (concurrency, ring conditions) and the collectives: their jobs and their workers (hw.bench)."""

from __future__ import annotations

import argparse
import itertools
import statistics
import threading
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

from hw.bench.bounds import concurrency_violation, measure_within_bounds, ring_slowdown, ring_violation, round_slowdown
from hw.bench.document import _key
from hw.bench.measure import _rank_device, block_flops, make_block
from hw.bench.options import CONCURRENCY_ROUNDS, HOST_PASSES
from hw.blocks import select_block_ops
from hw.devices import sync
from hw.spawn import spawn
from sim.hardware.contention import sharing_bound
from sim.scenario.quantities import DTYPE_BYTES


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
    (sim.calibration.calibrate)."""
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
    in-flight slowdown (sim.calibration.calibrate.fit_ring_conditions)."""
    kinds = ("fwd", "bwd") if "bwd" in plan["kinds"] else ("fwd",)
    return _plan_host(plan, "ring_conditions", sorted(set(plan["ring_processes"])), seen, kinds, pass_)


def _common_window(ctx, estimate_s: float, blocks: int) -> tuple[float, float]:
    """(start, deadline) on the host's monotonic clock, the same for every rank: long
    enough for `blocks` blocks of the slowest rank's estimate at full sharing."""
    t = torch.tensor([time.perf_counter() + 0.05, estimate_s], dtype=torch.float64)
    if ctx.n_gpus > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.control)
    start, est = float(t[0]), float(t[1])
    return start, start + max(0.2, blocks * est * max(1.0, ctx.n_gpus / 2) * 1.5)


WINDOW_ATTEMPTS = 4
"""Windows of a concurrency round, each twice as long as the one before, until every
process has finished a call inside one."""


def _fewest(ctx, count: int) -> int:
    """The smallest `count` over the ranks."""
    if ctx.n_gpus == 1:
        return count
    t = torch.tensor([count], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=ctx.control)
    return int(t[0])


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
        for r in range(ctx.n_gpus):
            ctx.barrier()
            if r == ctx.rank:
                for _ in range(max(1, warmup) if i == 0 else 1):
                    compute()
                alone = [compute() for _ in range(samples)]
        # a host loaded by other work can leave a process no whole call inside the window:
        # then every process computes again over a window twice as long
        for attempt in range(WINDOW_ATTEMPTS):
            start, deadline = _common_window(ctx, statistics.median(alone), samples * 2 ** attempt)
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
            if _fewest(ctx, len(times)) > 0:
                break
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
    """The collective entries still to measure, by GPU count (one process group each)."""
    out: dict[int, list[dict[str, Any]]] = {}
    if "collective" not in plan["parts"]:
        return out
    for n_gpus, op, shard in itertools.product(plan["collective_gpus"], plan["collectives"],
                                              plan["collective_sizes"]):
        shard = max(4, shard - shard % 4)          # whole fp32 elements: reduce-scatter adds them
        e = {"op": op, "n_gpus": n_gpus, "shard_bytes": shard, "sent_bytes": (n_gpus - 1) * shard}
        key = _key("collective", e)
        if key not in seen["collective"]:
            seen["collective"].add(key)
            out.setdefault(n_gpus, []).append(e)
    return out


def _collective_worker(ctx, entries: list[dict[str, Any]], samples: int, warmup: int, device_kind: str,
                       threads: int) -> None:
    """Every rank runs each collective; a sample is the slowest rank's time from a barrier."""
    device = _rank_device(ctx, device_kind, threads)
    n = ctx.n_gpus

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
            sync(device)
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
    torch.set_num_threads(threads)
    ops = select_block_ops("cpu", entry["dtype"], entry["head_dim"], impl)
    block = _host_block_call(ops, entry, ctx.rank)
    hops = entry.get("hops", 1)
    sends = [torch.ones(entry["bytes"], dtype=torch.uint8) for _ in range(hops)]
    recvs = [torch.empty(entry["bytes"], dtype=torch.uint8) for _ in range(hops)]
    nxt, prv = (ctx.rank + 1) % ctx.n_gpus, (ctx.rank - 1) % ctx.n_gpus

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
    for r in range(ctx.n_gpus):          # one rank computes at a time, the others wait
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
