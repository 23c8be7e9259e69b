"""Runs recorded by torch.profiler (Kineto): the traces a user of torch would record.

ringsim reads a user's own `torch.profiler` traces (sim.profiler). This module records
such traces here, on gloo, of two rings: the project's own kernel (`hw.ring` and the
other schemes of `hw.kernels`, one `hw.runner.RankRun` per rank) and torch's own
`context_parallel` (torch.distributed.tensor.experimental) with its "allgather" or
"alltoall" rotation of K/V. Every rank profiles its CPU ops with shapes
(`record_shapes=True`) under a schedule that skips the warm-up iterations and records
the measured ones, each marked `ProfilerStep#N`, and writes one Chrome-trace file named
with its rank (`rank{r}.json.gz`). They are the input of `ringsim trace import`,
`ringsim validate --trace` and the fit of a profile from a trace
(sim.calibration.from_profiler).

torch 2.13 maps context parallelism's attention only for the CUDA operators; on CPU
`F.scaled_dot_product_attention` lowers to `_scaled_dot_product_flash_attention_for_cpu`,
which DTensor has no sharding rule for. `_register_cpu_attention` adds one (every
input and output sharded on the sequence, or all replicated) and a handler that runs
torch's own `_templated_ring_attention` with that operator, mirroring torch's
`_sdpa_handler` (torch/distributed/tensor/experimental/_context_parallel/_attention.py,
torch 2.13.0): the ring, the rotations, head-tail balancing and the merge are torch's
code. Forward only, as torch's CPU operator has no registered CP backward.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from sim.errors import RingsimError
from sim.files import check_output, output_path

ROTATIONS = ("allgather", "alltoall")
"""torch context_parallel's ways of moving K/V (`set_rotate_method`)."""


def trace_path(out_dir: str, rank: int) -> str:
    """Where rank `rank` writes its trace."""
    return os.path.join(out_dir, f"rank{rank}.json.gz")


def _profiler(warmup: int, iterations: int, path: str, cuda: bool = False, overwrite: bool = False):
    """torch.profiler over CPU ops with shapes (and the GPU's kernels on a CUDA run),
    recording `iterations` iterations after `warmup` ones (the last warm-up one is the
    profiler's own warm-up, discarded)."""
    import torch.profiler as tp

    if warmup < 1:
        raise RingsimError("a profiled run needs at least one warm-up iteration (the profiler warms up on it)")
    activities = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if cuda else [])
    return tp.profile(activities=activities, record_shapes=True,
                      schedule=tp.schedule(wait=warmup - 1, warmup=1, active=iterations, repeat=1),
                      on_trace_ready=lambda p: _export(p, path, overwrite))


def _export(prof, path: str, overwrite: bool) -> None:
    """The profiler's trace written whole beside `path`, then published as it (sim.files)."""
    with output_path(path, overwrite=overwrite) as tmp:
        prof.export_chrome_trace(tmp)


def _check_dir(out_dir: str, n: int, overwrite: bool) -> None:
    if not os.path.isdir(out_dir):
        # where the folder would go is checked as a file's name would be (sim.files)
        check_output(out_dir.rstrip(os.sep) or out_dir)
        try:
            os.makedirs(out_dir)
        except OSError as e:
            raise RingsimError(f"cannot make {out_dir}: {e.strerror}") from None
    for r in range(n):
        check_output(trace_path(out_dir, r), overwrite)


# ---------------------------------------------------------------- the project's ring

def _ring_worker(ctx, cfg, out_dir: str, overwrite: bool = False):
    from hw.devices import pick_device
    from hw.runner import RankRun

    run = RankRun(cfg, rank=ctx.rank, group=ctx.group, inputs=None,
                  device=pick_device(cfg.device, ctx.rank, ctx.n_gpus), barrier=ctx.barrier, store=ctx.store,
                  ranks_on_host=ctx.n_gpus)
    try:
        with _profiler(cfg.warmup, cfg.repeats, trace_path(out_dir, ctx.rank), cuda=cfg.device == "cuda",
                       overwrite=overwrite) as prof:
            for it in range(cfg.warmup + cfg.repeats):
                run.iteration(it)
                prof.step()
    finally:
        run.close()
    return run.result()


def record_ring(cfg, out_dir: str, *, overwrite: bool = False):
    """Run `cfg` (hw.config.RunConfig) on local processes under torch.profiler; each
    rank's trace goes to `trace_path(out_dir, rank)`. Returns the run's own measured
    traces (sim.trace.format.Trace, one per measured iteration), which time the same
    iterations as the profiler."""
    from hw.runner import build_traces
    from hw.spawn import spawn

    _check_dir(out_dir, cfg.n_gpus, overwrite)
    results = spawn(_ring_worker, cfg.n_gpus, args=(cfg, out_dir, overwrite), backend=cfg.resolved_backend,
                    timeout_s=cfg.timeout_s)
    return build_traces(cfg, results)


# ---------------------------------------------------------------- torch's context_parallel

@dataclass(frozen=True, kw_only=True)
class TorchCP:
    """One profiled run of torch's `context_parallel` attention on gloo (forward)."""

    n_gpus: int = 2
    """Ranks in the context-parallel mesh."""
    seq: int = 2048
    """Tokens of the whole sequence."""
    batch: int = 1
    heads: int = 8
    head_dim: int = 64
    causal: bool = True
    """Causal mask; with it torch balances the load head-tail (zigzag), without it not."""
    rotation: str = "alltoall"
    """How K/V move: 'alltoall' (a permute to the next rank each step) or 'allgather'."""
    warmup: int = 1
    iterations: int = 3
    threads_per_rank: int = 1
    seed: int = 0
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        for name in ("n_gpus", "seq", "batch", "heads", "head_dim", "iterations", "threads_per_rank"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise RingsimError(f"{name} must be a positive integer, got {v!r}")
        if self.n_gpus < 2:
            raise RingsimError("torch context_parallel needs 2 ranks or more")
        if self.rotation not in ROTATIONS:
            raise RingsimError(f"rotation must be one of {', '.join(ROTATIONS)}, got {self.rotation!r}")
        if self.warmup < 1:
            raise RingsimError("warmup must be at least 1 (the profiler warms up on it)")
        if self.seq % (2 * self.n_gpus):
            raise RingsimError(f"seq ({self.seq}) must divide into {2 * self.n_gpus} chunks (head-tail balancing)")


_CP_INSTALLED = False


def _register_cpu_attention() -> None:
    """Teach torch's context parallelism the CPU attention operator (module docstring)."""
    global _CP_INSTALLED
    if _CP_INSTALLED:
        return
    import torch
    import torch.distributed.tensor.experimental._context_parallel._attention as cp
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy, register_op_strategy
    from torch.distributed.tensor.placement_types import Replicate, Shard

    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    seq_dim = 2

    def strategy(op_schema):
        # outputs (out, logsumexp) then inputs (q, k, v): all on the sequence, or replicated
        placements = [[Replicate()] * 5, [Shard(seq_dim)] * 5]
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema, placements,
                                               input_index=2)

    def handler(op_call, args, kwargs):
        info = DTensor._op_dispatcher.unwrap_to_op_info(op_call, args, kwargs)
        DTensor._op_dispatcher.sharding_propagator.propagate(info)
        sharding = info.output_sharding
        query, key, value, *rest = info.local_args
        dropout_p = rest[0] if rest else 0.0
        is_causal = rest[1] if len(rest) > 1 else info.local_kwargs.get("is_causal", False)
        if info.local_kwargs.get("attn_mask") is not None:
            raise RingsimError("torch context_parallel on CPU takes no attention mask")
        local = cp._templated_ring_attention(info.compute_mesh.get_group(), seq_dim, op, query=query, key=key,
                                             value=value, is_causal=is_causal, dropout_p=dropout_p,
                                             scale=info.local_kwargs.get("scale"))
        return DTensor._op_dispatcher.wrap(local, sharding.output_spec)

    register_op_strategy(op.default, schema_info=RuntimeSchemaInfo(3))(strategy)
    cp.custom_ops[op.default] = handler
    _CP_INSTALLED = True


def _cp_worker(ctx, run: TorchCP, out_dir: str, overwrite: bool = False) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import _cp_options, set_rotate_method

    torch.set_num_threads(run.threads_per_rank)
    _register_cpu_attention()
    mesh = init_device_mesh("cpu", (run.n_gpus,), mesh_dim_names=("cp",))
    set_rotate_method(run.rotation)
    # head-tail balancing is legal only under the causal mask
    _cp_options.enable_load_balance = run.causal
    g = torch.Generator().manual_seed(run.seed)
    q, k, v = (torch.randn(run.batch, run.heads, run.seq, run.head_dim, generator=g) for _ in range(3))
    times = []
    with torch.no_grad(), context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
        with _profiler(run.warmup, run.iterations, trace_path(out_dir, ctx.rank), overwrite=overwrite) as prof:
            for it in range(run.warmup + run.iterations):
                dist.barrier()
                t0 = time.perf_counter()
                F.scaled_dot_product_attention(q, k, v, is_causal=run.causal)
                if it >= run.warmup:
                    times.append(time.perf_counter() - t0)
                prof.step()
    return {"rank": ctx.rank, "times_s": times}


def record_torch_cp(run: TorchCP, out_dir: str, *, overwrite: bool = False) -> list[dict[str, Any]]:
    """Profile `run` on local gloo processes; each rank's trace goes to
    `trace_path(out_dir, rank)`. Returns each rank's own timing of its measured
    iterations (from leaving a barrier to the end of the attention call)."""
    from hw.spawn import spawn

    _check_dir(out_dir, run.n_gpus, overwrite)
    return spawn(_cp_worker, run.n_gpus, args=(run, out_dir, overwrite), backend="gloo", timeout_s=run.timeout_s)
