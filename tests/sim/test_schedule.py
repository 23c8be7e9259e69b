"""The schedule as data (sim.schedule): building from operations, waves, resources."""

import numpy as np
import pytest

from sim.schedule import ComputeOp, Schedule, TransferOp


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
