"""View 5: when transfers hide, against the design's crossover condition."""

from __future__ import annotations

import pytest

from dashboard import compute
from dashboard.figures.sweep import overlap_sweep
from dashboard.state import defaults, scenario_from_values
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
