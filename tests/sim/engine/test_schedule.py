"""The schedule as data (sim.engine.schedule): building from operations, waves, resources."""

import numpy as np
import pytest

from sim.engine.schedule import ComputeOp, Schedule, TransferOp


def test_from_ops_refuses_dependencies_on_later_operations():
    ops = [ComputeOp(0, 0, "fwd", 0, 0, 1, 1.0, "full", 1, 1, (0,), (0,), (1,)),
           ComputeOp(1, 0, "fwd", 0, 0, 1, 1.0, "full", 1, 1, (0,), (0,), ())]
    with pytest.raises(ValueError, match="dependencies must come first"):
        Schedule.from_ops(1, ops)


def test_check_refuses_waves_the_engine_could_not_time_at_once():
    ops = [ComputeOp(0, 0, "fwd", 0, 0, 1, 1.0, "full", 1, 1, (0,), (0,), ()),
           ComputeOp(1, 1, "fwd", 0, 1, 1, 1.0, "full", 1, 1, (1,), (1,), ()),
           TransferOp(2, 0, 1, "kv", 0, 0, 8, (0,), (0,))]
    schedule = Schedule.from_ops(2, ops)
    assert schedule.wave_starts.tolist() == [0, 2, 3]      # the hop waits on op 0
    schedule.check()
    schedule.wave_starts = np.array([0, 3])
    with pytest.raises(ValueError, match="its own wave"):
        schedule.check()
    same_rank = Schedule.from_ops(2, [ops[0], ops[0]._replace(id=1)])
    assert same_rank.wave_starts.tolist() == [0, 1, 2]     # one compute stream: two waves
    same_rank.wave_starts = np.array([0, 2])
    with pytest.raises(ValueError, match="share a stream"):
        same_rank.check()


def test_check_refuses_a_wave_whose_operations_share_an_extra_resource():
    ops = [TransferOp(0, 0, 2, "a2a", 0, 0, 8, (0,), ()), TransferOp(1, 1, 2, "a2a", 0, 1, 8, (1,), ())]
    schedule = Schedule.from_ops(3, ops, [("0 out", "2 in"), ("1 out", "2 in")])
    assert schedule.wave_starts.tolist() == [0, 1, 2]
    schedule.check()
    schedule.wave_starts = np.array([0, 2])
    with pytest.raises(ValueError, match="share a stream or other resource"):
        schedule.check()
    schedule.wave_starts = np.array([0, 1, 2])
    schedule.extra_resources = np.array([[0, -1]])      # op 0 holds its own port twice
    with pytest.raises(ValueError, match="one resource twice"):
        schedule.check()


def test_the_builder_numbers_groups_in_order_and_cuts_waves_greedily():
    from sim.engine.schedule import A2A, EMPTY, FWD, ScheduleBuilder

    b = ScheduleBuilder(2, ["GPU 0 compute", "GPU 1 compute", "0 out", "1 out", "0 in", "1 in"])
    flows = b.transfers(kind=A2A, src=np.array([0, 1]), dst=np.array([1, 0]), step=0, nbytes=8,
                        resources=[np.array([2, 3]), np.array([5, 4])])
    comps = b.computes(kind=FWD, rank=np.array([1, 0]), step=0, pairs=0, flops=0.0, mask=EMPTY,
                       q_tokens=0, kv_tokens=0, q_chunks=b.chunk_set([0]), kv_chunks=-1, after=[flows])
    assert flows.tolist() == [0, 1] and comps.tolist() == [2, 3]
    s = b.build()
    s.check()
    assert s.wave_starts.tolist() == [0, 2, 4]
    assert s.resource.tolist() == [2, 3, 1, 0] and s.extra_resources.tolist() == [[5, 4, -1, -1]]
    with pytest.raises(ValueError, match="earlier"):
        b.computes(kind=FWD, rank=0, step=0, pairs=0, flops=0.0, mask=EMPTY, q_tokens=0, kv_tokens=0,
                   q_chunks=0, kv_chunks=-1, after=[np.array([9])])


@pytest.mark.parametrize("piece", [1, 3, 1 << 20])
def test_the_ids_of_computes_and_transfers_found_a_piece_at_a_time_are_theirs_in_order(monkeypatch, piece):
    from sim.engine import schedule as module

    monkeypatch.setattr(module, "_ID_PIECE", piece)
    ops = [ComputeOp(0, 0, "fwd", 0, 0, 1, 1.0, "full", 1, 1, (0,), (0,), ()),
           TransferOp(1, 0, 1, "kv", 0, 0, 8, (0,), ()),
           TransferOp(2, 1, 0, "kv", 0, 1, 8, (1,), ()),
           ComputeOp(3, 1, "fwd", 1, 0, 1, 1.0, "full", 1, 1, (1,), (0,), (1,)),
           TransferOp(4, 1, 0, "kv", 1, 0, 8, (0,), (3,)),
           ComputeOp(5, 0, "fwd", 1, 1, 1, 1.0, "full", 1, 1, (0,), (1,), (2, 4))]
    s = Schedule.from_ops(2, ops)
    assert s.compute_ids.tolist() == [0, 3, 5] and s.compute_ids.dtype == np.int32
    assert s.transfer_ids.tolist() == [1, 2, 4]
