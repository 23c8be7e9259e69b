import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import RingsimError
from sim.layouts import block_work, chunks_of_rank, rank_of_token, rank_tokens, tile_work
from tests.sim.conftest import brute_pairs

LAYOUTS = ["contiguous", "striped", "zigzag"]


def test_token_maps_match_the_definitions():
    seq, n = 24, 3
    owner = rank_of_token("contiguous", seq, n)
    assert owner.tolist() == [t // 8 for t in range(seq)]
    assert rank_of_token("striped", seq, n).tolist() == [t % 3 for t in range(seq)]
    # zigzag: 6 chunks of 4; rank r holds chunks r and 5 - r
    zig = rank_of_token("zigzag", seq, n).tolist()
    assert zig == [min(t // 4, 5 - t // 4) for t in range(seq)]
    assert chunks_of_rank("zigzag", 3) == [(0, 5), (1, 4), (2, 3)]


@settings(max_examples=60, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), n=st.integers(1, 6), per=st.integers(1, 6),
       causal=st.booleans())
def test_exact_work_equals_enumerated_pairs(layout, n, per, causal):
    seq = per * (2 * n if layout == "zigzag" else n)
    assert (block_work(layout, seq, n, causal) == brute_pairs(layout, seq, n, causal)).all()


@settings(max_examples=40, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), n=st.integers(1, 4), per=st.integers(1, 5),
       tile=st.integers(1, 7))
def test_tile_work_counts_whole_tiles_with_any_unmasked_pair(layout, n, per, tile):
    seq = per * (2 * n if layout == "zigzag" else n)
    toks = rank_tokens(layout, seq, n)
    c = seq // n
    expect = np.zeros((n, n), dtype=np.int64)
    for r in range(n):
        for s in range(n):
            mask = toks[s][None, :] <= toks[r][:, None]
            for i in range(0, c, tile):
                for j in range(0, c, tile):
                    sub = mask[i:i + tile, j:j + tile]
                    if sub.any():
                        expect[r, s] += sub.size
    got = tile_work(layout, seq, n, True, tile)
    assert (got == expect).all()
    assert (got >= block_work(layout, seq, n, True)).all()


def test_causal_total_is_the_triangle_for_every_layout():
    seq, n = 4096, 8
    for layout in LAYOUTS:
        assert block_work(layout, seq, n, True).sum() == seq * (seq + 1) // 2


@pytest.mark.parametrize("layout,seq,n", [("zigzag", 24, 8), ("contiguous", 10, 3), ("striped", 0, 2)])
def test_sizes_that_do_not_divide_are_refused(layout, seq, n):
    with pytest.raises(RingsimError):
        block_work(layout, seq, n, True)


@settings(max_examples=40, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), n=st.integers(1, 5), per=st.integers(1, 4))
def test_block_masks_from_the_token_mask(layout, n, per):
    from sim.layouts import block_masks, segments
    seq = per * (2 * n if layout == "zigzag" else n)
    toks = rank_tokens(layout, seq, n)
    kinds = block_masks(layout, seq, n, True)
    segs = segments(layout, seq, n)
    for r in range(n):
        for s in range(n):
            mask = toks[s][None, :] <= toks[r][:, None]
            if not mask.any():
                assert kinds[r, s] == "empty"
                continue
            # dense iff every (query segment, key segment) sub-block is all or nothing
            qi = np.cumsum([0] + [g.count for g in segs[r]])
            ki = np.cumsum([0] + [g.count for g in segs[s]])
            dense = all(mask[qi[a]:qi[a + 1], ki[b]:ki[b + 1]].all()
                        or not mask[qi[a]:qi[a + 1], ki[b]:ki[b + 1]].any()
                        for a in range(len(qi) - 1) for b in range(len(ki) - 1))
            assert kinds[r, s] == ("full" if dense else "diagonal")
    assert (block_masks(layout, seq, n, False) == "full").all()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("entries", [1, 12, 1 << 16])
def test_block_tables_built_a_few_query_ranks_at_a_time_match_the_token_enumeration(monkeypatch, layout, entries):
    """block_work_and_masks and block_extents build their (rank, rank) tables a few query
    ranks at a time (one, a few, all): the same as enumerating the tokens."""
    from functools import partial

    from sim import layouts
    from sim.layouts import MASK_NAMES, block_extents, block_work_and_masks
    from tests.sim import reference

    monkeypatch.setattr(layouts, "_row_blocks", partial(layouts._row_blocks, entries=entries))
    n, seq = 5, 5 * 12
    work, masks = block_work_and_masks(layout, seq, n, True)
    assert work.tolist() == reference.block_work(layout, seq, n, True).tolist()
    assert [[MASK_NAMES[m] for m in row] for row in masks.tolist()] == reference.block_masks(layout, seq, n, True).tolist()
    q_ext, kv_ext = block_extents(layout, seq, n, True)
    assert [list(zip(q, kv)) for q, kv in zip(q_ext.tolist(), kv_ext.tolist())] == \
        reference.block_extents(layout, seq, n, True)
