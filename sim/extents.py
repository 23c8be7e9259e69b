"""The extent of each block's kernel call: how many of its query tokens and key tokens
take part in at least one unmasked pair.

A ring kernel computes a block on exactly those rows and columns: all of a dense or
diagonal block; for zigzag's off-diagonal blocks half the keys (the K/V rank is earlier)
or half the queries (it is later), the dense rectangles ring-flash-attention passes to
the kernel; for a striped block whose K/V rank is later, every query but the first and
every key but the last (ring-flash-attention's q[:, 1:], k[:, :-1]). The hardware model
takes its rate and its merge from this extent (sim.kernel_model). Counted in closed form
from each rank's token segments (sim.layouts), like the work.
"""

from __future__ import annotations

import numpy as np

from sim.layouts import segments


def block_extents(layout: str, seq: int, n: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """Arrays (n, n) of int64 for every (query rank, K/V rank) block: the query tokens
    that see some key of the block, and the key tokens that some query of it sees."""
    segs = segments(layout, seq, n)
    c = seq // n
    if not causal:
        full = np.full((n, n), c, dtype=np.int64)
        return full, full.copy()
    sc = np.array([[(g.start, g.count, g.stride) for g in rank] for rank in segs], dtype=np.int64)
    start, count, stride = sc[..., 0], sc[..., 1], sc[..., 2]          # (n, m)
    first = start.min(axis=1)                                          # each rank's first token
    last = (start + (count - 1) * stride).max(axis=1)                  # and last
    # queries of rank r at or after the first key of rank s: key <= query for that key
    t = first[None, None, :]                                           # (1, 1, n_s)
    below = np.clip(-(-(t - start[:, :, None]) // stride[:, :, None]), 0, count[:, :, None])
    q_ext = (count[:, :, None] - below).sum(axis=1)                    # (n_r, n_s)
    # keys of rank s at or before the last query of rank r
    t = last[:, None, None]                                            # (n_r, 1, 1)
    upto = np.clip((t - start[None]) // stride[None] + 1, 0, count[None])  # (n_r, n_s, m)
    return q_ext.astype(np.int64), upto.sum(axis=2).astype(np.int64)
