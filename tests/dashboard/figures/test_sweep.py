"""View 5: when transfers hide, against the design's crossover condition."""

from __future__ import annotations

import pytest

from dashboard import compute
from dashboard.figures.sweep import overlap_sweep
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
    assert any(s.x0 == pytest.approx(sweep["crossover_tokens"]) for s in vlines)
    assert any(s.x0 == pytest.approx(sweep["crossover_bandwidth_gbps"]) for s in vlines)


@pytest.mark.parametrize("layout, per_rank", [("contiguous", 1), ("striped", 1), ("zigzag", 2)])
def test_sweep_tokens_divide_into_the_layouts_chunks(layout, per_rank):
    sweep = compute.overlap_sweep(small_scenario(n_gpus=2, seq=4096 * 2, layout=layout))
    tokens = [r["tokens"] for r in sweep["by_tokens"]]
    assert 4096 in tokens and all(c % per_rank == 0 for c in tokens)
