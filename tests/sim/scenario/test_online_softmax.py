"""The numpy ring merge against attention computed directly, row by row."""

import numpy as np
import pytest

from sim.errors import RingsimError
from sim.scenario.online_softmax import example, ring_attention
from tests.reference import token_owner


def _inputs(seq: int, d: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((seq, d)) * (3.0 if i == 0 else 1.0) for i in range(3)]


def _softmax_attention(q, k, v, causal):
    """Row by row in float64, written out: out_t = sum_j w_tj v_j with w = softmax."""
    seq, d = q.shape
    out = np.zeros_like(v, dtype=np.float64)
    for t in range(seq):
        keys = range(t + 1) if causal else range(seq)
        scores = np.array([q[t] @ k[j] / np.sqrt(d) for j in keys])
        w = np.exp(scores - scores.max())
        w /= w.sum()
        out[t] = sum(wj * v[j] for wj, j in zip(w, keys))
    return out


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("causal", [True, False])
def test_output_matches_direct_attention(layout, causal):
    n, seq, d = 4, 32, 8
    q, k, v = _inputs(seq, d)
    res = ring_attention(q, k, v, n_ranks=n, layout=layout, causal=causal)
    ref = _softmax_attention(q, k, v, causal)
    assert np.max(np.abs(res.output - ref)) < 1e-12
    assert res.max_abs_error < 1e-12
    assert np.max(np.abs(res.reference - ref)) < 1e-12


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("row", [0, 5, 17, 31])
def test_step_statistics_match_keys_seen_so_far(layout, row):
    n, seq, d = 4, 32, 8
    q, k, v = _inputs(seq, d, seed=2)
    res = ring_attention(q, k, v, n_ranks=n, layout=layout, causal=True, query_row=row)
    r = token_owner(layout, seq, n, row)
    assert res.query_rank == r
    assert [s.kv_rank for s in res.steps] == [(r - j) % n for j in range(n)]
    scores = np.array([q[row] @ k[j] / np.sqrt(d) for j in range(seq)])
    m_prev = -np.inf
    for st in res.steps:
        owners_seen = {(r - j) % n for j in range(st.step + 1)}
        keys = [j for j in range(row + 1) if token_owner(layout, seq, n, j) in owners_seen]
        m = scores[keys].max()
        assert st.m == pytest.approx(m, abs=1e-12)
        assert st.l == pytest.approx(np.exp(scores[keys] - m).sum(), rel=1e-12)
        expected_rescale = 0.0 if m_prev == -np.inf else np.exp(m_prev - m)
        assert st.rescale == pytest.approx(expected_rescale, abs=1e-12)
        block_keys = [j for j in range(row + 1) if token_owner(layout, seq, n, j) == st.kv_rank]
        assert st.unmasked_keys == len(block_keys)
        m_prev = m


def test_fully_masked_blocks_leave_the_row_unchanged():
    # contiguous, causal: rank 0's queries see no key of any other rank
    n, seq, d = 4, 16, 4
    q, k, v = _inputs(seq, d, seed=3)
    with np.errstate(all="raise"):
        res = ring_attention(q, k, v, n_ranks=n, layout="contiguous", causal=True, query_row=2)
    first = res.steps[0]
    for st in res.steps[1:]:
        assert st.unmasked_keys == 0
        assert st.block_max == -np.inf
        assert (st.m, st.l, st.rescale) == (first.m, first.l, 1.0)
    assert np.isfinite(res.output).all()


def test_float32_inputs_stay_close_to_float64_reference():
    res = example(n_ranks=8, layout="zigzag", causal=True, dtype=np.float32)
    assert res.output.dtype == np.float32
    assert res.max_abs_error < 1e-5


def test_bad_row_and_layout_are_user_errors():
    q, k, v = _inputs(16, 4)
    with pytest.raises(RingsimError):
        ring_attention(q, k, v, n_ranks=4, layout="contiguous", causal=True, query_row=16)
    with pytest.raises(RingsimError):
        ring_attention(q, k, v, n_ranks=3, layout="zigzag", causal=True)
