"""One attention layer of a decode step with context parallelism: the K/V cache sharded
over N ranks, each rank attending its shard, the partial outputs merged exactly by their
log-sum-exps (docs/inference.md).

- **The shard.** A request's cache lies over the ranks `contiguous` (the prompt cut in N
  contiguous pieces, as a contiguous prefill wrote it, and every generated token appended
  on the last rank) or `round-robin` (token t on rank t mod N: SGLang's and vLLM's decode
  context parallelism interleave the cache by token, so a rank's share grows evenly).
  A batch holds requests of different lengths; each rank attends its tokens of every one.
- **Attention is memory-bound.** One new query per request meets its whole shard: two
  FLOPs per byte or so, far below any GPU's ridge. A rank's time is the bytes it reads
  (its K and V, `kv_bytes`, plus the queries and outputs) at the GPU's achieved streaming
  bandwidth (`Gpu.memory_bandwidth_gbps`: the rate a streaming kernel was measured to reach
  on that GPU, with its source in sim.hardware.presets, e.g. 2,500 GB/s on an H100 SXM, 75% of
  its 3,350), plus the floor of its two kernels (the split-K attention and its combine, as
  flash-attention's decoding path launches them: flash_fwd_splitkv_kernel and
  flash_fwd_splitkv_combine_kernel), each a gap on the GPU (sim.hardware.presets.KERNEL_GAP_US);
  the host's launches hide behind the queued step (decode runs under CUDA graphs).
- **The merge.** Every rank's partial (output in the input dtype, log-sum-exp in fp32, per
  request and head) is combined: `all-gather` (every rank gathers every partial and
  merges all heads: a ring all-gather of the partials) or `all-to-all` (each rank takes
  1/N of the heads from every rank, merges them, and the merged outputs are all-gathered
  so that every rank holds the whole output for the next layer). The flows are played on
  the engine and timed by NCCL's model (sim.hardware.nccl: a few kilobytes, so the
  latency term dominates); the merge kernel reads the partials and writes the output at the
  streaming rate, plus a gap.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from sim.engine.players import durations_s, times_waves
from sim.engine.record import record_owned
from sim.engine.schedule import A2A, AG, EMPTY, FULL, FWD, NO_DEP, ScheduleBuilder
from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.hardware.presets import KERNEL_GAP_US
from sim.hardware.topology import Topology
from sim.inference.prefill import KV_DTYPES
from sim.inference.work import LSE_BYTES, cached_counts
from sim.scenario.config import Workload
from sim.scenario.quantities import DTYPE_BYTES
from sim.trace.format import Trace
from sim.units import positive_ints

DECODE_LAYOUTS = ("round-robin", "contiguous")
MERGES = ("all-to-all", "all-gather")
DECODE_KERNELS = 2
"""Kernels one decode attention launches: the split-K attention and the combine of its
splits (Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_launch_template.h,
run_mha_fwd_splitkv_dispatch: flash_fwd_splitkv_kernel then flash_fwd_splitkv_combine_kernel)."""


@dataclass(frozen=True, kw_only=True)
class DecodeAttention:
    """One decode step's attention layer on N ranks."""

    n_ranks: int
    prompts: tuple[int, ...]
    """Each request's prompt tokens in the cache (its prefill's)."""
    generated: int = 0
    """Tokens each request has generated so far (in the cache too)."""
    heads: int = 16
    """Query heads on each GPU."""
    kv_heads: int = 1
    """K/V heads on each GPU."""
    head_dim: int = 128
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    layout: str = "round-robin"
    """How each request's cache lies over the ranks (DECODE_LAYOUTS)."""
    merge: str = "all-gather"
    """How the partials meet (MERGES)."""

    def __post_init__(self) -> None:
        positive_ints(self, "n_ranks", "heads", "kv_heads", "head_dim")
        if not self.prompts or any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1
                                   for p in self.prompts):
            raise RingsimError(f"every request needs a prompt of 1 token or more, got {self.prompts!r}")
        if isinstance(self.generated, bool) or not isinstance(self.generated, int) or self.generated < 0:
            raise RingsimError(f"generated tokens must be 0 or more, got {self.generated!r}")
        if self.heads % self.kv_heads:
            raise RingsimError(f"K/V heads ({self.kv_heads}) must divide the query heads ({self.heads})")
        if self.layout not in DECODE_LAYOUTS:
            raise RingsimError(f"the decode cache layout must be one of {', '.join(DECODE_LAYOUTS)}, "
                               f"got {self.layout!r}")
        if self.merge not in MERGES:
            raise RingsimError(f"the decode merge must be one of {', '.join(MERGES)}, got {self.merge!r}")
        if self.dtype not in DTYPE_BYTES:
            raise RingsimError(f"the attention dtype must be one of {', '.join(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.kv_dtype not in KV_DTYPES:
            raise RingsimError(f"the K/V cache dtype must be one of {', '.join(KV_DTYPES)}, got {self.kv_dtype!r}")

    @property
    def batch(self) -> int:
        return len(self.prompts)

    def tokens(self) -> np.ndarray:
        """(requests, N): the cached tokens of each request on each rank (module docstring)."""
        n = self.n_ranks
        if self.layout == "round-robin":
            return np.stack([cached_counts(int(p) + self.generated, n, "striped") for p in self.prompts])
        out = np.stack([cached_counts(int(p), n, "contiguous") for p in self.prompts])
        out[:, -1] += self.generated
        return out

    def kv_bytes(self) -> np.ndarray:
        """(N,) bytes of K and V each rank reads for one layer."""
        return self.tokens().sum(axis=0) * 2 * self.kv_heads * self.head_dim * KV_DTYPES[self.kv_dtype]

    def partial_bytes(self) -> int:
        """One rank's partial result: every request's output (every head) and its log-sum-exp."""
        return self.batch * self.heads * (self.head_dim * DTYPE_BYTES[self.dtype] + LSE_BYTES)

    def describe(self) -> dict:
        d = asdict(self)
        d["prompts"] = [int(p) for p in self.prompts]
        return d

    @classmethod
    def from_config(cls, config: dict) -> "DecodeAttention":
        """The shape a trace's header describes (`kind: decode` and `describe()`)."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in config.items() if k in names}
        if isinstance(values.get("prompts"), list):
            values["prompts"] = tuple(values["prompts"])
        try:
            return cls(**values)
        except TypeError as e:
            raise RingsimError(f"the trace's header is not a decode step's shape: {e}") from None


def attention_s(shape: DecodeAttention, stream_gbps: float) -> np.ndarray:
    """(N,) each rank's attention (module docstring): its K/V, the queries read and the
    partial written, at the streaming rate, plus the kernels' gaps."""
    io = shape.batch * shape.heads * shape.head_dim * DTYPE_BYTES[shape.dtype] + shape.partial_bytes()
    return (shape.kv_bytes() + io) / (stream_gbps * 1e9) + DECODE_KERNELS * KERNEL_GAP_US * 1e-6


def merge_kernel_s(shape: DecodeAttention, stream_gbps: float) -> float:
    """The merge on one rank: read N partials (of all heads, or of 1/N of them after an
    all-to-all) and write the output, at the streaming rate, plus a gap."""
    share = 1.0 / shape.n_ranks if shape.merge == "all-to-all" else 1.0
    out = shape.batch * shape.heads * shape.head_dim * DTYPE_BYTES[shape.dtype]
    return share * (shape.n_ranks * shape.partial_bytes() + out) / (stream_gbps * 1e9) + KERNEL_GAP_US * 1e-6


def simulate_decode_attention(shape: DecodeAttention, hardware: Hardware) -> Trace:
    """One layer's decode attention and merge played on `hardware` (one GPU per rank): the
    standard simulated trace (`kind: decode` in its config)."""
    n = shape.n_ranks
    topo = Topology.of(hardware, n)
    b = ScheduleBuilder(n, topo.resource_names())
    ranks = np.arange(n)
    own = np.array([b.chunk_set((r,)) for r in range(n)], dtype=np.int64)
    every = b.chunk_set(range(n))
    tokens = shape.tokens().sum(axis=0)
    flops = 4.0 * shape.head_dim * shape.heads * tokens
    attend = b.computes(kind=FWD, rank=ranks, step=0, pairs=tokens, flops=flops, mask=FULL, q_tokens=shape.batch,
                        kv_tokens=tokens, q_chunks=own, kv_chunks=own)
    ours = [attend]
    gate = attend
    step = 1
    if n > 1:
        partial = shape.partial_bytes()
        if shape.merge == "all-to-all":
            flows, srcs, dsts = [], [], []
            for src, dst in topo.all_to_all(ranks[None, :]):
                flows.append(b.transfers(kind=A2A, src=src, dst=dst, step=step, nbytes=-(-partial // n),
                                         resources=topo.route(src, dst), kv_chunks=own[src],
                                         after=[gate[src], gate[dst]]))
                srcs.append(src)
                dsts.append(dst)
            got = b.take_in(np.concatenate(flows), np.concatenate(dsts), kind=FWD, step=step, q_chunks=own,
                            kv_chunks=own[np.concatenate(srcs)])
            gate = b.computes(kind=FWD, rank=ranks, step=step, pairs=0, flops=0.0, mask=FULL, q_tokens=shape.batch,
                              kv_tokens=0, q_chunks=own, kv_chunks=every, after=[np.where(got == NO_DEP, gate, got)])
            ours.append(gate)
            step += 1
            merged = -(-shape.batch * shape.heads * shape.head_dim * DTYPE_BYTES[shape.dtype] // n)
            gate = _gather(b, topo, gate, merged, step, own, every)
        else:
            gate = _gather(b, topo, gate, partial, step, own, every)
            gate = b.computes(kind=FWD, rank=ranks, step=step, pairs=0, flops=0.0, mask=FULL, q_tokens=shape.batch,
                              kv_tokens=0, q_chunks=own, kv_chunks=every, after=[gate])
            ours.append(gate)
    schedule = b.build()
    mine = np.concatenate(ours)
    schedule.mask[mine] = EMPTY                 # timed here, not by the engine's attention model
    workload = Workload(batch=shape.batch, seq=int(max(shape.prompts)) + shape.generated, heads=shape.heads,
                        kv_heads=shape.kv_heads, head_dim=shape.head_dim, dtype=shape.dtype, causal=False,
                        pass_="fwd")
    dur = durations_s(schedule, hardware, workload)
    schedule.mask[mine] = FULL
    stream = hardware.gpu.memory_bandwidth_gbps or 1000.0
    dur[attend] = attention_s(shape, stream)
    if len(ours) > 1:
        dur[ours[1]] = merge_kernel_s(shape, stream)
    start, end = times_waves(schedule, dur)
    header_hw = {**hardware.describe(), "rate_flops": hardware.rate_flops(shape.dtype, shape.head_dim)}
    meta = {"player": "recurrence", "phase": "decode", "ops": len(schedule)}
    return Trace("simulated", n, record_owned(schedule, [start, end], release=False),
                 {"kind": "decode", **shape.describe()}, header_hw, meta)


def _gather(b: ScheduleBuilder, topo: Topology, gate: np.ndarray, nbytes: int, step: int, own: np.ndarray,
            every: int) -> np.ndarray:
    """A ring all-gather of `nbytes` per rank after `gate` (per rank); returns, per rank, what
    the next operation waits on."""
    n = b.n_ranks
    into = None
    flows, dsts = [], []
    for level, src, dst, blocks in topo.all_gather():
        size = nbytes if level == 0 else nbytes * blocks.shape[1]
        f = b.transfers(kind=AG, src=src, dst=dst, step=step, nbytes=size, resources=topo.route(src, dst),
                        kv_chunks=own[blocks] if level == 0 else every,
                        after=[gate[src]] if into is None else [into[src], gate[src]])
        into = np.full(n, NO_DEP, dtype=np.int64)
        into[dst] = f
        flows.append(f)
        dsts.append(dst)
    got = b.take_in(np.concatenate(flows), np.concatenate(dsts), kind=FWD, step=step, q_chunks=own, kv_chunks=every)
    return np.where(got == NO_DEP, gate, got)
