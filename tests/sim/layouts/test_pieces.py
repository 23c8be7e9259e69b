"""The kernel's plan for a causal block (each layout module's `pieces`, through
sim.layouts.block_pieces): the pieces cover exactly the unmasked pairs, from the token
map of docs/design.md (tests.reference)."""

import numpy as np
import pytest

from sim.layouts import block_pieces
from tests.reference import token_owner
from tests.sim.conftest import brute_pairs


def token_table(layout, seq, n):
    owner = np.array([token_owner(layout, seq, n, t) for t in range(seq)])
    return np.stack([np.flatnonzero(owner == r) for r in range(n)])


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("causal", [True, False])
def test_pieces_cover_exactly_the_unmasked_pairs(layout, n, causal):
    chunk = 3 if layout != "zigzag" else 2
    for per_chunk in (1, chunk):
        seq = (2 * n if layout == "zigzag" else n) * per_chunk
        c = seq // n
        toks = token_table(layout, seq, n)
        for r in range(n):
            for s in range(n):
                visible = np.zeros((c, c), dtype=np.int64)
                for p in block_pieces(layout, r, s, n, c, causal):
                    qi = np.arange(c)[p.q]
                    ki = np.arange(c)[p.kv]
                    sub = np.ones((len(qi), len(ki)), dtype=np.int64)
                    if p.causal:
                        assert len(qi) == len(ki), "a causal piece must be square"
                        sub = np.tril(sub)
                    visible[np.ix_(qi, ki)] += sub
                want = (toks[s][None, :] <= toks[r][:, None]) if causal else np.ones((c, c), bool)
                assert (visible == want.astype(np.int64)).all(), (r, s)
        assert (np.array([[sum(p.pairs(c) for p in block_pieces(layout, r, s, n, c, causal))
                           for s in range(n)] for r in range(n)])
                == brute_pairs(layout, seq, n, causal)).all()


def test_contiguous_causal_skips_blocks_of_later_ranks():
    assert block_pieces("contiguous", 0, 1, 2, 8, True) == ()
    assert block_pieces("contiguous", 1, 0, 2, 8, True) != ()
