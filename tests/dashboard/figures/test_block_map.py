"""View 3: the block map against chunk ownership and causal pairs enumerated token by
token."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard.figures.block_map import MAX_MAP_CHUNKS, block_map
from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.trace.format import Span, Trace
from tests.dashboard.conftest import chunk_tokens, owner, small_scenario


def _cells(fig) -> tuple[np.ndarray, np.ndarray]:
    """The heatmap's values and its per-cell hover data (query GPU, K/V GPU, pairs, %)."""
    heat = fig.data[0]
    return np.asarray(heat.z, dtype=float), np.asarray(heat.customdata, dtype=float)


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("causal", [True, False])
def test_chunk_pair_work_matches_enumeration(layout, causal):
    n, seq = 4, 64
    _, custom = _cells(block_map(simulate(small_scenario(layout=layout, n_gpus=n, seq=seq,
                                                                 causal=causal))))
    work = custom[..., 2]
    chunks = 2 * n if layout == "zigzag" else n
    assert work.shape == (chunks, chunks)
    for i in range(chunks):
        qi = chunk_tokens(layout, seq, n, i)
        for j in range(chunks):
            kj = chunk_tokens(layout, seq, n, j)
            brute = int((kj[None, :] <= qi[:, None]).sum()) if causal else qi.size * kj.size
            assert work[i, j] == brute
            assert custom[i, j, 3] == pytest.approx(100 * brute / (qi.size * kj.size))
            # the GPUs holding the query chunk and the key chunk
            assert (custom[i, j, 0], custom[i, j, 1]) == (owner(layout, seq, n, int(qi[0])),
                                                          owner(layout, seq, n, int(kj[0])))


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
def test_block_map_steps_and_blanks(layout, pass_):
    n, seq = 4, 256
    trace = simulate(small_scenario(layout=layout, n_gpus=n, seq=seq, pass_=pass_))
    fig = block_map(trace)
    grid, _ = _cells(fig)
    chunks = 2 * n if layout == "zigzag" else n
    assert grid.shape == (chunks, chunks)
    for i in range(chunks):
        qi = chunk_tokens(layout, seq, n, i)
        for j in range(chunks):
            kj = chunk_tokens(layout, seq, n, j)
            if not (kj[None, :] <= qi[:, None]).any():
                assert np.isnan(grid[i, j])          # fully masked: blank
            else:
                # rank r computes the K/V block of rank (r - k) mod n at step k
                r, s = owner(layout, seq, n, int(qi[0])), owner(layout, seq, n, int(kj[0]))
                assert grid[i, j] == (r - s) % n
    assert "ring step" in fig.layout.annotations[0].text      # what a cell is, from the scheme
    assert list(fig.data[0].colorbar.tickvals) == list(range(n))


def test_block_map_work_bars_are_each_gpus_flops():
    n, seq = 4, 256
    sc = small_scenario(layout="contiguous", n_gpus=n, seq=seq)
    fig = block_map(simulate(sc))
    bars = [t for t in fig.data if t.type == "bar"][0]
    w = sc.workload
    for r in range(n):
        pairs = (r * (seq // n)) * (seq // n) + (seq // n) * (seq // n + 1) // 2   # causal, contiguous
        assert bars.y[r] * 1e12 == pytest.approx(4 * w.head_dim * w.heads * w.batch * pairs)
    assert fig.layout.meta["imbalance"] == pytest.approx(max(bars.y) / np.mean(bars.y))


def test_block_map_needs_a_configuration():
    bare = Trace("measured", 2, [Span(0, "compute", "fwd", 0, 0.0, 1.0)])
    with pytest.raises(RingsimError, match="no layout"):
        block_map(bare)


def test_a_large_block_map_shows_every_kth_chunk():
    n = 320                                           # zigzag: 640 chunks a side
    sc = small_scenario(layout="zigzag", n_gpus=n, seq=640 * 8, causal=False)
    fig = block_map(simulate(sc, player="recurrence"))
    heat = fig.data[0]
    stride = fig.layout.meta["stride"]
    assert stride == -(-2 * n // MAX_MAP_CHUNKS) > 1 and fig.layout.meta["chunks"] == 2 * n
    shown = list(range(0, 2 * n, stride))
    assert np.asarray(heat.z).shape == (len(shown), len(shown)) and list(heat.x) == shown
    assert heat.customdata is None                    # no per-cell hover at this size
    # no mask: query rank r sees the block of K/V rank s at step (r - s) mod n
    grid = np.asarray(heat.z, dtype=float)
    ids = np.asarray(heat.x)
    r = np.array([owner("zigzag", 640 * 8, n, int(c) * 8) for c in ids])
    assert (grid == (r[:, None] - r[None, :]) % n).all()


def test_past_max_work_bars_the_work_is_one_step_per_gpu(monkeypatch):
    # the same numbers as the bars, drawn as a single path: GPU r's step spans [r - 0.5, r + 0.5]
    from dashboard.figures import block_map as bm_module

    n = 16
    sc = small_scenario(layout="contiguous", n_gpus=n, seq=16 * n)
    trace = simulate(sc)
    bars = [t for t in block_map(trace).data if t.type == "bar"][0]
    monkeypatch.setattr(bm_module, "MAX_WORK_BARS", n - 1)
    fig = block_map(trace)
    assert not [t for t in fig.data if t.type == "bar"]
    steps = [t for t in fig.data if t.type == "scatter" and t.line.shape == "hv"][0]
    assert list(steps.x) == [r - 0.5 for r in range(n + 1)]
    assert list(steps.y[:n]) == list(bars.y) and steps.y[n] == bars.y[-1]
    assert list(steps.customdata) == [*range(n), n - 1]                 # the GPU each point names
    assert fig.layout.meta["imbalance"] == pytest.approx(max(bars.y) / np.mean(bars.y))
