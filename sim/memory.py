"""Peak memory per rank (DESIGN.md, fact 4 and "Peak memory").

A rank holds its own Q/K/V shard, two ring buffers of K/V (the block computed on and
the block arriving), its output, an fp32 output accumulator and fp32 softmax
statistics (running max and normalizer; the log-sum-exp is kept for backward).
Backward adds dO, the fp32 dQ accumulator and two ring buffers of fp32 dK/dV.
Nothing grows with the number of ranks at a fixed number of tokens per rank.
"""

from __future__ import annotations

from sim.config import ACCUM_BYTES, Workload


def peak_memory_bytes(workload: Workload, tokens_per_rank: int) -> dict[str, int]:
    """Bytes per rank, itemized; 'total' is the peak."""
    w = workload
    c, eb = tokens_per_rank, w.elem_bytes
    q = w.batch * w.heads * c * w.head_dim
    kv = 2 * w.batch * w.kv_heads * c * w.head_dim
    items = {
        "q": q * eb,
        "kv_own": kv * eb,
        "kv_buffers": 2 * kv * eb,
        "out": q * eb,
        "out_accum": q * ACCUM_BYTES,
        "softmax_stats": 2 * w.batch * w.heads * c * ACCUM_BYTES,
    }
    if w.pass_ in ("bwd", "fwdbwd"):
        items["dout"] = q * eb
        items["dq_accum"] = q * ACCUM_BYTES
        items["dkv_buffers"] = 2 * kv * ACCUM_BYTES
    items["total"] = sum(items.values())
    return items


def full_kv_bytes(workload: Workload) -> int:
    """What one device would hold if it kept the whole sequence's K and V."""
    return workload.kv_bytes(workload.seq)
