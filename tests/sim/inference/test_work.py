"""Who holds which tokens in a prefill over a cached prefix, the work each block does, the
bytes each ring moves and the paper's rule, against token-by-token counts in numpy."""

import itertools

import numpy as np
import pytest

from sim.errors import RingsimError
from sim.inference import work
from sim.layouts import NAMES as LAYOUTS


def brute_block_pairs(cached, new, n, layout, cache_layout):
    """(query rank, K/V rank) pairs with key <= query, enumerating every position."""
    queries = work.new_tokens(cached, new, n, layout)
    keys = [np.concatenate([c, q]) for c, q in zip(work.cache_tokens(cached, n, cache_layout), queries)]
    return np.array([[int((keys[s][None, :] <= queries[r][:, None]).sum()) for s in range(n)] for r in range(n)])


CASES = [(0, 16, 2), (24, 8, 2), (37, 24, 3), (100, 12, 3), (5, 32, 4), (64, 64, 4), (13, 40, 5)]


@pytest.mark.parametrize("cached,new,n", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cache_layout", work.CACHE_LAYOUTS)
def test_block_pairs_count_every_visible_key(cached, new, n, layout, cache_layout):
    new = work.padded_new(new, n, layout)
    got = work.block_pairs(cached, new, n, layout, cache_layout)
    assert np.array_equal(got, brute_block_pairs(cached, new, n, layout, cache_layout))
    # every new query sees the whole prefix and the new tokens at or before it
    assert got.sum() == new * cached + new * (new + 1) // 2


@pytest.mark.parametrize("cached,n", [(0, 3), (7, 3), (100, 4), (129, 8), (5, 8)])
@pytest.mark.parametrize("cache_layout", work.CACHE_LAYOUTS)
def test_the_cache_is_cut_into_every_position_once(cached, n, cache_layout):
    held = work.cache_tokens(cached, n, cache_layout)
    assert np.array_equal(np.sort(np.concatenate(held)), np.arange(cached))
    assert [len(h) for h in held] == work.cached_counts(cached, n, cache_layout).tolist()
    assert max(len(h) for h in held) - min(len(h) for h in held) <= 2


@pytest.mark.parametrize("layout", ["zigzag", "striped"])
def test_load_balanced_new_tokens_even_the_work_out(layout):
    # with the cache cut evenly, every rank's row and column carry the same pairs
    for scheme in ("pass-kv", "pass-q"):
        pairs = work.rank_pairs(4096, 1024, 8, layout, "zigzag", scheme)
        brute = brute_block_pairs(4096, 1024, 8, layout, "zigzag")
        want = brute.sum(axis=0) if scheme == "pass-q" else brute.sum(axis=1)
        assert np.array_equal(pairs, want)
        if layout == "zigzag":
            assert pairs.max() == pairs.min()
    contiguous = work.rank_pairs(4096, 1024, 8, "contiguous", "zigzag", "pass-kv")
    # contiguous new tokens: the last rank's queries see the most new keys
    assert contiguous.argmax() == 7 and contiguous[7] - contiguous[0] == 128 * 128 * 7


def test_bytes_of_a_hop_follow_the_heads_ratio():
    heads, kv_heads, d, n = 64, 8, 128, 8
    for cached, new in itertools.product([0, 1024, 65536], [512, 8192]):
        q = work.q_hop_bytes(new // n, heads, d, 2)
        kv = int(work.kv_hop_bytes((cached + new) // n, kv_heads, d, 2))
        assert q == new // n * heads * d * 2
        assert kv == 2 * (cached + new) // n * kv_heads * d * 2
        assert q / kv == pytest.approx(heads * new / (2 * kv_heads * (cached + new)))
        # the rule takes pass-KV exactly where its hop is the smaller
        assert (work.rule_scheme(cached, new, heads, kv_heads) == "pass-kv") == (q >= kv)


def test_the_rule_at_its_threshold():
    assert work.rule_threshold(128, 8) == 0.125
    assert work.rule_scheme(7 * 1024, 1024, 128, 8) == "pass-kv"       # T / (T + P) = 1/8: pass-KV
    assert work.rule_scheme(7 * 1024 + 1, 1024, 128, 8) == "pass-q"
    # without GQA the queries are half of K and V: pass-Q whatever the share of new tokens
    assert work.rule_scheme(0, 1024, 64, 64) == "pass-q"
    assert work.rule_scheme(0, 1024, 64, 32) == "pass-kv"          # threshold 1: a full prefill reaches it


def test_partial_bytes_are_output_and_fp32_lse():
    assert work.partial_bytes(100, 16, 128, 2, batch=3) == 3 * 100 * 16 * (128 * 2 + 4)


def test_a_bad_cache_layout_is_one_line():
    with pytest.raises(RingsimError, match="cache layout"):
        work.cache_tokens(10, 2, "diagonal")
