"""sim.engine.pull: NCCL's pull played by stretching computes on the wave player, against
the event loop that re-times every compute at each transfer's start and end (exact)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine.play import simulate
from sim.hardware.cluster import Hardware
from sim.scenario.config import Scenario, Workload
from sim.schemes import names
from sim.trace.format import COMPUTE, SEND, WAIT
from sim.trace.metrics import compute_metrics

CASES = [
    dict(n_gpus=8, layout="zigzag", pass_="fwd", scheme=None),
    dict(n_gpus=8, layout="contiguous", pass_="fwdbwd", scheme=None),
    dict(n_gpus=16, layout="striped", pass_="bwd", scheme=None),
    *[dict(n_gpus=8, layout="zigzag", pass_="fwdbwd", scheme=s) for s in names() if s != "ring"],
]


def _scenario(n_gpus, layout, pass_, scheme):
    w = Workload(seq=n_gpus * 8192, heads=32, kv_heads=8, head_dim=128, causal=True, pass_=pass_)
    kw = {} if scheme is None else {"scheme": scheme}
    return Scenario(workload=w, hardware=Hardware(), n_gpus=n_gpus, layout=layout, **kw)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_stretched_computes_end_where_the_event_loop_ends_them(case):
    sc = _scenario(**case)
    exact = simulate(sc, player="simpy")
    stretched = simulate(sc)
    assert exact.meta["player"] == "simpy" and stretched.meta["player"] == "pull"
    a, b = exact.columns, stretched.columns
    ops_a, ops_b = a.stream != WAIT, b.stream != WAIT     # the two record waits their own way
    assert ops_a.sum() == ops_b.sum()
    for col in ("rank", "stream", "kind", "step"):
        assert np.array_equal(getattr(a, col)[ops_a], getattr(b, col)[ops_b])
    span = compute_metrics(exact).makespan_s
    # the integrand's linearisation in the memory-bound share is below the product of two
    # shares of a few per cent, over a small part of a compute: within 1e-5 of the run
    assert np.abs(a.end_s[ops_a] - b.end_s[ops_b]).max() <= 1e-5 * span
    assert np.abs(a.start_s[ops_a] - b.start_s[ops_b]).max() <= 1e-5 * span
    assert compute_metrics(stretched).makespan_s == pytest.approx(span, rel=1e-5)


def test_one_compute_beside_one_transfer_ends_where_the_event_loop_ends_it():
    # two GPUs, one K/V hop overlapping the first block: the block's time alone w, the hop's
    # d inside it at rate r: the event loop ends it at w + d (1 - r) (its closed form is
    # tests/sim/hardware/test_nccl.py's); the stretch at w + d ((1 - m) sm + m hbm)
    sc = Scenario(workload=Workload(seq=2 * 8192, heads=32, kv_heads=8, head_dim=128, causal=False, pass_="fwd"),
                  hardware=Hardware(), n_gpus=2, layout="contiguous")
    exact, stretched = simulate(sc, player="simpy"), simulate(sc)
    for t in (exact, stretched):
        c = t.columns
        first = (c.stream == COMPUTE) & (c.rank == 0) & (c.step == 0)
        hop = (c.stream == SEND) & (c.rank == 0) & (c.step == 0)
        assert first.sum() == 1 and hop.sum() == 1
    ends = []
    for t in (exact, stretched):
        c = t.columns
        first = (c.stream == COMPUTE) & (c.rank == 0) & (c.step == 0)
        ends.append(c.end_s[first][0])
    # the two differ only by the linearised integrand: d x m (1 - m) x (products of the two
    # shares), a few parts in ten million of a block beside one hop
    assert ends[1] == pytest.approx(ends[0], rel=1e-6)


@pytest.mark.parametrize("pieces", [2, 5, 16, 40])
def test_ranges_of_gpus_found_apart_give_the_times_of_one_range(monkeypatch, pieces):
    # a large schedule's stretches are found in ranges of GPUs on threads (PIECES); each
    # range's running sums start at its first GPU: the same times to rounding, and the
    # event loop's times as closely as one range's (the waits aside: rounding may split
    # one where two ends meet)
    import sim.engine.pull as pull
    import sim.engine.threads as threads

    sc = _scenario(n_gpus=16, layout="contiguous", pass_="fwdbwd", scheme=None)
    whole = simulate(sc).columns
    monkeypatch.setattr(pull, "PIECES", pieces)
    monkeypatch.setattr(threads, "WORTH_THREADS", 0)      # in ranges, on threads, even at this size
    apart = simulate(sc)
    exact = simulate(sc, player="simpy").columns
    span = whole.end_s.max()
    a, w, e = apart.columns, whole, exact
    ops_a, ops_w, ops_e = a.stream != WAIT, w.stream != WAIT, e.stream != WAIT
    assert np.array_equal(a.kind[ops_a], w.kind[ops_w]) and np.array_equal(a.rank[ops_a], w.rank[ops_w])
    assert np.abs(a.end_s[ops_a] - w.end_s[ops_w]).max() <= 1e-12 * span
    assert np.abs(a.start_s[ops_a] - w.start_s[ops_w]).max() <= 1e-12 * span
    assert np.abs(a.end_s[ops_a] - e.end_s[ops_e]).max() <= 1e-5 * span


@pytest.mark.parametrize("n_gpus,pieces", [(1, 4), (5, 2), (16, 3), (16, 16), (4, 9)])
def test_ranges_cover_every_gpu_once_in_order(n_gpus, pieces):
    from sim.engine.pull import _ranges

    r = _ranges(n_gpus, pieces)
    assert r[0][0] == 0 and r[-1][1] == n_gpus and len(r) == min(pieces, n_gpus)
    assert all(lo < hi for lo, hi in r) and all(a[1] == b[0] for a, b in zip(r, r[1:]))
