"""A numpy reference of the ring merge: why Ring Attention is exact (docs/design.md, facts 3 and 7).

Each rank keeps its query shard and, at ring step k, attends to the K/V block of rank
(r - k) mod N (the schedule of sim/ring.py). Partial results merge by online softmax:
per query row a running maximum m, a normalizer l and an unnormalized output acc; a
block with scores s updates m' = max(m, rowmax(s)), p = exp(s - m'),
l' = l·exp(m - m') + rowsum(p), acc' = acc·exp(m - m') + p·V, and the output is acc / l.

A block whose every key is masked for a row leaves that row's state unchanged (rescale
factor 1); a row that has seen no key yet has m = -inf, and its first rescale factor is
0 (there is nothing to rescale). Neither case evaluates exp(-inf - -inf), so no NaN.

Small sizes only: this materializes every block's score matrix. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.errors import RingsimError
from sim.layouts import rank_tokens


@dataclass(frozen=True)
class MergeStep:
    """The state of one query row after one ring step."""

    step: int
    kv_rank: int
    """Owner of the K/V block merged at this step."""
    unmasked_keys: int
    """Keys of the block this row attends to (0: the block is skipped for this row)."""
    block_max: float
    """Row maximum of the block's scores (-inf when every key is masked)."""
    m: float
    """Running maximum after the step."""
    l: float
    """Normalizer after the step, relative to m."""
    rescale: float
    """exp(m_old - m_new): what the earlier sum and accumulator were multiplied by."""


@dataclass(frozen=True)
class RingMerge:
    """The result of a ring attention run on small inputs."""

    query_row: int
    """Global token id of the row whose steps are recorded."""
    query_rank: int
    steps: list[MergeStep]
    output: np.ndarray
    """(seq, head_dim): the ring's attention output, rows in global token order."""
    reference: np.ndarray
    """(seq, head_dim): direct softmax attention over the full sequence."""

    @property
    def max_abs_error(self) -> float:
        return float(np.max(np.abs(self.output - self.reference)))


def direct_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v over the whole sequence in one piece."""
    s = (q @ k.T) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p @ v) / p.sum(axis=1, keepdims=True)


def ring_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, n_ranks: int, layout: str,
                   causal: bool, query_row: int = -1) -> RingMerge:
    """Run ring attention of (seq, d) q, k, v over `n_ranks` ranks and record one row.

    `query_row` is a global token id (negative counts from the end).
    """
    if q.ndim != 2 or k.shape != q.shape or v.shape[0] != q.shape[0]:
        raise RingsimError("q, k and v must be (seq, head_dim) arrays of one sequence length")
    seq, d = q.shape
    if query_row < 0:
        query_row += seq
    if not 0 <= query_row < seq:
        raise RingsimError(f"query row must be a token in [0, {seq}), got {query_row}")
    toks = rank_tokens(layout, seq, n_ranks)          # (N, c), validates the layout
    scale = 1.0 / np.sqrt(d)
    dtype = np.result_type(q.dtype, np.float32)
    out = np.empty((seq, v.shape[1]), dtype=dtype)
    q_rank = int(np.nonzero((toks == query_row).any(axis=1))[0][0])
    row_in_rank = int(np.nonzero(toks[q_rank] == query_row)[0][0])
    steps: list[MergeStep] = []
    for r in range(n_ranks):
        q_ids = toks[r]
        qr = q[q_ids]
        c = q_ids.size
        m = np.full(c, -np.inf, dtype=dtype)
        l = np.zeros(c, dtype=dtype)
        acc = np.zeros((c, v.shape[1]), dtype=dtype)
        for step in range(n_ranks):
            owner = (r - step) % n_ranks
            k_ids = toks[owner]
            s = (qr @ k[k_ids].T) * scale
            allowed = (k_ids[None, :] <= q_ids[:, None]) if causal else np.ones(s.shape, dtype=bool)
            s = np.where(allowed, s, -np.inf)
            block_max = s.max(axis=1)
            m_new = np.maximum(m, block_max)
            seen = np.isfinite(m_new)                      # the row has met at least one key
            # exp(m - m_new): 0 for a row's first keys (m = -inf), 1 while nothing is seen
            rescale = np.where(seen, np.exp(np.where(seen, m - m_new, 0.0)), 1.0)
            p = np.where(allowed, np.exp(s - np.where(seen, m_new, 0.0)[:, None]), 0.0)
            l = l * rescale + p.sum(axis=1)
            acc = acc * rescale[:, None] + p @ v[k_ids]
            m = m_new
            if r == q_rank:
                i = row_in_rank
                steps.append(MergeStep(step, owner, int(allowed[i].sum()), float(block_max[i]),
                                       float(m[i]), float(l[i]), float(rescale[i])))
        with np.errstate(invalid="ignore", divide="ignore"):
            # a row with no key at all (impossible under a causal mask) has output 0
            out[q_ids] = np.where(l[:, None] > 0, acc / np.where(l > 0, l, 1.0)[:, None], 0.0)
    return RingMerge(query_row, q_rank, steps, out, direct_attention(q, k, v, causal))


def example(*, n_ranks: int, layout: str, causal: bool, tokens_per_chunk: int = 4,
            head_dim: int = 16, query_row: int = -1, seed: int = 0,
            dtype: type = np.float64) -> RingMerge:
    """Ring attention on random inputs just large enough for `layout` on `n_ranks`."""
    chunks = 2 * n_ranks if layout == "zigzag" else n_ranks
    seq = chunks * tokens_per_chunk
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((seq, head_dim)).astype(dtype) for _ in range(3))
    # spread the scores so that the running maximum visibly moves
    q *= 2.0
    return ring_attention(q, k, v, n_ranks=n_ranks, layout=layout, causal=causal,
                          query_row=query_row)
