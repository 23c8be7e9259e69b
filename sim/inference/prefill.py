"""One attention layer of a prefill with context parallelism over a cached prefix, as a
schedule played on the engine (docs/inference.md).

N ranks (each a tensor-parallel group's GPU, with its share of the heads) hold the new
tokens' queries and their K/V as sim.inference.work lays them out, and the cached K/V as
the cache was written. Three schemes:

- **pass-KV** (the training forward's ring, docs/design.md fact 2): at step k rank r
  computes its queries against the K/V of rank (r - k) mod N and forwards that block
  (cached and new K/V, |cached_s| + |new_s| tokens) to r + 1. Blocks merge as they come
  (the block model's merge after each call).
- **pass-Q**: the queries travel and K/V stay: at step k rank s computes the queries of
  rank (s - k) mod N against its own K/V and forwards the queries (T / N tokens, every
  query head) to s + 1. Each rank then holds a partial output and log-sum-exp for every
  rank's queries; an all-to-all returns them to their owners (a flow per ordered pair,
  sim.hardware.topology.Topology.all_to_all), and each owner merges its N partials in
  one memory-bound kernel (`merge_s`: it reads the N outputs and statistics and writes
  the output, at the GPU's streaming rate, plus a kernel's gap).
- **allgather** (Llama 3's context parallelism): K/V of every rank gathered first (the
  two-level ring all-gather of sim.hardware.topology), then each rank's queries against all
  of it, a call per piece: the cache (dense) and, per query chunk of its layout, the
  earlier new chunks (dense) and its own chunk (causal). Contiguous and zigzag layouts.

Every block is called as two pieces: its queries against the cached K/V the rank holds
(dense, skipped when it holds none) and against its new K/V (the ring's block of the
layout on T new tokens: sim.layouts.block_work_and_masks and block_extents), so the block
model (sim.hardware.kernel_model) times each with its own shape. With overlap (always:
inference rings are written double-buffered), a hop of step k is posted at the start of
step k on both ends, as the training ring's "step" sync: it waits for the block its
sender received and for both ends' computes of step k - 1.

**Calls.** Where the hardware's block times depend on the call order (the block model's
merge and host floor), a layer's calls are timed as a prefill makes them: none pays the
host's floor in front (the layer's attention is queued behind its QKV product), and every
call merges into a running output but the first on a set of queries: pass-Q's first call
of each step (it starts that step's partial, which the all-to-all returns) and each of the
all-gather's calls (one varlen call in Llama 3's, which merges nothing).

The operations are timed by the hardware model (sim.engine.players.durations_s: the
block model or the flat one, NCCL's costs of each send and all-to-all round), the merges
by `merge_s`, and played by the wave player (sim.engine.players.times_waves) into the
standard trace (sim.engine.record). NCCL's pull on the computes beside a transfer
(docs/nccl.md) is not played here: a prefill's blocks are long against their hops.
The transfers' kinds are the trace's: a ring hop is `kv` whatever it carries (under
pass-Q the queries: the trace's header says `carries: q`), the return of the partials is
`a2a`, the gather `ag`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from sim.engine.players import durations_s, head_geometry, times_waves
from sim.engine.record import record_owned
from sim.engine.schedule import A2A, AG, EMPTY, FULL, FWD, KV, MASKS, NO_DEP, Schedule, ScheduleBuilder
from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.hardware.presets import KERNEL_GAP_US
from sim.hardware.topology import Topology
from sim.inference.work import (
    ALL_GATHER,
    CACHE_LAYOUTS,
    LSE_BYTES,
    SCHEMES,
    cached_counts,
    kv_hop_bytes,
    new_pieces,
    padded_new,
    partial_bytes,
    q_hop_bytes,
)
from sim.layouts import NAMES as LAYOUT_NAMES
from sim.layouts import chunks_of_rank
from sim.scenario.config import Workload
from sim.scenario.quantities import DTYPE_BYTES
from sim.trace.format import Trace
from sim.units import positive_ints

KV_DTYPES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
"""Bytes per element of the K/V cache (and of K/V on the ring): 16-bit, or FP8 (e4m3);
fp32 is a CPU run's (the kernels' validation on a CPU profile, hw.inference_validate)."""


@dataclass(frozen=True, kw_only=True)
class PrefillAttention:
    """One attention layer of a prefill on N ranks: the shape each rank's GPU computes."""

    n_ranks: int
    """Ranks of the context-parallel group (N)."""
    cached: int
    """Tokens already in the cache (P), before the new ones."""
    new: int
    """Tokens computed now (T); padded to whole chunks of `layout` (`new_padded`)."""
    heads: int
    """Query heads on each GPU (the model's over TP)."""
    kv_heads: int
    """K/V heads on each GPU."""
    head_dim: int = 128
    batch: int = 1
    """Requests of this shape prefilled together."""
    dtype: str = "bf16"
    """Q, K, V and the output in the attention kernel."""
    kv_dtype: str = "bf16"
    """The K/V cache's elements (and so the K/V a ring hop or the all-gather carries)."""
    layout: str = "zigzag"
    """How the new tokens are cut over the ranks (sim.layouts)."""
    cache_layout: str = "zigzag"
    """How the cached prefix lies over the ranks (sim.inference.work.CACHE_LAYOUTS)."""
    scheme: str = "pass-kv"
    granularity: str = "exact"
    tile: int = 128

    def __post_init__(self) -> None:
        positive_ints(self, "n_ranks", "new", "heads", "kv_heads", "head_dim", "batch", "tile")
        if isinstance(self.cached, bool) or not isinstance(self.cached, int) or self.cached < 0:
            raise RingsimError(f"the cached prefix must be a whole number of tokens, 0 or more, got {self.cached!r}")
        if self.heads % self.kv_heads:
            raise RingsimError(f"K/V heads ({self.kv_heads}) must divide the query heads ({self.heads})")
        if self.scheme not in SCHEMES:
            raise RingsimError(f"the prefill scheme must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        if self.layout not in LAYOUT_NAMES:
            raise RingsimError(f"the layout of the new tokens must be one of {', '.join(LAYOUT_NAMES)}, "
                               f"got {self.layout!r}")
        if self.cache_layout not in CACHE_LAYOUTS:
            raise RingsimError(f"the cache layout must be one of {', '.join(CACHE_LAYOUTS)}, got {self.cache_layout!r}")
        if self.scheme == ALL_GATHER and self.layout == "striped":
            raise RingsimError("allgather prefill cuts the new tokens in chunks: give --layout zigzag or contiguous")
        if self.dtype not in DTYPE_BYTES:
            raise RingsimError(f"the attention dtype must be one of {', '.join(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.kv_dtype not in KV_DTYPES:
            raise RingsimError(f"the K/V cache dtype must be one of {', '.join(KV_DTYPES)}, got {self.kv_dtype!r}")
        if self.granularity not in ("exact", "tile"):
            raise RingsimError(f"granularity must be exact or tile, got {self.granularity!r}")

    @property
    def new_padded(self) -> int:
        """T rounded up to whole chunks of the layout (every rank as many new tokens)."""
        return padded_new(self.new, self.n_ranks, self.layout)

    @property
    def new_per_rank(self) -> int:
        return self.new_padded // self.n_ranks

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def workload(self) -> Workload:
        """The engine's workload: this layer's heads and dtype (its seq is the context)."""
        return Workload(batch=self.batch, seq=self.cached + self.new_padded, heads=self.heads,
                        kv_heads=self.kv_heads, head_dim=self.head_dim, dtype=self.dtype, causal=True, pass_="fwd")

    def flops(self, pairs) -> np.ndarray:
        """Forward FLOPs of `pairs` per head and batch item: 4 d x pairs x heads x batch."""
        return 4.0 * self.head_dim * np.asarray(pairs, dtype=np.float64) * self.heads * self.batch

    def describe(self) -> dict:
        return {**asdict(self), "new_padded": self.new_padded}

    @classmethod
    def from_config(cls, config: dict) -> "PrefillAttention":
        """The shape a trace's header describes (`simulate_prefill_attention` writes it: `kind:
        prefill` and `describe()`), as a measured run that shards the same way may write it."""
        names = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in config.items() if k in names})
        except TypeError as e:
            raise RingsimError(f"the trace's header is not a prefill's shape: {e}") from None


def merge_s(shape: PrefillAttention, partials: int, stream_gbps: float) -> float:
    """pass-Q's merge on the queries' owner: read `partials` outputs (input dtype) and
    log-sum-exps (fp32) of its T / N queries, write the output once, at the GPU's
    streaming rate, plus the gap after one kernel (sim.hardware.presets.KERNEL_GAP_US)."""
    rows = shape.batch * shape.new_per_rank * shape.heads
    moved = partials * rows * (shape.head_dim * shape.elem_bytes + LSE_BYTES) + rows * shape.head_dim * shape.elem_bytes
    return moved / (stream_gbps * 1e9) + KERNEL_GAP_US * 1e-6


def build_prefill_schedule(shape: PrefillAttention, hardware: Hardware) -> tuple[Schedule, np.ndarray]:
    """The schedule of one layer (module docstring) and the ids of its merge kernels
    (pass-Q's; none otherwise)."""
    n = shape.n_ranks
    topo = Topology.of(hardware, n)
    b = ScheduleBuilder(n, topo.resource_names())
    own = np.array([b.chunk_set(c) for c in chunks_of_rank(shape.layout, n)], dtype=np.int64)
    if shape.scheme == ALL_GATHER:
        _allgather(b, shape, topo, own)
        return b.build(), np.zeros(0, dtype=np.int64)
    merges = _ring(b, shape, topo, own)
    return b.build(), merges


def _ring(b: ScheduleBuilder, shape: PrefillAttention, topo: Topology, own: np.ndarray) -> np.ndarray:
    n, t = shape.n_ranks, shape.new_per_rank
    ranks = np.arange(n)
    cached = cached_counts(shape.cached, n, shape.cache_layout)
    work, masks, q_ext, kv_ext = new_pieces(shape.new_padded, n, shape.layout, shape.granularity, shape.tile)
    pass_q = shape.scheme == "pass-q"
    kv_b = KV_DTYPES[shape.kv_dtype]
    arrived = np.full(n, NO_DEP, dtype=np.int64)        # the hop each rank received at the step before
    last = np.full(n, NO_DEP, dtype=np.int64)           # each rank's last compute of the step before
    for k in range(n):
        moved = (ranks - k) % n
        q_rank, kv_rank = (moved, ranks) if pass_q else (ranks, moved)
        c = cached[kv_rank]
        first = b.computes(kind=FWD, rank=ranks, step=k, pairs=t * c, flops=shape.flops(t * c),
                           mask=np.where(c > 0, FULL, EMPTY), q_tokens=t, kv_tokens=c, q_chunks=own[q_rank],
                           kv_chunks=own[kv_rank], kv_rank=kv_rank, after=[arrived])
        w = work[q_rank, kv_rank]
        second = b.computes(kind=FWD, rank=ranks, step=k, pairs=w, flops=shape.flops(w), mask=masks[q_rank, kv_rank],
                            q_tokens=q_ext[q_rank, kv_rank], kv_tokens=kv_ext[q_rank, kv_rank],
                            q_chunks=own[q_rank], kv_chunks=own[kv_rank], kv_rank=kv_rank, after=[first])
        if k < n - 1:
            dst = (ranks + 1) % n
            nbytes = (q_hop_bytes(t, shape.heads, shape.head_dim, shape.elem_bytes, shape.batch) if pass_q
                      else kv_hop_bytes(c + t, shape.kv_heads, shape.head_dim, kv_b, shape.batch))
            hops = b.transfers(kind=KV, src=ranks, dst=dst, step=k, nbytes=nbytes, resources=topo.route(ranks, dst),
                               kv_chunks=own[q_rank] if pass_q else own[kv_rank],
                               kv_rank=q_rank if pass_q else kv_rank, after=[arrived, last, last[dst]])
            arrived = np.full(n, NO_DEP, dtype=np.int64)
            arrived[dst] = hops
        last = second
    if not pass_q or n == 1:        # one rank's one partial is the output: nothing to return or merge
        return np.zeros(0, dtype=np.int64)
    # the partials back to their owners: rank s holds one for every rank's queries
    flows, dsts = [], []
    size = partial_bytes(t, shape.heads, shape.head_dim, shape.elem_bytes, shape.batch)
    for src, dst in topo.all_to_all(ranks[None, :]):
        flows.append(b.transfers(kind=A2A, src=src, dst=dst, step=n, nbytes=size, resources=topo.route(src, dst),
                                 kv_chunks=own[dst], kv_rank=dst, after=[last[src], last[dst]]))
        dsts.append(dst)
    got = b.take_in(np.concatenate(flows), np.concatenate(dsts), kind=FWD, step=n, q_chunks=own,
                    kv_chunks=own[np.concatenate(dsts)])
    return b.computes(kind=FWD, rank=ranks, step=n, pairs=0, flops=0.0, mask=FULL, q_tokens=t, kv_tokens=0,
                      q_chunks=own, kv_chunks=own, after=[np.where(got == NO_DEP, last, got)])


def _allgather(b: ScheduleBuilder, shape: PrefillAttention, topo: Topology, own: np.ndarray) -> None:
    n, t = shape.n_ranks, shape.new_per_rank
    ranks = np.arange(n)
    cached = cached_counts(shape.cached, n, shape.cache_layout)
    block = kv_hop_bytes(cached + t, shape.kv_heads, shape.head_dim, KV_DTYPES[shape.kv_dtype], shape.batch)
    every = b.chunk_set(range(int(own.size and max(max(c) for c in chunks_of_rank(shape.layout, n)) + 1)))
    into = None
    flows, dsts = [], []
    for level, src, dst, blocks in topo.all_gather():
        nbytes = block[blocks] if level == 0 else block[blocks].sum(axis=1)
        f = b.transfers(kind=AG, src=src, dst=dst, step=0, nbytes=nbytes, resources=topo.route(src, dst),
                        kv_chunks=own[blocks] if level == 0 else every,
                        after=[] if into is None else [into[src]])
        into = np.full(n, NO_DEP, dtype=np.int64)
        into[dst] = f
        flows.append(f)
        dsts.append(dst)
    gate = np.full(n, NO_DEP, dtype=np.int64)
    if flows:
        gate = b.take_in(np.concatenate(flows), np.concatenate(dsts), kind=FWD, step=0, q_chunks=own,
                         kv_chunks=every)
    p = shape.cached
    prev = b.computes(kind=FWD, rank=ranks, step=0, pairs=t * p, flops=shape.flops(t * p), mask=FULL if p else EMPTY,
                      q_tokens=t, kv_tokens=p, q_chunks=own, kv_chunks=every, after=[gate])
    held = np.array(chunks_of_rank(shape.layout, n), dtype=np.int64)       # (n, chunks per rank)
    z = shape.new_padded // (n * held.shape[1])
    for j in range(held.shape[1]):
        c = held[:, j]
        before = z * c * z
        prev = b.computes(kind=FWD, rank=ranks, step=0, pairs=before, flops=shape.flops(before),
                          mask=np.where(c > 0, FULL, EMPTY), q_tokens=z, kv_tokens=z * c, q_chunks=own,
                          kv_chunks=every, after=[prev])
        diag = z * (z + 1) // 2
        prev = b.computes(kind=FWD, rank=ranks, step=0, pairs=diag, flops=shape.flops(diag), mask=1, q_tokens=z,
                          kv_tokens=z, q_chunks=own, kv_chunks=own, after=[prev])


def _call_times(schedule: Schedule, hardware: Hardware, workload: Workload, scheme: str, dur: np.ndarray) -> None:
    """The attention calls timed as a prefill layer makes them (module docstring, "Calls"),
    in place of the engine's call order, where the hardware's times depend on it."""
    comp = schedule.compute_ids
    comp = comp[schedule.mask[comp] != EMPTY]
    if not comp.size:
        return
    fresh = np.zeros(len(comp), dtype=bool)
    if scheme == ALL_GATHER:
        fresh[:] = True
    elif scheme == "pass-q":
        # the first call of each step on a rank starts that step's partial
        key = schedule.rank[comp].astype(np.int64) * (int(schedule.step.max()) + 1) + schedule.step[comp]
        fresh[np.unique(key, return_index=True)[1]] = True
    dur[comp] = hardware.compute_times_s(
        schedule.flops[comp], dtype=workload.dtype, kind=np.full(len(comp), "fwd"),
        mask=np.array(MASKS)[schedule.mask[comp]], q_tokens=schedule.q_tokens[comp],
        kv_tokens=schedule.kv_tokens[comp], **head_geometry(workload), alone=fresh,
        isolated=np.zeros(len(comp), dtype=bool))


def simulate_prefill_attention(shape: PrefillAttention, hardware: Hardware) -> Trace:
    """One layer's attention played on `hardware` (its GPUs one per rank, packed
    `gpus_per_node` to a node): the standard simulated trace, its header's config the
    shape (`kind: prefill`)."""
    schedule, merges = build_prefill_schedule(shape, hardware)
    workload = shape.workload
    schedule.mask[merges] = EMPTY              # the engine does not time the merges: `merge_s` does
    dur = durations_s(schedule, hardware, workload)
    if hardware.takes_call_order:
        _call_times(schedule, hardware, workload, shape.scheme, dur)
    schedule.mask[merges] = FULL
    stream = hardware.gpu.memory_bandwidth_gbps or 1000.0
    dur[merges] = merge_s(shape, shape.n_ranks, stream)
    start, end = times_waves(schedule, dur)
    header_hw = {**hardware.describe(), "rate_flops": hardware.rate_flops(shape.dtype, shape.head_dim)}
    meta = {"player": "recurrence", "phase": "prefill", "ops": len(schedule),
            "carries": "q" if shape.scheme == "pass-q" else "kv"}
    config = {"kind": "prefill", **shape.describe()}
    return Trace("simulated", shape.n_ranks, record_owned(schedule, [start, end], release=False), config, header_hw,
                 meta)
