"""Recording spans from operation times (sim.engine.record): the wait split by hand, and the
record's order."""

import numpy as np
import pytest

from sim.engine.record import record_spans, wait_pieces
from sim.engine.schedule import ComputeOp, Schedule, TransferOp
from sim.trace.format import STREAMS

IDLE, KV, DKV = 9, 2, 3


def pieces(t0, t1, flights):
    """wait_pieces for one wait [t0, t1] on transfers (start, end, kind), as tuples."""
    s = np.array([[f[0] for f in flights]], dtype=float)
    e = np.array([[f[1] for f in flights]], dtype=float)
    k = np.array([[f[2] for f in flights]])
    out = wait_pieces(np.array([t0], dtype=float), np.array([t1], dtype=float), s.reshape(1, -1),
                      e.reshape(1, -1), k.reshape(1, -1), np.ones((1, len(flights)), dtype=bool), IDLE, DKV)
    got = [(float(a), float(b), int(kind)) for a_, b_, k_, _ in out for a, b, kind in zip(a_, b_, k_)]
    return sorted(got)


@pytest.mark.parametrize("t0,t1,flights,want", [
    # the transfer started before the wait: all of it is exposed
    (2.0, 5.0, [(0.0, 5.0, KV)], [(2.0, 5.0, KV)]),
    # it starts late: idle until it starts (a late peer), exposed after
    (2.0, 5.0, [(3.0, 5.0, KV)], [(2.0, 3.0, IDLE), (3.0, 5.0, KV)]),
    # it ends early: exposed, then idle for whatever else held the compute back
    (2.0, 5.0, [(1.0, 4.0, KV)], [(2.0, 4.0, KV), (4.0, 5.0, IDLE)]),
    # two transfers in flight at once count once, the earlier first; a gap between is idle
    (0.0, 10.0, [(1.0, 4.0, KV), (2.0, 6.0, DKV), (7.0, 10.0, KV)],
     [(0.0, 1.0, IDLE), (1.0, 4.0, KV), (4.0, 6.0, DKV), (6.0, 7.0, IDLE), (7.0, 10.0, KV)]),
    # a transfer over before the wait began adds nothing
    (5.0, 6.0, [(0.0, 4.0, KV)], [(5.0, 6.0, IDLE)]),
])
def test_a_wait_splits_into_exposed_communication_and_idle(t0, t1, flights, want):
    got = pieces(t0, t1, flights)
    assert got == want
    assert sum(b - a for a, b, _ in got) == pytest.approx(t1 - t0)


def test_spans_are_recorded_by_rank_then_stream_in_the_order_they_ran():
    ops = [ComputeOp(0, 1, "fwd", 0, 1, 4, 4.0, "full", 2, 2, (1,), (1,), ()),
           TransferOp(1, 1, 0, "kv", 0, 1, 8, (1,), ()),
           ComputeOp(2, 0, "fwd", 0, 0, 4, 4.0, "full", 2, 2, (0,), (0,), ()),
           ComputeOp(3, 0, "fwd", 1, 1, 4, 4.0, "full", 2, 2, (0,), (1,), (1,)),
           ComputeOp(4, 1, "fwd", 1, 1, 4, 4.0, "full", 2, 2, (1,), (1,), (0,))]
    schedule = Schedule.from_ops(2, ops)
    start = np.array([0.0, 0.0, 0.0, 5.0, 1.0])
    end = np.array([1.0, 5.0, 1.0, 6.0, 2.0])
    table = record_spans(schedule, start, end)
    got = [(s.rank, s.stream, s.kind, s.start_s, s.end_s) for s in table.to_spans()]
    assert got == [
        (0, "compute", "fwd", 0.0, 1.0), (0, "compute", "fwd", 5.0, 6.0),
        (0, "recv", "kv", 0.0, 5.0), (0, "wait", "kv", 1.0, 5.0),
        (1, "compute", "fwd", 0.0, 1.0), (1, "compute", "fwd", 1.0, 2.0),
        (1, "send", "kv", 0.0, 5.0), (1, "wait", "idle", 5.0, 6.0),   # its ragged end
    ]
    assert [STREAMS[c] for c in table.stream] == [g[1] for g in got]
    assert table.peer.tolist() == [-1, -1, 1, -1, -1, -1, 0, -1]
    assert table.bytes.tolist() == [0, 0, 8, 0, 0, 0, 8, 0]
    assert table.flops.tolist() == [4, 4, 0, 0, 4, 4, 0, 0]


def test_a_transfer_that_starts_after_the_wait_ends_leaves_it_idle():
    # measured: the peer posted the receive of this rank's send only after the rank
    # stopped waiting; no piece may reach past the wait
    assert pieces(2.0, 5.0, [(6.0, 4.0, KV)]) == [(2.0, 5.0, IDLE)]
    assert pieces(2.0, 5.0, [(6.0, 7.0, KV)]) == [(2.0, 5.0, IDLE)]


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("pass_", ["fwd", "bwd", "fwdbwd"])
@pytest.mark.parametrize("overlap,sync", [(True, "step"), (True, "buffered"), (False, "step")])
@pytest.mark.parametrize("chunk", [8, 1 << 18])
def test_a_ring_recorded_as_a_grid_of_steps_gives_the_reference_spans(monkeypatch, layout, pass_, overlap,
                                                                        sync, chunk):
    """A ring's ops are read as (step, rank) grids, a few ranks at a time (several passes
    with a small chunk; a receiver's grid columns wrap around), or sorted where a rank
    skips empty blocks (contiguous): each way the record is the per-op reference's."""
    from sim.engine import record, threads
    from sim.engine.play import play
    from sim.schemes import get
    from tests.sim.reference import reference_trace_spans, scenario

    monkeypatch.setattr(record, "_CHUNK", chunk)
    monkeypatch.setattr(threads, "WORTH_THREADS", 0 if chunk == 8 else threads.WORTH_THREADS)   # columns on threads
    sc = scenario(n=5, seq=60, layout=layout, causal=True, overlap=overlap, pass_=pass_, heads=2, kv_heads=1,
                  head_dim=4, sync=sync)
    schedule = get("ring").build_schedule(sc)
    want = reference_trace_spans(schedule.ops, 5, sc.hardware, sc.workload)
    assert play(schedule, sc.hardware, sc.workload, player="recurrence").spans == want


def test_two_transfers_in_flight_are_taken_in_the_row_sort_order():
    """The two-transfer shortcut orders by start, then end, then tie, ties kept in place,
    as a sort of the row does; a position nothing is in flight at is left out."""
    t0, t1 = np.zeros(4), np.full(4, 10.0)
    starts = np.array([[3.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [2.0, 5.0, 0.0]])
    ends = np.array([[4.0, 2.0, 9.0], [6.0, 5.0, 9.0], [5.0, 5.0, 9.0], [3.0, 6.0, 9.0]])
    kinds = np.array([[KV, DKV, KV], [KV, DKV, KV], [KV, DKV, KV], [KV, DKV, KV]])
    flying = np.array([[True, True, False]] * 4)
    got = wait_pieces(t0, t1, starts, ends, kinds, flying, IDLE, DKV)
    rows = [sorted((float(a), float(b), int(k)) for a_, b_, k_, r_ in got for a, b, k, r in zip(a_, b_, k_, r_)
                   if r == i) for i in range(4)]
    assert rows[0] == [(0.0, 1.0, IDLE), (1.0, 2.0, DKV), (2.0, 3.0, IDLE), (3.0, 4.0, KV), (4.0, 10.0, IDLE)]
    assert rows[1] == [(0.0, 1.0, IDLE), (1.0, 5.0, DKV), (5.0, 6.0, KV), (6.0, 10.0, IDLE)]
    # equal start and end: dK/dV first (its kind sorts first), the other adds nothing
    assert rows[2] == [(0.0, 1.0, IDLE), (1.0, 5.0, DKV), (5.0, 10.0, IDLE)]
    assert rows[3] == [(0.0, 2.0, IDLE), (2.0, 3.0, KV), (3.0, 5.0, IDLE), (5.0, 6.0, DKV), (6.0, 10.0, IDLE)]


@pytest.mark.parametrize("block", [
    np.array([[1, 2, 3], [1, 2, 3]]),                       # by rank only (a rank's peer, its chunks)
    np.array([[5.0, 5.0, 5.0], [6.0, 6.0, 6.0]]),           # by step only
    np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),           # both
    np.array([[0.0, 0.0, 0.0], [-0.0, 0.0, 0.0]]),          # equal as numbers, not bit for bit
    np.array([[-0.0, 0.0, 0.0], [-0.0, 0.0, 0.0]]),
])
def test_a_block_of_steps_by_ranks_is_written_as_one_row_per_rank_bit_for_bit(block):
    from sim.engine.record import _put_rows, _windows

    column = np.full(12, 9.0, dtype=block.dtype)
    rows = np.array([0, 4, 8])                  # each rank's place; two spans of its own
    _put_rows(_windows(column, 2), rows, block[:, ::1])
    want = np.full(12, 9.0, dtype=block.dtype)
    for i, at in enumerate(rows):
        want[at:at + 2] = block[:, i]
    assert column.tobytes() == want.tobytes()
    _put_rows(_windows(column, 2), rows, 7)
    assert (column[[0, 1, 4, 5, 8, 9]] == 7).all() and (column[[2, 3, 6, 7, 10, 11]] == 9).all()
