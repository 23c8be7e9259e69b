"""View 5: when transfers hide, against the design's crossover condition."""

from __future__ import annotations

import math

import pytest

from dashboard import compute
from dashboard.figures.sweep import overlap_sweep
from dashboard.i18n import Translator
from dashboard.state import defaults, scenario_from_values
from dashboard.views.sweep import sweep_labels
from tests.dashboard.conftest import small_scenario


def test_sweep_exposes_communication_on_slow_links():
    sc = small_scenario(n_gpus=4)
    sweep = compute.overlap_sweep(sc)
    bw = {r["bandwidth_gbps"]: r for r in sweep["by_bandwidth"]}
    slowest, fastest = bw[min(bw)], bw[max(bw)]
    assert slowest["exposed_frac"] > fastest["exposed_frac"]
    assert slowest["efficiency"] < fastest["efficiency"]
    fig = overlap_sweep(sweep)
    vlines = [s for s in fig.layout.shapes if s.type == "line" and s.line.dash == "dash"]
    # a dashed line at each crossover there is (the tokens' in both rows): at 4 GPUs on NVLink a
    # block's compute covers its send at every size, and a link of under 97 GB/s exposes it
    assert sweep["crossover_tokens"] is None
    assert [s.x0 for s in vlines] == [pytest.approx(sweep["crossover_bandwidth_gbps"])]


def test_a_sweep_of_a_larger_ring_says_what_it_stands_for():
    """Past SWEEP_MAX_GPUS the sweep's smaller ring stands for the scenario's, its sends costed as
    that ring's: the title says so, and its exposed communication at the scenario's own block is
    the scenario's within a few points of the makespan (29.9% at 1,024 GPUs; 0% in a ring of 16 of its own)."""
    sc = scenario_from_values(defaults() | {"gpus": 256})
    sweep = compute.overlap_sweep(sc)
    assert (sweep["n_gpus"], sweep["world"]) == (compute.SWEEP_MAX_GPUS, 256)
    assert "16 GPUs standing for a ring of 256" in overlap_sweep(sweep).layout.title.text
    now = next(r for r in sweep["by_tokens"] if r["tokens"] == sc.tokens_per_rank)
    m = compute.run(sc).metrics
    assert now["exposed_frac"] == pytest.approx(max(r.exposed_comm_s for r in m.ranks) / m.makespan_s, abs=0.05)
    assert now["exposed_frac"] > 0.1


@pytest.mark.parametrize("layout, per_rank", [("contiguous", 1), ("striped", 1), ("zigzag", 2)])
def test_sweep_tokens_divide_into_the_layouts_chunks(layout, per_rank):
    sweep = compute.overlap_sweep(small_scenario(n_gpus=2, seq=4096 * 2, layout=layout))
    tokens = [r["tokens"] for r in sweep["by_tokens"]]
    assert 4096 in tokens and all(c % per_rank == 0 for c in tokens)


def _table(*, crossover_gbps=473.0, bandwidth_now=450.0, transfer_s=None):
    """A sweep's table as compute.overlap_sweep gives it, by hand: 64 GPUs' shape (a crossover
    at 473 GB/s beside the scenario's 450 GB/s, the points up to 2,000 GB/s)."""
    tokens = [2 ** k for k in range(7, 18)]
    transfer_s = transfer_s or [4e-5 * 2 ** i for i in range(len(tokens))]
    bws = [5.0, 10.574, 22.361, 47.287, 100.0, 211.474, 447.214, 450.0, 945.742, 2000.0]
    # efficiency reaching 100% at the largest block, its exposed share 100% on the slowest link
    return {
        "n_gpus": 16, "world": 64, "layout": "zigzag", "overlap": True,
        "tokens_now": 2048, "bandwidth_now_gbps": bandwidth_now,
        "crossover_tokens": 4225.0, "crossover_bandwidth_gbps": crossover_gbps,
        "by_tokens": [{"tokens": c, "block_compute_s": 4e-5 * (c / 128) ** 2, "block_transfer_s": t,
                       "efficiency": i / (len(tokens) - 1), "exposed_frac": 1 - i / (len(tokens) - 1)}
                      for i, (c, t) in enumerate(zip(tokens, transfer_s))],
        "by_bandwidth": [{"bandwidth_gbps": b, "efficiency": i / (len(bws) - 1), "exposed_frac": 1 - i / (len(bws) - 1)}
                         for i, b in enumerate(bws)],
    }


def test_the_bandwidth_axis_ends_at_its_points():
    """The axis spans the bandwidths drawn (log10 units), not a decade's padding past them; a
    crossover past the points widens it so that its line shows."""
    table = _table()
    fig = overlap_sweep(table)
    assert list(fig.layout.xaxis2.range) == pytest.approx([math.log10(5), math.log10(2000)])
    # every marker whole at the axis's ends
    assert all(t.cliponaxis is False for t in fig.data if t.xaxis == "x2")
    fig = overlap_sweep(_table(crossover_gbps=3100.0))
    assert fig.layout.xaxis2.range[1] == pytest.approx(math.log10(3100))


def _label_height_px(annotation) -> float:
    """The height of an annotation's text box: its lines at Plotly's line height (1.3 em), and
    its border padding."""
    lines = annotation.text.count("<br>") + 1
    return lines * annotation.font.size * 1.3 + 2 * (annotation.borderpad or 1)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_the_crossovers_labels_sit_above_the_curves(lang):
    """Each crossover's label hangs from the top of its panel into a band above every point of
    its curves, taller than the label, so it covers none of them (it covered both curves
    between 450 and 2,000 GB/s at 64 GPUs)."""
    fig = overlap_sweep(_table(), labels=sweep_labels(Translator(lang)))
    labels = [a for a in fig.layout.annotations if a.yref in ("y domain", "y2 domain")]
    assert len(labels) == 2
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    for label in labels:
        axis = label.yref.split()[0]
        assert (label.y, label.yanchor) == (1, "top")
        y_axis = fig.layout["yaxis" + axis[1:]]
        px_per_unit = (y_axis.domain[1] - y_axis.domain[0]) * plot_px / (y_axis.range[1] - y_axis.range[0])
        top = max(max(t.y) for t in fig.data if t.yaxis == axis)
        assert top == pytest.approx(100)
        assert (y_axis.range[1] - top) * px_per_unit > _label_height_px(label) + 4   # a marker's radius
    # beside the crossover's line, away from the scenario's where a third of the axis is left
    # there: the tokens' to the right (2,048 < 4,225), the bandwidth's to the left (473 GB/s
    # lies in the upper quarter of 5 to 2,000)
    tokens, bandwidth = sorted(labels, key=lambda a: a.xref)
    assert (tokens.x, tokens.xanchor) == (pytest.approx(math.log10(4225)), "left")
    assert (bandwidth.x, bandwidth.xanchor) == (pytest.approx(math.log10(473)), "right")


def test_the_legend_keeps_to_the_empty_cell():
    """The legend stands in the fourth cell, which draws nothing, from its top-left corner down:
    it covers no panel (horizontal across the lower ones, it hid the last point of the block
    panel in Indonesian at 1,280 px)."""
    fig = overlap_sweep(_table(), labels=sweep_labels(Translator("id")))
    legend, x4, y4 = fig.layout.legend, fig.layout.xaxis4, fig.layout.yaxis4
    assert not any(t.xaxis == "x4" for t in fig.data) and x4.visible is False
    assert (legend.orientation, legend.xanchor, legend.yanchor) == ("v", "left", "top")
    assert legend.x == x4.domain[0] > fig.layout.xaxis3.domain[1]
    assert legend.y == y4.domain[1] < fig.layout.yaxis2.domain[0]


def test_a_flat_transfer_says_it_is_nccls_send():
    """At 8 GPUs a block's transfer takes the same time from 16k to 128k tokens per GPU though
    its bytes grow 8x (NCCL gives a larger send more channels): the figure says why, in both
    languages; where every larger block takes longer, it says nothing."""
    sweep = compute.overlap_sweep(scenario_from_values(defaults() | {"gpus": 8}))
    rows = {r["tokens"]: r["block_transfer_s"] for r in sweep["by_tokens"]}
    assert rows[2 ** 14] == pytest.approx(rows[2 ** 17])
    for lang, words in (("en", "NCCL's send time"), ("id", "waktu kirim NCCL")):
        notes = [a.text for a in overlap_sweep(sweep, labels=sweep_labels(Translator(lang))).layout.annotations
                 if words in a.text]
        assert len(notes) == 1, lang
    assert not any("NCCL" in a.text for a in overlap_sweep(_table()).layout.annotations)
