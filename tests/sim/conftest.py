import numpy as np

from sim.layouts import rank_tokens


def brute_pairs(layout: str, seq: int, n: int, causal: bool) -> np.ndarray:
    """Unmasked pairs of every (query rank, K/V rank) block, by enumerating tokens."""
    toks = rank_tokens(layout, seq, n)
    out = np.zeros((n, n), dtype=np.int64)
    for r in range(n):
        for s in range(n):
            if causal:
                out[r, s] = int((toks[s][None, :] <= toks[r][:, None]).sum())
            else:
                out[r, s] = toks[r].size * toks[s].size
    return out
