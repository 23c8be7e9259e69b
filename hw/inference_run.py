"""A measured run of the inference kernels (`ringsim hw infer`): one attention layer of a
prefill over a cached prefix (hw.inference) or of a decode step over a sharded cache
(hw.inference_decode) on local processes, timed as the ring kernel is timed.

`InferRun` is the run's configuration (frozen, checked where it is made); its
`describe()` is the header the model of the same layer writes (sim.inference: `kind`
prefill or decode and the layer's shape), so that a measured trace and a simulated one
describe themselves alike and `ringsim validate` can read the one into the other. Each
rank makes its own shard from the seed (hw.runner.normal_rows: a value depends only on
its request, position and element, so no rank makes the whole context), then for each
warm-up and measured iteration aligns its clock with the others at a barrier and runs
the kernel, recording spans (hw.timing); hw.runner.build_traces assembles one trace per
measured iteration (source "measured"). Peak memory in the trace's meta is the CUDA
allocator's peak on a GPU, and on the CPU the bytes of the rank's inputs (its queries and
its shard of the K/V).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sim.errors import RingsimError
from sim.inference.decode import DECODE_LAYOUTS
from sim.inference.decode import MERGES as DECODE_MERGES
from sim.inference.work import CACHE_LAYOUTS, cache_tokens, new_tokens
from sim.inference.work import SCHEMES as PREFILL_SCHEMES
from sim.layouts import NAMES as LAYOUT_NAMES
from sim.layouts import n_chunks
from sim.units import tokens

PHASES = ("prefill", "decode")


@dataclass(frozen=True, kw_only=True)
class InferRun:
    """One measured run of an inference attention layer."""

    phase: str = "prefill"
    """prefill (new tokens over a cached prefix) or decode (a step of a batch)."""
    n_gpus: int = 2
    """Ranks of the context-parallel group."""
    scheme: str = "pass-kv"
    """Prefill: pass-kv, pass-q or allgather."""
    merge_by: str = "all-gather"
    """Decode: how the partial results meet (all-gather, all-to-all)."""
    cached: int = 0
    """Prefill: tokens already in the cache (P)."""
    new: int | None = None
    """Prefill: tokens computed now (T, whole chunks of the layout; None: 1024); decode:
    new queries per request (the context's last tokens; None: 1, one token a step)."""
    prompts: tuple[int, ...] = (4096,)
    """Decode: each request's prompt tokens in the cache."""
    generated: int = 0
    """Decode: tokens each request has generated since (in the cache too)."""
    batch: int = 1
    """Prefill: requests of this shape computed together."""
    heads: int = 8
    kv_heads: int = 8
    head_dim: int = 64
    dtype: str = "fp32"
    layout: str | None = None
    """Prefill: the new tokens' layout (sim.layouts; None: zigzag); decode: the cache's
    (round-robin, contiguous; None: round-robin)."""
    cache_layout: str = "zigzag"
    """Prefill: how the cached prefix lies over the ranks (contiguous, zigzag, striped)."""
    device: str = "cpu"
    backend: str | None = None
    warmup: int = 1
    repeats: int = 3
    seed: int = 0
    timeout_s: float = 120.0
    threads_per_rank: int | None = None
    block_impl: str = "auto"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """Anything the caller wants in the trace's meta."""

    def __post_init__(self) -> None:
        from hw.config import BACKENDS, BLOCK_IMPLS, DEVICES

        prefill = self.phase == "prefill"
        if self.layout is None:
            object.__setattr__(self, "layout", "zigzag" if prefill else "round-robin")
        if self.new is None:
            object.__setattr__(self, "new", 1024 if prefill else 1)
        for name in ("n_gpus", "repeats", "heads", "kv_heads", "head_dim", "batch", "new"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise RingsimError(f"{name} must be a positive integer, got {v!r}")
        for name in ("warmup", "seed", "cached", "generated"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise RingsimError(f"{name} must be a whole number, 0 or more, got {v!r}")
        if self.phase not in PHASES:
            raise RingsimError(f"phase must be prefill or decode, got {self.phase!r}")
        if self.heads % self.kv_heads:
            raise RingsimError(f"K/V heads ({self.kv_heads}) must divide the query heads ({self.heads})")
        if self.dtype not in ("fp32", "bf16", "fp16"):
            raise RingsimError(f"dtype must be fp32, bf16 or fp16, got {self.dtype!r}")
        if self.phase == "prefill":
            self._check_prefill()
        else:
            self._check_decode()
        if self.device not in DEVICES:
            raise RingsimError(f"device must be cpu or cuda, got {self.device!r}")
        backend = self.resolved_backend
        if backend not in BACKENDS or (backend == "nccl") != (self.device == "cuda"):
            raise RingsimError(f"backend {backend} does not run on {self.device}: use gloo on cpu, nccl on cuda")
        if self.block_impl not in BLOCK_IMPLS:
            raise RingsimError(f"block_impl must be one of {', '.join(BLOCK_IMPLS)}, got {self.block_impl!r}")
        if not isinstance(self.timeout_s, (int, float)) or not 0 < self.timeout_s < 1e6:
            raise RingsimError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        if self.threads_per_rank is not None and (
                not isinstance(self.threads_per_rank, int) or self.threads_per_rank <= 0):
            raise RingsimError(f"threads_per_rank must be a positive integer, got {self.threads_per_rank!r}")

    def _check_prefill(self) -> None:
        if self.scheme not in PREFILL_SCHEMES:
            raise RingsimError(f"the prefill scheme must be one of {', '.join(PREFILL_SCHEMES)}, got {self.scheme!r}")
        if self.layout not in LAYOUT_NAMES:
            raise RingsimError(f"the layout of the new tokens must be one of {', '.join(LAYOUT_NAMES)}, "
                               f"got {self.layout!r}")
        if self.cache_layout not in CACHE_LAYOUTS:
            raise RingsimError(f"the cache layout must be one of {', '.join(CACHE_LAYOUTS)}, got {self.cache_layout!r}")
        chunks = n_chunks(self.layout, self.n_gpus)
        if self.new % chunks:
            raise RingsimError(f"{self.new} new tokens do not split into the {chunks} chunks of the {self.layout} "
                               f"layout on {self.n_gpus} ranks: give a multiple of {chunks}")

    def _check_decode(self) -> None:
        if self.merge_by not in DECODE_MERGES:
            raise RingsimError(f"the decode merge must be one of {', '.join(DECODE_MERGES)}, got {self.merge_by!r}")
        if self.layout not in DECODE_LAYOUTS:
            raise RingsimError(f"the decode cache layout must be one of {', '.join(DECODE_LAYOUTS)}, "
                               f"got {self.layout!r}")
        if not self.prompts or any(not isinstance(p, int) or isinstance(p, bool) or p < 1 for p in self.prompts):
            raise RingsimError(f"every request needs a prompt of 1 token or more, got {self.prompts!r}")
        if min(self.prompts) + self.generated < self.new:
            raise RingsimError(f"a request of {min(self.prompts) + self.generated} tokens cannot hold "
                               f"{self.new} new ones")

    @property
    def resolved_backend(self) -> str:
        if self.backend is not None:
            return self.backend
        return "nccl" if self.device == "cuda" else "gloo"

    @property
    def new_per_rank(self) -> int:
        return self.new // self.n_gpus

    def threads(self, ranks_on_host: int) -> int:
        from hw.config import default_threads

        return self.threads_per_rank or default_threads(ranks_on_host)

    def describe(self) -> dict[str, Any]:
        """The layer's shape as the model's header names it (sim.inference: prefill's
        PrefillAttention, decode's DecodeAttention), `kind` the phase; K/V in the run's dtype."""
        common = {"n_ranks": self.n_gpus, "heads": self.heads, "kv_heads": self.kv_heads,
                  "head_dim": self.head_dim, "dtype": self.dtype, "kv_dtype": self.dtype}
        if self.phase == "prefill":
            return {"kind": "prefill", **common, "cached": self.cached, "new": self.new, "batch": self.batch,
                    "layout": self.layout, "cache_layout": self.cache_layout, "scheme": self.scheme,
                    "granularity": "exact", "tile": 128, "new_padded": self.new}
        return {"kind": "decode", **common, "prompts": list(self.prompts), "generated": self.generated,
                "new": self.new, "layout": self.layout, "merge": self.merge_by}

    @property
    def label(self) -> str:
        """The run in a few words (a validation case's key)."""
        if self.phase == "prefill":
            return (f"prefill/{self.scheme}/{self.layout}/cache-{self.cache_layout}/gpus{self.n_gpus}/"
                    f"cached{self.cached}/new{self.new}")
        return (f"decode/{self.merge_by}/{self.layout}/gpus{self.n_gpus}/"
                f"prompts{'+'.join(map(str, self.prompts))}/generated{self.generated}")

    @property
    def scheme_name(self) -> str:
        """What the trace's meta names the schedule."""
        return self.scheme if self.phase == "prefill" else f"decode-{self.merge_by}"


# ---- a rank's run --------------------------------------------------------------------------


def _values(run: InferRun, stream: int, rows, heads: int, device):
    """Normal values of these global rows, (len(rows), heads, d), in the run's dtype."""
    import torch

    from hw.blocks import TORCH_DTYPES
    from hw.runner import normal_rows

    x = normal_rows(run.seed, stream, torch.as_tensor(rows, dtype=torch.int64), heads * run.head_dim, device)
    return x.reshape(len(rows), heads, run.head_dim).to(TORCH_DTYPES[run.dtype])


def prefill_positions(run: InferRun, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(new positions, cached positions) rank holds, as the model lays them out
    (sim.inference.work: the new tokens P + the layout's over T, the cache as it was written)."""
    return (new_tokens(run.cached, run.new, run.n_gpus, run.layout)[rank],
            cache_tokens(run.cached, run.n_gpus, run.cache_layout)[rank])


def prefill_inputs(run: InferRun, rank: int, device="cpu"):
    """This rank's q, k_new, v_new (batch, T/N, heads, d) and k_cache, v_cache (batch, its
    cached tokens, kv_heads, d); value (request, position) the same on any rank count."""
    new, cached = prefill_positions(run, rank)
    context = run.cached + run.new

    def make(stream: int, positions: np.ndarray, heads: int):
        rows = (np.arange(run.batch)[:, None] * context + positions[None, :]).reshape(-1)
        return _values(run, stream, rows, heads, device).reshape(run.batch, len(positions), heads, run.head_dim)

    q = make(0, new, run.heads)
    k_new, v_new = make(1, new, run.kv_heads), make(2, new, run.kv_heads)
    k_cache, v_cache = make(1, cached, run.kv_heads), make(2, cached, run.kv_heads)
    return q, k_new, v_new, k_cache, v_cache


def decode_batch(run: InferRun):
    from hw.inference_decode import DecodeBatch

    return DecodeBatch(run.prompts, run.generated, run.new, run.n_gpus, run.layout)


def decode_inputs(run: InferRun, rank: int, device="cpu"):
    """Every request's new queries (requests, new, heads, d) and this rank's shard of the
    cache, request after request (tokens, kv_heads, d), laid out heads-first in memory."""
    batch = decode_batch(run)
    longest = max(batch.lengths)
    q_rows = np.concatenate([i * longest + np.arange(length - run.new, length)
                             for i, length in enumerate(batch.lengths)])
    q = _values(run, 0, q_rows, run.heads, device).reshape(len(batch.lengths), run.new, run.heads, run.head_dim)
    held = batch.held(rank)
    kv_rows = np.concatenate([i * longest + pos for i, pos in enumerate(held)])
    # heads-first in memory: a request's keys are then, head by head, consecutive rows, the
    # fused CPU operator's fast case (hw.inference_decode: 3.6x faster than tokens-first)
    k, v = (_values(run, s, kv_rows, run.kv_heads, device).transpose(0, 1).contiguous().transpose(0, 1)
            for s in (1, 2))
    return q, k, v


def kernel_of(run: InferRun, inputs, ops):
    """fn(ring) running the layer on this rank's inputs."""
    if run.phase == "prefill":
        from hw.inference import Prefill, prefill_kernel

        q, kn, vn, kc, vc = inputs
        counts = tuple(len(c) for c in cache_tokens(run.cached, run.n_gpus, run.cache_layout))
        pf = Prefill(n_gpus=run.n_gpus, layout=run.layout, new_per_rank=run.new_per_rank, cached=counts)
        fn = prefill_kernel(run.scheme)
        return lambda ring: fn(q, kn, vn, kc, vc, ring=ring, pf=pf, ops=ops)
    from hw.inference_decode import decode_forward

    q, k, v = inputs
    batch = decode_batch(run)
    return lambda ring: decode_forward(q, k, v, ring=ring, batch=batch, merge=run.merge_by, ops=ops)


class RankInfer:
    """One rank's run of a layer, an iteration at a time (`measure_many` interleaves the
    iterations of several runs, as hw.launch does the ring's)."""

    def __init__(self, ctx, run: InferRun):
        import torch

        from hw.blocks import select_block_ops
        from hw.devices import pick_device
        from hw.timing import CpuClock, CudaClock

        self.ctx, self.run = ctx, run
        self.device = pick_device(run.device, ctx.rank, ctx.n_gpus)
        self.threads = run.threads(ctx.n_gpus)
        if self.device.type == "cpu":
            torch.set_num_threads(self.threads)
        self.ops = select_block_ops(self.device.type, run.dtype, run.head_dim, run.block_impl)
        make = prefill_inputs if run.phase == "prefill" else decode_inputs
        self.inputs = make(run, ctx.rank, self.device)
        self.layer = kernel_of(run, self.inputs, self.ops)
        cuda = self.device.type == "cuda"
        self.clock = CudaClock(self.device, run.timeout_s) if cuda else CpuClock(run.timeout_s)
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        self.measured: list = []
        self.needs: list = []

    def iteration(self, it: int) -> None:
        """Iteration `it` (the first `run.warmup` are not recorded)."""
        import torch

        from hw.comm import Ring
        from hw.devices import sync
        from hw.timing import Recorder

        ctx, run = self.ctx, self.run
        if self.device.type == "cpu":       # another run's set them otherwise
            torch.set_num_threads(self.threads)
        rec = Recorder(self.clock, ctx.rank)
        ring = Ring(ctx.rank, run.n_gpus, ctx.group, self.clock, rec, ctx.store)
        self.clock.align(ctx.barrier)
        self.layer(ring)
        self.clock.synchronize()
        sync(self.device)
        if it >= run.warmup:
            self.measured.append(rec.spans())
            self.needs.append(rec.needs)

    def result(self):
        import torch

        from hw.devices import describe_device
        from hw.runner import RankResult

        self.clock.close()
        if self.device.type == "cuda":
            peak = int(torch.cuda.max_memory_allocated(self.device))
        else:
            peak = int(sum(x.numel() * x.element_size() for x in self.inputs))
        info = {"device": describe_device(self.device),
                "threads_per_rank": self.threads if self.device.type == "cpu" else None,
                "block_impl": self.ops.describe(), "peak_mem_bytes": peak, "clock": self.clock.kind}
        return RankResult(self.ctx.rank, self.measured, info, needs=self.needs)


def _rank_main(ctx, run: InferRun):
    one = RankInfer(ctx, run)
    try:
        for it in range(run.warmup + run.repeats):
            one.iteration(it)
    finally:
        result = one.result()
    return result


def traces_of(run: InferRun, results) -> list:
    """One measured trace per repeat, headed by the layer's shape (InferRun.describe)."""
    from hw.runner import build_traces

    traces = build_traces(_TraceConfig(run), results)
    for t in traces:
        t.meta.update({"phase": run.phase, **({"carries": "q" if run.scheme == "pass-q" else "kv"}
                                               if run.phase == "prefill" else {}), **run.extra})
    return traces


@dataclass(frozen=True)
class _TraceConfig:
    """What hw.runner.build_traces reads of a run, for an inference run."""

    run: InferRun

    @property
    def repeats(self) -> int:
        return self.run.repeats

    @property
    def warmup(self) -> int:
        return self.run.warmup

    @property
    def seed(self) -> int:
        return self.run.seed

    @property
    def n_gpus(self) -> int:
        return self.run.n_gpus

    @property
    def resolved_backend(self) -> str:
        return self.run.resolved_backend

    @property
    def scheme(self) -> str:
        return self.run.scheme_name

    def describe(self) -> dict[str, Any]:
        return self.run.describe()


def measure(run: InferRun) -> list:
    """The run on `run.n_gpus` local processes: its measured traces, one per repeat."""
    from hw.spawn import spawn

    results = spawn(_rank_main, run.n_gpus, args=(run,), backend=run.resolved_backend, timeout_s=run.timeout_s)
    return traces_of(run, results)


def _many(ctx, runs: list[InferRun]):
    """Every run's warm-up, then repeat i of every run before repeat i + 1 of any: a slow
    spell of a shared host then weighs on every run alike."""
    mine = [RankInfer(ctx, run) for run in runs]
    for one in mine:
        for it in range(one.run.warmup):
            one.iteration(it)
    for i in range(max(run.repeats for run in runs)):
        for one in mine:
            if i < one.run.repeats:
                one.iteration(one.run.warmup + i)
    return [one.result() for one in mine]


def measure_many(runs: list[InferRun]) -> list[list]:
    """Several runs, one set of processes per rank count (start-up paid once per count),
    their repeats interleaved (`_many`): each run's traces, in the order given."""
    from hw.spawn import spawn

    groups: dict[tuple, list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault((run.n_gpus, run.resolved_backend, run.device), []).append(i)
    out: list = [None] * len(runs)
    for (n, backend, _), idx in groups.items():
        mine = [runs[i] for i in idx]
        per_rank = spawn(_many, n, args=(mine,), backend=backend, timeout_s=max(r.timeout_s for r in mine))
        for j, i in enumerate(idx):
            out[i] = traces_of(runs[i], [rank_runs[j] for rank_runs in per_rank])
    return out


# ---- the command line -----------------------------------------------------------------------


def add_infer_args(p: argparse.ArgumentParser) -> None:
    """The options of `ringsim hw infer`."""
    p.add_argument("--phase", choices=PHASES, default="prefill", help="(default prefill)")
    p.add_argument("--gpus", type=int, default=2, metavar="N", help="ranks, one process each (default 2)")
    p.add_argument("--scheme", choices=PREFILL_SCHEMES, default=None, help="prefill: (default pass-kv)")
    p.add_argument("--merge-by", choices=DECODE_MERGES, default="all-gather",
                   help="decode: how the partial results meet (default all-gather)")
    p.add_argument("--context", type=tokens, default=None,
                   help="prefill: cached + new tokens (default: --new, no cache); decode: each request's "
                        "tokens in the cache, prompt and generated (default 4096)")
    p.add_argument("--new", type=tokens, default=None,
                   help="prefill: tokens computed now, whole chunks of the layout (default 2048); decode: new "
                        "queries per request, the context's last (default 1)")
    p.add_argument("--prompts", default=None, metavar="P1,P2,...",
                   help="decode: a batch of requests of these prompt lengths (instead of --context and --batch)")
    p.add_argument("--generated", type=tokens, default=0,
                   help="decode: tokens each request has generated, in the cache after its prompt (default 0)")
    p.add_argument("--batch", type=int, default=1, help="requests (default 1)")
    p.add_argument("--heads", type=int, default=8, help="query heads (default 8)")
    p.add_argument("--kv-heads", type=int, default=None, help="K/V heads, fewer for GQA (default: --heads)")
    p.add_argument("--head-dim", type=int, default=64, help="(default 64)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32", help="(default fp32)")
    p.add_argument("--layout", default=None,
                   help="prefill: the new tokens' layout (contiguous, striped, zigzag; default zigzag); decode: "
                        "the cache's (round-robin, contiguous; default round-robin)")
    p.add_argument("--cache-layout", choices=CACHE_LAYOUTS, default="zigzag",
                   help="prefill: how the cached prefix lies over the ranks (default zigzag)")
    p.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    p.add_argument("--repeats", type=int, default=3, help="measured iterations, one trace each (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, default=None, help="CPU threads per rank (default: cores shared)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a rank waits on a peer (default 120)")
    p.add_argument("--block-impl", choices=["auto", "fused", "matmul"], default="auto")
    p.add_argument("--trace", metavar="FILE",
                   help="save the traces: FILE for one repeat; with several, {i} in FILE is the repeat, else -rI "
                        "goes before the extension")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run_from_args(a: argparse.Namespace) -> InferRun:
    import torch

    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RingsimError(f"--device cuda: torch {torch.__version__} sees no CUDA device")
    common = dict(phase=a.phase, n_gpus=a.gpus, heads=a.heads, kv_heads=a.kv_heads or a.heads,
                  head_dim=a.head_dim, dtype=a.dtype, device=device, warmup=a.warmup, repeats=a.repeats,
                  seed=a.seed, timeout_s=a.timeout, threads_per_rank=a.threads, block_impl=a.block_impl)
    if a.phase == "prefill":
        if a.prompts is not None:
            raise RingsimError("--prompts describes a decode batch; a prefill takes --context and --new")
        new = a.new if a.new is not None else 2048
        context = a.context if a.context is not None else new
        if context < new:
            raise RingsimError(f"the context ({context} tokens) holds the {new} new ones: give --context >= --new")
        return InferRun(**common, scheme=a.scheme or "pass-kv", cached=context - new, new=new, batch=a.batch,
                        layout=a.layout or "zigzag", cache_layout=a.cache_layout)
    if a.scheme is not None:
        raise RingsimError("--scheme picks a prefill's ring; a decode step's partial results meet by --merge-by")
    if a.prompts is not None:
        try:
            prompts = tuple(int(tokens(x)) for x in a.prompts.split(","))
        except (ValueError, argparse.ArgumentTypeError):
            raise RingsimError(f"--prompts takes token counts separated by commas, got {a.prompts!r}") from None
    else:
        context = a.context if a.context is not None else 4096
        if context <= a.generated:
            raise RingsimError(f"the context ({context} tokens) holds the {a.generated} generated ones and a prompt")
        prompts = (context - a.generated,) * a.batch
    return InferRun(**common, merge_by=a.merge_by, prompts=prompts, generated=a.generated,
                    new=a.new if a.new is not None else 1, layout=a.layout or "round-robin")


def cmd_infer(a: argparse.Namespace) -> int:
    from hw.reporting import check_outputs, spread, trace_paths
    from sim.trace.metrics import compute_metrics
    from sim.units import fmt_s, table

    run = run_from_args(a)
    check_outputs(argparse.Namespace(trace=a.trace, chrome_trace=None, force=a.force), run.repeats)
    traces = measure(run)
    paths = trace_paths(a.trace, len(traces)) if a.trace else []
    for t, path in zip(traces, paths):
        t.save(path, overwrite=a.force)
    metrics = [compute_metrics(t) for t in traces]
    makespans = [m.makespan_s for m in metrics]
    mid = sorted(range(len(traces)), key=lambda i: makespans[i])[len(traces) // 2]
    if a.json:
        print(json.dumps({"config": traces[0].config, "hardware": traces[0].hardware,
                          "makespan_s": spread(makespans), "median_repeat": mid,
                          "repeats": [m.to_dict() for m in metrics], "trace_files": paths}, indent=2))
        return 0
    hw = traces[0].hardware
    print(f"{run.n_gpus} ranks ({run.resolved_backend}, {hw['device']}, {hw['threads_per_rank'] or '-'} threads/rank, "
          f"{hw['block_impl']}), {run.label}, {run.heads}/{run.kv_heads} heads x {run.head_dim}, {run.dtype}")
    s = spread(makespans)
    print(f"attention layer over {s['n']} repeats: median {fmt_s(s['median'])}, min {fmt_s(s['min'])}, "
          f"max {fmt_s(s['max'])}, cv {s['cv']:.1%}")
    if run.phase == "prefill":
        from sim.inference.work import rule_scheme, rule_threshold

        print(f"the paper's rule (arXiv 2411.01783) takes {rule_scheme(run.cached, run.new, run.heads, run.kv_heads)}: "
              f"new share T/(T+P) = {run.new / (run.new + run.cached):.3f} against 2 H_kv/H = "
              f"{rule_threshold(run.heads, run.kv_heads):.3f}")
    print()
    m = metrics[mid]
    rows = [[r.rank, fmt_s(r.compute_s), fmt_s(r.comm_s), fmt_s(r.exposed_comm_s), fmt_s(r.idle_s),
             f"{r.flops / 1e9:.3f}"] for r in m.ranks]
    print(table(["rank", "compute", "comm", "exposed comm", "idle", "GFLOP"], rows))
    for path in paths:
        print(f"trace: {path}")
    return 0


def run_dict(run: InferRun) -> dict[str, Any]:
    """The run's fields (JSON-ready)."""
    d = asdict(run)
    d["prompts"] = list(run.prompts)
    return d

