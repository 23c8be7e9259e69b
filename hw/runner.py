"""One rank's measured run, and the traces assembled from every rank's spans.

`run_rank` is what each process of a run does, however it was started (`hw.launch`
spawns them locally, `torchrun -m hw.main` anywhere): take its shard, pick the block
implementation, then for each warm-up and measured iteration align its clock with the
other ranks at a barrier and run the ring (forward, backward, or both with backward
steps numbered N..2N-1), recording spans. `build_traces` turns the ranks' spans into one
`sim.trace.Trace` per measured iteration (source "measured"), with the simulator's
configuration header, the device in `hardware` and per-rank peak memory in `meta`.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from sim.config import BWD_FLOPS_FACTOR
from sim.memory import peak_memory_bytes
from sim.trace import Span, Trace

from hw.blocks import TORCH_DTYPES, select_block_ops
from hw.comm import Ring
from hw.config import RunConfig
from hw.layouts import shard
from hw.ring import ring_backward, ring_forward
from hw.timing import CpuClock, CudaClock, Recorder


@dataclass
class Inputs:
    """Full (unsharded) tensors: q, dout (b, s, h, d); k, v (b, s, kv_h, d)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor | None = None


def make_inputs(cfg: RunConfig) -> Inputs:
    """Random inputs reproducible from `cfg.seed` (generated in fp32 on the CPU, then cast)."""
    w = cfg.workload
    gen = torch.Generator().manual_seed(cfg.seed)
    dt = TORCH_DTYPES[w.dtype]

    def rnd(heads: int) -> torch.Tensor:
        return torch.randn(w.batch, w.seq, heads, w.head_dim, generator=gen).to(dt)

    q, k, v = rnd(w.heads), rnd(w.kv_heads), rnd(w.kv_heads)
    dout = rnd(w.heads) if w.pass_ != "fwd" else None
    return Inputs(q, k, v, dout)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def pick_device(kind: str, local_rank: int) -> torch.device:
    """The rank's device: the CPU, or GPU `local_rank` of this host (made current)."""
    if kind == "cuda":
        idx = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(idx)
        return torch.device("cuda", idx)
    return torch.device("cpu")


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} ({os.cpu_count()} cores)"


@dataclass
class RankResult:
    """What one rank hands back: spans per measured iteration, facts, and its outputs."""

    rank: int
    spans: list[list[Span]]
    info: dict[str, Any]
    out: torch.Tensor | None = None
    dq: torch.Tensor | None = None
    dk: torch.Tensor | None = None
    dv: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _fault(cfg: RunConfig, rank: int) -> Callable[[int], None] | None:
    """The testing aid of `RunConfig.fail_rank`: fail on reaching `fail_step`."""
    if cfg.fail_rank != rank:
        return None

    def hook(step: int) -> None:
        if step == cfg.fail_step:
            if cfg.fail_mode == "exit":
                os._exit(17)
            raise RuntimeError(f"injected failure at step {step}")
    return hook


def _measure_rate(cfg: RunConfig, inputs: Inputs, ops, device: torch.device) -> float:
    """Achieved FLOP/s of the whole attention on this rank alone (one block: no ring)."""
    w = cfg.workload
    one = Ring(rank=0, world=1, group=None, clock=CpuClock(cfg.timeout_s))
    args = dict(ring=one, layout=cfg.layout, causal=w.causal, ops=ops)
    q, k, v = (x.to(device) for x in (inputs.q, inputs.k, inputs.v))
    dout = inputs.dout.to(device) if inputs.dout is not None else None
    out, lse = ring_forward(q, k, v, **args)
    times = []
    for _ in range(2):
        _sync(device)
        t0 = time.perf_counter()
        if w.pass_ in ("fwd", "fwdbwd"):
            out, lse = ring_forward(q, k, v, **args)
        if w.pass_ in ("bwd", "fwdbwd"):
            ring_backward(dout, q, k, v, out, lse, **args)
        _sync(device)
        times.append(time.perf_counter() - t0)
    pairs = w.seq * (w.seq + 1) // 2 if w.causal else w.seq * w.seq
    factor = {"fwd": 1.0, "bwd": BWD_FLOPS_FACTOR, "fwdbwd": 1.0 + BWD_FLOPS_FACTOR}[w.pass_]
    return factor * w.fwd_flops(pairs) / min(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_rank(cfg: RunConfig, *, rank: int, group: Any, inputs: Inputs, device: torch.device,
             barrier: Callable[[], None], store: Any = None, ranks_on_host: int = 1,
             keep_outputs: bool = False) -> RankResult:
    """Run `cfg` as rank `rank` of the ring on `group` (None when world_size is 1)."""
    w, n = cfg.workload, cfg.world_size
    threads = cfg.threads(ranks_on_host)
    if device.type == "cpu":
        torch.set_num_threads(threads)
    ops = select_block_ops(device.type, w.dtype, w.head_dim, cfg.block_impl)
    rate = None
    if cfg.measure_rate and rank == 0:
        rate = _measure_rate(cfg, inputs, ops, device)
    q, k, v = (shard(x, cfg.layout, n, rank).to(device) for x in (inputs.q, inputs.k, inputs.v))
    dout = shard(inputs.dout, cfg.layout, n, rank).to(device) if inputs.dout is not None else None
    clock = CudaClock(device, cfg.timeout_s) if device.type == "cuda" else CpuClock(cfg.timeout_s)
    args = dict(layout=cfg.layout, causal=w.causal, ops=ops)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    out = lse = grads = None
    if w.pass_ == "bwd":  # backward alone needs the forward's output and lse, untimed
        out, lse = ring_forward(q, k, v, ring=Ring(rank, n, group, clock, None, store), **args)
    measured: list[list[Span]] = []
    try:
        for it in range(cfg.warmup + cfg.repeats):
            rec = Recorder(clock, rank)
            ring = Ring(rank, n, group, clock, rec, store)
            hook = _fault(cfg, rank) if it == 0 else None
            clock.align(barrier)
            if w.pass_ in ("fwd", "fwdbwd"):
                out, lse = ring_forward(q, k, v, ring=ring, on_step=hook, **args)
            if w.pass_ in ("bwd", "fwdbwd"):
                step0 = n if w.pass_ == "fwdbwd" else 0
                grads = ring_backward(dout, q, k, v, out, lse, ring=ring, step0=step0,
                                      on_step=hook, **args)
            clock.synchronize()
            if it >= cfg.warmup:
                measured.append(rec.spans())
    finally:
        clock.close()
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
    else:
        peak = int(peak_memory_bytes(w, cfg.tokens_per_rank)["total"])
    info = {"device": describe_device(device), "threads_per_rank": threads if device.type == "cpu" else None,
            "block_impl": ops.describe(), "peak_mem_bytes": peak, "clock": clock.kind}
    if rate is not None:
        info["rate_flops"] = rate
    res = RankResult(rank, measured, info)
    if keep_outputs:
        res.out = out.contiguous().cpu() if out is not None else None
        if grads is not None:
            res.dq, res.dk, res.dv = (g.contiguous().cpu() for g in grads)
    return res


def build_traces(cfg: RunConfig, results: list[RankResult]) -> list[Trace]:
    """One measured trace per measured iteration, from every rank's spans."""
    results = sorted(results, key=lambda r: r.rank)
    info = results[0].info
    hardware: dict[str, Any] = {
        "kind": "measured", "device": info["device"], "backend": cfg.resolved_backend,
        "torch": torch.__version__, "threads_per_rank": info["threads_per_rank"],
        "world_size": cfg.world_size, "block_impl": info["block_impl"],
    }
    if "rate_flops" in info:
        hardware["rate_flops"] = info["rate_flops"]
    traces = []
    for i in range(cfg.repeats):
        spans = [s for res in results for s in res.spans[i]]
        _add_trailing_idle(spans, cfg.world_size)
        spans.sort(key=lambda s: (s.start_s, s.rank, s.stream))
        meta = {"peak_mem_bytes": [res.info["peak_mem_bytes"] for res in results],
                "repeat": i, "repeats": cfg.repeats, "warmup": cfg.warmup, "seed": cfg.seed,
                "clock": info["clock"], "schedule": "ring"}
        traces.append(Trace("measured", cfg.world_size, spans, cfg.describe(), dict(hardware), meta))
    return traces


def _add_trailing_idle(spans: list[Span], world: int) -> None:
    """Idle from each rank's last event to the end of the run, as the simulator records it."""
    if not spans:
        return
    end = max(s.end_s for s in spans)
    last = [None] * world
    for s in spans:
        if last[s.rank] is None or s.end_s > last[s.rank].end_s:
            last[s.rank] = s
    for r, s in enumerate(last):
        if s is not None and s.end_s < end:
            step = max(x.step for x in spans if x.rank == r)
            spans.append(Span(r, "wait", "idle", step, s.end_s, end))
