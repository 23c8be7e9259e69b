"""Starting ranks (hw.spawn): a rank that raises or dies is named, and every rank stops
within the run's timeout instead of hanging."""

from __future__ import annotations

import time

import pytest

from hw import RankFailure, RunConfig, run_config
from sim.config import Workload

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode,match", [("raise", "injected failure at step 1"),
                                        ("exit", "exited without a result")])
def test_a_failing_rank_is_named_and_every_rank_stops_within_the_timeout(mode, match):
    cfg = RunConfig(workload=Workload(seq=48, heads=2, kv_heads=2, head_dim=8, dtype="fp32",
                                      pass_="fwdbwd"),
                    world_size=3, layout="contiguous", warmup=0, timeout_s=15.0,
                    fail_rank=1, fail_step=1, fail_mode=mode)
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match=match) as info:
        run_config(cfg)
    assert info.value.rank == 1
    assert str(info.value).startswith("rank 1 failed")
    # start-up (a few seconds) plus at most the timeout, not a hang
    assert time.monotonic() - t0 < 15.0 + 25.0
