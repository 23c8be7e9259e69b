"""Time of one attention block from published kernel throughput: a rate by mask and size,
the merge of the partial result, and the launch.

DESIGN.md's compute time (overhead + FLOPs / rate) with the rate made specific to the
block, and the merge added:

    time = launch + FLOPs / rate(pass, mask, head dim, length) + merge bytes / HBM bandwidth

- **Rate**: the published TFLOP/s of the kernel (sim.presets.KERNEL_TABLES) for the
  block's pass (fwd, bwd) and mask: a "full" block runs the dense kernel, a "diagonal"
  one (cut by the causal mask: the contiguous and zigzag diagonal, every striped block)
  the causal kernel, whose rate is lower. The tables hold the number of query tiles
  fixed and vary the sequence length, so the length that sets the rate is that of the
  kernel's inner loop: the keys in a dense forward, the queries in a dense backward
  (FlashAttention-2 parallelizes the backward over key blocks), the side of the
  triangle in a causal block. Between published lengths the rate is interpolated
  linearly in log2(length); outside them it is held at the nearest one. A head dim the
  table lacks takes the nearest one it has.
- **Merge**: after each block the running (out, lse) takes in the block's result:
  memory-bound work on the output and the statistics, at the datasheet's HBM bandwidth
  (a choice of this model: the merge is folded into the block's time, as ring kernels
  run it on the compute stream right after the block). Forward: per output element the
  bytes of sim.presets.MERGE_BYTES (one fused pass, or the unfused chain of elementwise
  kernels ring-flash-attention runs), per (query row, head) those of the statistics;
  a block on part of its rank's queries (`sliced`) adds the bytes of
  sim.presets.MERGE_SLICE_BYTES (the unfused merge copies the slice back).
  Backward: dQ accumulates over the block's query rows and dK, dV over its key rows, one
  in-place add each (read the fp32 accumulator and the block's gradient, write back).
- **Launch**: a fixed cost per block (sim.presets.LAUNCH_OVERHEAD_US).

The engine gives each block's FLOPs, pass, mask and the extent of its kernel call (the
query and key tokens that take part, sim.layouts.block_extents), not the workload's head count: the
output's width (heads x batch x head dim) is recovered from the FLOPs, taking the
block's pairs as q x kv for a full block and q x kv / 2 for a diagonal one. The head dim
and the K/V-to-query head ratio come from the workload (sim.players.head_geometry), or
the defaults of sim.config.Workload where a caller gives none.
"""

from __future__ import annotations

import numpy as np

from sim.errors import RingsimError
from sim.presets import KERNEL_TABLES, MERGE_BYTES, MERGE_SLICE_BYTES, KernelTable

PASS_FLOPS_FACTOR = {"fwd": 1.0, "bwd": 2.5}
"""FLOPs per forward FLOP of the same pairs (sim.config.BWD_FLOPS_FACTOR)."""
ACCUM_BYTES = 4
"""The running output, its statistics and the gradient accumulators are fp32."""


def kernel_table(name: str) -> KernelTable:
    if name not in KERNEL_TABLES:
        raise RingsimError(f"unknown kernel table {name!r}; choose from {', '.join(KERNEL_TABLES)}")
    return KERNEL_TABLES[name]


def series_head_dim(table: KernelTable, kind: str, mask: str, head_dim: int) -> int:
    """The head dim whose series the table uses for `head_dim` (itself, or the nearest)."""
    have = sorted(d for k, m, d in table.series if (k, m) == (kind, mask))
    if not have:
        raise RingsimError(f"kernel table {table.name} has no {kind} {mask} series")
    return min(have, key=lambda d: (abs(d - head_dim), d))


def rate_tflops(table: KernelTable, kind: str, mask: str, head_dim: int, length) -> np.ndarray:
    """Published TFLOP/s at inner-loop `length` (tokens; scalar or array): piecewise linear
    in log2(length) through the published points, held constant beyond them."""
    series = table.series[kind, mask, series_head_dim(table, kind, mask, head_dim)]
    pts = [(np.log2(s), v) for s, v in zip(table.seqlens, series.tflops) if v is not None]
    xs, ys = np.array([p[0] for p in pts]), np.array([p[1] for p in pts], dtype=float)
    x = np.log2(np.maximum(np.asarray(length, dtype=float), 1.0))
    return np.interp(x, xs, ys)


def loop_tokens(kind: str, mask: str, q_tokens, kv_tokens):
    """The length that sets a block's rate (module docstring)."""
    if mask == "diagonal" or kind == "bwd":
        return q_tokens
    return kv_tokens


def output_width(kind: str, mask: str, flops, q_tokens, kv_tokens):
    """heads x batch x head dim: elements of output per query token, from the FLOPs and
    the pairs a kernel call of this extent computes (q x kv, or half for a diagonal)."""
    pairs = np.asarray(q_tokens, dtype=float) * np.asarray(kv_tokens, dtype=float)
    if mask == "diagonal":
        pairs = pairs / 2.0
    return np.asarray(flops, dtype=float) / (4.0 * PASS_FLOPS_FACTOR[kind] * np.maximum(pairs, 1.0))


def whole_heads(kind: str, mask: str, flops: float, q_tokens: int, kv_tokens: int, head_dim: int) -> int:
    """A kernel call's heads (times batch), whole ones: its output width in heads of
    `head_dim`, rounded (a causal block's exact pairs are a little more than q x kv / 2)."""
    return round(float(output_width(kind, mask, flops, q_tokens, kv_tokens)) / head_dim)


def merge_bytes(kind: str, mask: str, flops, q_tokens, kv_tokens, *, head_dim: int,
                kv_heads_per_head: float, elem_bytes: int, merge: str, sliced=False) -> np.ndarray:
    """Bytes the merge after one block moves (module docstring); `sliced`: the block's
    queries are part of its rank's (scalar or array)."""
    width = output_width(kind, mask, flops, q_tokens, kv_tokens)
    q = np.asarray(q_tokens, dtype=float)
    if kind == "fwd":
        per_elem, per_row = MERGE_BYTES[merge](elem_bytes)
        slice_elem, slice_row = MERGE_SLICE_BYTES[merge]
        on_slice = np.asarray(sliced, dtype=bool)
        per_elem = np.where(on_slice, per_elem + slice_elem, per_elem)
        per_row = np.where(on_slice, per_row + slice_row, per_row)
        return q * width * (per_elem + per_row / head_dim)
    kv = np.asarray(kv_tokens, dtype=float)
    per_elem = 2 * ACCUM_BYTES + elem_bytes
    return per_elem * width * (q + 2.0 * kv_heads_per_head * kv)


def block_times_s(table: KernelTable, flops, *, kind, mask, q_tokens, kv_tokens, head_dim: int,
                  kv_heads_per_head: float, elem_bytes: int, merge: str,
                  memory_bandwidth_gbps: float, launch_overhead_us: float, sliced=None) -> np.ndarray:
    """Time of each block (arrays of equal length; kind and mask: arrays of names;
    sliced: whether each block's queries are part of its rank's, None: none are).

    An "empty" block is skipped: 0 s, no launch.
    """
    if merge not in MERGE_BYTES:
        raise RingsimError(f"merge must be one of {', '.join(MERGE_BYTES)}, got {merge!r}")
    flops = np.asarray(flops, dtype=float)
    kind, mask = np.asarray(kind, dtype=str), np.asarray(mask, dtype=str)
    q_tokens, kv_tokens = np.asarray(q_tokens), np.asarray(kv_tokens)
    sliced = np.zeros(flops.shape, dtype=bool) if sliced is None else np.asarray(sliced, dtype=bool)
    out = np.zeros(flops.shape)
    for k in ("fwd", "bwd"):
        for m in ("full", "diagonal"):
            sel = (kind == k) & (mask == m)
            if not sel.any():
                continue
            f, q, kv = flops[sel], q_tokens[sel], kv_tokens[sel]
            rate = rate_tflops(table, k, m, head_dim, loop_tokens(k, m, q, kv)) * 1e12
            moved = merge_bytes(k, m, f, q, kv, head_dim=head_dim, kv_heads_per_head=kv_heads_per_head,
                                elem_bytes=elem_bytes, merge=merge, sliced=sliced[sel])
            out[sel] = launch_overhead_us * 1e-6 + f / rate + moved / (memory_bandwidth_gbps * 1e9)
    unknown = ~((mask == "full") | (mask == "diagonal") | (mask == "empty")) | ~((kind == "fwd") | (kind == "bwd"))
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise RingsimError(f"no kernel rate for a {kind[i]!r} block with mask {mask[i]!r}")
    return out


def best_rate_flops(table: KernelTable, head_dim: int) -> float:
    """The table's fastest published rate for `head_dim`: dense forward at its longest
    length (the rate of the ideal time, DESIGN.md)."""
    series = table.series["fwd", "full", series_head_dim(table, "fwd", "full", head_dim)]
    return max(v for v in series.tflops if v is not None) * 1e12
