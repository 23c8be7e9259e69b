"""The run API: the ring (and other schemes') kernels on local processes started by
hw.spawn.

`run_local` takes full tensors and returns the output, gradients and the measured trace.
`run_config` runs a `RunConfig` with inputs made from its seed (the `ringsim hw run`
command); `run_configs` runs many, one process group per GPU count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from hw.config import RunConfig
from hw.devices import pick_device
from hw.layouts import unshard
from hw.runner import Inputs, RankRun, build_traces, run_rank
from hw.spawn import RankContext, spawn
from sim.errors import RingsimError
from sim.scenario.config import Workload
from sim.trace.format import Trace


def _rank_args(ctx: RankContext, cfg) -> dict[str, Any]:
    """What a rank's run of `cfg` takes from its process (hw.runner.run_rank, RankRun)."""
    return dict(rank=ctx.rank, group=ctx.group, device=pick_device(cfg.device, ctx.rank, ctx.n_gpus),
                barrier=ctx.barrier, store=ctx.store, ranks_on_host=ctx.n_gpus)


def _run_worker(ctx: RankContext, cfg, inputs, keep_outputs: bool):
    return run_rank(cfg, inputs=inputs, keep_outputs=keep_outputs, **_rank_args(ctx, cfg))


def run_config(cfg, inputs=None, *, keep_outputs: bool = False):
    """Run `cfg` on `cfg.n_gpus` local processes; the ranks' `RankResult`s and traces."""
    results = spawn(_run_worker, cfg.n_gpus, args=(cfg, inputs, keep_outputs),
                    backend=cfg.resolved_backend, timeout_s=cfg.timeout_s)
    return results, build_traces(cfg, results)


def _run_many_worker(ctx: RankContext, cfgs: list, report: bool, interleave: bool = False):
    if not interleave:
        out = []
        for i, cfg in enumerate(cfgs):
            res = _run_worker(ctx, cfg, None, False)
            if report and ctx.rank == 0:
                ctx.report(i)
            out.append(res)
        return out
    runs: list = []
    try:
        for cfg in cfgs:
            runs.append(RankRun(cfg, inputs=None, **_rank_args(ctx, cfg)))
        for run in runs:                     # each one's warm-up, then repeat i of every one
            for it in range(run.cfg.warmup):
                run.iteration(it)
        for r in range(max(run.cfg.repeats for run in runs)):
            for run in runs:
                if r < run.cfg.repeats:
                    run.iteration(run.cfg.warmup + r)
    finally:
        for run in runs:
            run.close()
    if report and ctx.rank == 0:
        for i in range(len(runs)):
            ctx.report(i)
    return [run.result() for run in runs]


def run_configs(cfgs: list, *, on_done: Callable[[int], None] | None = None, interleave: bool = False) -> list:
    """Run several configurations, one process group per GPU count and backend.

    Start-up (seconds per group) is paid once per group instead of once per run; the
    runs of a group follow one another in the order given. With `interleave`, a group's
    configurations are set up together, each runs its warm-up, and then repeat i of every
    one runs before repeat i + 1 of any: a slow spell of a shared host then weighs on
    every configuration alike instead of on whichever ran during it (every
    configuration's inputs are held at once: for CPU-sized runs). Returns (results,
    traces) for each configuration, in the order given; `on_done(i)` is called as
    configuration i completes (with `interleave`, when the group does).
    """
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault((cfg.n_gpus, cfg.resolved_backend, cfg.device), []).append(i)
    out: list = [None] * len(cfgs)
    for (n_gpus, backend, _device), idx in groups.items():
        mine = [cfgs[i] for i in idx]
        per_rank = spawn(_run_many_worker, n_gpus, args=(mine, on_done is not None, interleave), backend=backend,
                         timeout_s=max(c.timeout_s for c in mine),
                         on_progress=(lambda _r, j: on_done(idx[j])) if on_done else None)
        for j, i in enumerate(idx):
            results = [rank_runs[j] for rank_runs in per_rank]
            out[i] = (results, build_traces(cfgs[i], results))
    return out


@dataclass
class RunResult:
    """Output of `run_local`: full tensors in the original token order, and the traces."""

    out: Any
    trace: Trace
    """The measured trace of the last measured iteration."""
    traces: list[Trace] = field(default_factory=list)
    """One measured trace per measured iteration."""
    dq: Any = None
    dk: Any = None
    dv: Any = None


def _dtype_name(t) -> str:
    names = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
    if t.dtype not in names:
        raise RingsimError(f"inputs must be fp32, bf16 or fp16, got {t.dtype}")
    return names[t.dtype]


def run_local(q, k, v, *, n_gpus: int, causal: bool, layout: str = "zigzag", scheme: str = "ring",
              backend: str = "gloo", dout=None, warmup: int = 0, repeats: int = 1, timeout_s: float = 60.0,
              block_impl: str = "auto", threads_per_rank: int | None = None) -> RunResult:
    """Sequence-parallel attention of full tensors on `n_gpus` local processes.

    scheme: "ring" (hw.ring), "allgather" (hw.allgather; zigzag layout) or "ulysses"
    (hw.ulysses; any layout, the degree dividing the heads).

    q: (batch, seq, heads, head_dim); k, v: (batch, seq, kv_heads, head_dim); dout like
    q, or None for the forward alone. Shards by `layout`, runs the ring, and returns the
    output (and dq, dk, dv when dout is given) in the original token order with the
    measured trace.
    """
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise RingsimError("q must be (batch, seq, heads, head_dim) and k, v (batch, seq, kv_heads, head_dim)")
    b, s, h, d = q.shape
    if k.shape[0] != b or k.shape[1] != s or k.shape[3] != d:
        raise RingsimError(f"k/v shape {tuple(k.shape)} does not match q {tuple(q.shape)}")
    if dout is not None and dout.shape != q.shape:
        raise RingsimError(f"dout shape {tuple(dout.shape)} must equal q's {tuple(q.shape)}")
    dtype = _dtype_name(q)
    if k.dtype != q.dtype or v.dtype != q.dtype or (dout is not None and dout.dtype != q.dtype):
        raise RingsimError("q, k, v and dout must share one dtype")
    device = "cuda" if q.is_cuda else "cpu"
    workload = Workload(batch=b, seq=s, heads=h, kv_heads=k.shape[2], head_dim=d, dtype=dtype,
                        causal=causal, pass_="fwd" if dout is None else "fwdbwd")
    cfg = RunConfig(workload=workload, n_gpus=n_gpus, layout=layout, scheme=scheme, device=device,
                    backend=backend if device == "cpu" else (None if backend == "gloo" else backend),
                    warmup=warmup, repeats=repeats, timeout_s=timeout_s, block_impl=block_impl,
                    threads_per_rank=threads_per_rank)
    inputs = Inputs(*(x.detach().cpu() if x is not None else None for x in (q, k, v, dout)))
    if n_gpus == 1:
        results = [_run_in_process(cfg, inputs)]
        traces = build_traces(cfg, results)
    else:
        results, traces = run_config(cfg, inputs, keep_outputs=True)

    def full(name: str):
        parts = [getattr(r, name) for r in results]
        if parts[0] is None:
            return None
        return unshard(parts, layout).to(q.device)

    return RunResult(out=full("out"), trace=traces[-1], traces=traces, dq=full("dq"),
                     dk=full("dk"), dv=full("dv"))


def _run_in_process(cfg, inputs):
    """GPU count 1: no processes, no group; this process's own thread count."""
    threads = torch.get_num_threads()
    device = torch.device("cuda", torch.cuda.current_device()) if cfg.device == "cuda" else torch.device("cpu")
    try:
        return run_rank(cfg, rank=0, group=None, inputs=inputs, device=device,
                        barrier=lambda: None, keep_outputs=True)
    finally:
        torch.set_num_threads(threads)
