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


def test_the_plays_stop_within_a_nanosecond_of_where_more_plays_go(monkeypatch):
    # the plays stop where the last two foretell the next move under SETTLED_S; played on
    # until a play moves nothing by more than 1e-15 s, no time is further than SETTLED_S
    # (64 GPUs: moves of 50 us, 1.4 us, 96 ns, 2.9 ns, the next foretold at 0.1 ns; at 8
    # the second play moves nothing)
    import sim.engine.pull as pull

    sc = _scenario(n_gpus=64, layout="zigzag", pass_="fwd", scheme=None)
    counted = []
    waves = pull.times_waves
    monkeypatch.setattr(pull, "times_waves", lambda *a: counted.append(1) or waves(*a))
    stopped = simulate(sc).columns
    plays = len(counted)
    counted.clear()
    monkeypatch.setattr(pull, "SETTLED_S", 1e-15)
    monkeypatch.setattr(pull, "PLAYS", 40)
    settled = simulate(sc).columns
    assert len(counted) > plays           # the foretold stop left plays out
    ops_s, ops_f = stopped.stream != WAIT, settled.stream != WAIT
    assert np.abs(stopped.end_s[ops_s] - settled.end_s[ops_f]).max() <= 1e-9
    assert np.abs(stopped.start_s[ops_s] - settled.start_s[ops_f]).max() <= 1e-9


@pytest.mark.parametrize("moves,stop", [
    ([1e-6], None),                       # one move: nothing to foretell from
    ([1e-10], 0),                         # under SETTLED_S at once
    ([1e-6, 1e-8, 1e-10], 1),             # r = 0.01: next about 1e-10
    ([8e-7, 1.2e-8], 1),                  # r = 0.015: next about 1.8e-10
    ([1e-6, 5e-7, 2.5e-7, 1.25e-7, 6.25e-8, 3.1e-8, 1.6e-8, 7.8e-9, 3.9e-9, 1.9e-9, 9.7e-10], 10),  # r = 1/2
    ([1e-8, 2e-8], None),                 # a move that grew foretells nothing
])
def test_the_plays_stop_where_the_bound_on_the_next_moves_falls_under_a_nanosecond(moves, stop):
    # a map that shrinks every change by r leaves its iterate within moved r / (1 - r) of the
    # fixed point: the geometric series of the moves to come
    from sim.engine.pull import SETTLED_S, _settled

    before, found = None, None
    for k, moved in enumerate(moves):
        if _settled(moved, before):
            found = k
            break
        before = moved
    assert found == stop
    if found is not None and found > 0:
        r = moves[found] / moves[found - 1]
        assert moves[found] < SETTLED_S or sum(moves[found] * r ** j for j in range(1, 200)) < SETTLED_S


@pytest.mark.parametrize("case,reuses", [
    (dict(n_gpus=8, layout="zigzag", pass_="fwdbwd", scheme="hybrid"), True),
    (dict(n_gpus=32, layout="zigzag", pass_="fwdbwd", scheme=None), True),
    (dict(n_gpus=8, layout="contiguous", pass_="fwdbwd", scheme=None), False),
], ids=lambda c: "-".join(str(v) for v in c.values()) if isinstance(c, dict) else str(c))
def test_a_play_that_keeps_the_last_ones_steps_gives_the_times_of_one_that_sorts_again(monkeypatch, case,
                                                                                      reuses):
    # the plays after the first reuse the last one's sort and shares where no breakpoint
    # moved past another (_in_last_order); sorting every play anew gives the same trace bit for bit
    import sim.engine.pull as pull

    sc = _scenario(**case)
    kept = []
    in_order = pull._in_last_order

    def watched(*a):
        ordered = in_order(*a)
        kept.append(ordered is not None)
        return ordered
    monkeypatch.setattr(pull, "_in_last_order", watched)
    reused = simulate(sc).columns
    assert kept and any(kept) == reuses                # a play kept the steps, or each sorted anew
    monkeypatch.setattr(pull, "_in_last_order", lambda *a: None)
    sorted_again = simulate(sc).columns
    for col in ("rank", "stream", "kind", "start_s", "end_s"):
        assert np.array_equal(getattr(reused, col), getattr(sorted_again, col))


def test_steps_are_kept_only_while_the_breakpoints_keep_their_order_and_ties():
    from sim.engine.pull import _in_last_order

    at = np.array([3.0, 1.0, 1.0, 2.0])
    order = np.argsort(at, kind="stable")                  # 1, 2, 3, 0
    last = np.array([1, 2, 3])                             # 1.0 twice, then 2.0, 3.0
    keep = (order, last)
    for moved in (at + 5.0, np.array([9.0, 1.5, 1.5, 2.0])):          # all moved alike; none passed
        assert np.array_equal(_in_last_order(moved, *keep), moved[order])
    assert _in_last_order(np.array([1.5, 1.0, 1.0, 2.0]), *keep) is None   # one passed another
    assert _in_last_order(np.array([3.0, 1.0, 1.1, 2.0]), *keep) is None   # a tie came apart
    assert _in_last_order(np.array([3.0, 1.0, 1.0, 1.0]), *keep) is None   # a new tie
    # a tie listed in the other order is not the stable sort's
    assert _in_last_order(at, np.array([2, 1, 3, 0]), last) is None
