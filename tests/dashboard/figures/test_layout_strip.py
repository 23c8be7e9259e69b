"""View 1: the layout strip against token ownership from the layout definitions."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard.figures.layout_strip import MAX_STRIP_RUNS, layout_strip
from dashboard.figures.style import rank_color
from tests.dashboard.conftest import owner


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_layout_strip_colors_follow_token_owners(layout, n):
    seq = 16 * n
    fig = layout_strip(layout, seq, n)
    bar = fig.data[0]
    base, width, colors = np.asarray(bar.base), np.asarray(bar.x), list(bar.marker.color)
    assert base[0] == 0 and (base[1:] == base[:-1] + width[:-1]).all()   # contiguous cover
    assert base[-1] + width[-1] == seq
    for b, w, c in zip(base, width, colors):
        owners = {owner(layout, seq, n, t) for t in range(int(b), int(b + w))}
        assert len(owners) == 1                     # a run belongs to one GPU
        assert c == rank_color(owners.pop(), n)
    expected_runs = {"contiguous": n, "zigzag": 2 * n - 1, "striped": seq}[layout]
    assert len(base) == expected_runs


def test_layout_strip_truncates_long_striped_sequences():
    fig = layout_strip("striped", 131072, 8)
    assert fig.layout.meta["truncated"] and fig.layout.meta["runs"] == MAX_STRIP_RUNS
    assert fig.layout.meta["tokens_shown"] == MAX_STRIP_RUNS
    assert "pattern repeats" in fig.layout.title.text


@pytest.mark.parametrize("layout", ["zigzag", "contiguous", "striped"])
def test_a_truncated_strip_says_the_pattern_repeats_only_where_it_does(layout):
    """At 1,024 GPUs the strip shows half the runs: zigzag's second half mirrors its first
    and contiguous's goes on to other GPUs, so neither repeats; nor does striped's half period."""
    seq, n = 131072, 1024
    fig = layout_strip(layout, seq, n)
    shown = fig.layout.meta["tokens_shown"]
    holders = np.array([owner(layout, seq, n, t) for t in range(seq)])
    repeats = seq % shown == 0 and bool(np.all(holders.reshape(-1, shown) == holders[:shown]))
    assert fig.layout.meta["truncated"] and not repeats
    assert "pattern repeats" not in fig.layout.title.text
    assert f"(first {shown:,} tokens of 131,072)" in fig.layout.title.text


def test_a_truncated_strip_of_holders_repeats_where_its_owners_do():
    """Holders given token by token (a hybrid's positions): repeating only where the whole
    array repeats with the period shown."""
    pairs = np.tile(np.repeat(np.arange(600), 2), 100)     # a period of 1,200 tokens, 512 runs shown
    assert "pattern repeats" not in layout_strip("x", len(pairs), 600, owner=pairs).layout.title.text
    striped = np.tile(np.arange(256), 512)                  # 512 runs shown: two whole periods
    fig = layout_strip("x", len(striped), 256, owner=striped)
    assert fig.layout.meta["tokens_shown"] == 512 and "pattern repeats" in fig.layout.title.text
    striped[-1] = 0                                         # the last period differs
    assert "pattern repeats" not in layout_strip("x", len(striped), 256, owner=striped).layout.title.text


def test_token_split_of_each_scheme():
    from dashboard import compute
    from tests.dashboard.conftest import small_scenario

    ag = compute.token_split(small_scenario(scheme="allgather", n_gpus=4))
    assert (ag["layout"], ag["n"], ag["holders"]) == ("zigzag", 4, None)
    uly = compute.token_split(small_scenario(scheme="ulysses", n_gpus=4))
    assert (uly["layout"], uly["n"]) == ("contiguous", 4)
    hy = compute.token_split(small_scenario(scheme="hybrid", n_gpus=8, ulysses_degree=2, ring_degree=4,
                                            layout="striped", placement="ring-inner"))
    assert (hy["layout"], hy["n"]) == ("striped", 4)
    # ring-inner: rank = j * r + k, so ring position 1 is GPUs 1 and 5
    assert hy["holders"][1] == "ring position 1: GPUs 1, 5"
    fig = layout_strip(hy["layout"], 8192, hy["n"], holders=hy["holders"], title=hy["title"])
    assert "ring position 1: GPUs 1, 5" in set(fig.data[0].hovertext)
    assert "4 ring positions of 2 GPUs" in fig.layout.title.text


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
def test_a_billion_tokens_draw_from_the_layouts_segments(layout):
    # the runs come from the segments: a billion tokens cost no array of a billion owners
    seq, n = 1_000_000_000, 8
    fig = layout_strip(layout, seq, n)
    base, width = np.asarray(fig.data[0].base), np.asarray(fig.data[0].x)
    expected = {"contiguous": n, "zigzag": 2 * n - 1, "striped": MAX_STRIP_RUNS}[layout]
    assert len(base) == expected
    shard = seq // n if layout == "contiguous" else seq // (2 * n) if layout == "zigzag" else 1
    assert width[0] == shard and base[0] == 0
    for b in base[:4].tolist():
        assert fig.data[0].customdata[list(base).index(b)][2] == owner(layout, seq, n, int(b))


def test_past_distinct_hues_a_colour_bar_says_which_gpu_is_which():
    """Past 24 GPUs the holders' colours run along a scale, named by a colour bar from GPU 0 to
    the last; up to 24 each GPU has its hue and its number on the bar, no colour bar."""
    from dashboard.figures.style import RANK_SCALE, rank_colors
    few = layout_strip("zigzag", 16 * 16, 16)
    assert not any(getattr(t.marker, "showscale", False) for t in few.data)
    fig = layout_strip("zigzag", 64 * 64, 64)
    (bar,) = [t for t in fig.data if t.type == "scatter"]
    assert bar.marker.showscale and (bar.marker.cmin, bar.marker.cmax) == (0, 63)
    assert bar.marker.colorbar.title.text == "GPU"
    assert bar.hoverinfo == "skip" and bar.marker.opacity == 0
    from plotly.colors import sample_colorscale
    assert rank_colors(64)[0] == sample_colorscale(RANK_SCALE, [0.0])[0]
    assert rank_colors(64)[63] == sample_colorscale(RANK_SCALE, [1.0])[0]


def test_a_long_title_goes_on_two_lines_and_the_strip_makes_room():
    from dashboard.figures.style import TITLE_CHARS
    short = layout_strip("zigzag", 4096, 4)
    assert "<br>" not in short.layout.title.text
    long = layout_strip("zigzag", 4096, 4, title="Which tokens each ring position holds, " * 4)
    lines = long.layout.title.text.split("<br>")
    assert len(lines) >= 2 and all(len(x) <= TITLE_CHARS for x in lines)
    # the page holds the strip at its height: the title's room comes from the bars'
    assert long.layout.height == short.layout.height and long.layout.margin.t > short.layout.margin.t
