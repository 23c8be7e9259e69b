"""Starting ranks (hw.spawn): a rank that raises or dies is named, and every rank stops
within the run's timeout instead of hanging."""

from __future__ import annotations

import time

import pytest

from hw.config import RunConfig
from hw.launch import run_config
from hw.spawn import RankFailure
from sim.scenario.config import Workload

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode,match", [("raise", "injected failure at step 1"),
                                        ("exit", "exited without a result")])
def test_a_failing_rank_is_named_and_every_rank_stops_within_the_timeout(mode, match):
    cfg = RunConfig(workload=Workload(seq=48, heads=2, kv_heads=2, head_dim=8, dtype="fp32",
                                      pass_="fwdbwd"),
                    n_gpus=3, layout="contiguous", warmup=0, timeout_s=15.0,
                    fail_rank=1, fail_step=1, fail_mode=mode)
    t0 = time.monotonic()
    with pytest.raises(RankFailure, match=match) as info:
        run_config(cfg)
    assert info.value.rank == 1
    assert str(info.value).startswith("rank 1 failed")
    # start-up (a few seconds) plus at most the timeout, not a hang
    assert time.monotonic() - t0 < 15.0 + 25.0


def _noisy_then(ctx, fail: bool):
    """A rank that writes to its standard error as a library would, then fails or not."""
    import os

    os.write(2, f"library noise from rank {ctx.rank}\n".encode())
    if fail and ctx.rank == 1:
        raise RuntimeError("rank 1 gave up")
    return ctx.rank


def test_the_ranks_own_output_stays_out_of_a_failure_and_is_replayed_after_a_success(capfd):
    from hw.spawn import spawn

    with pytest.raises(RankFailure) as info:
        spawn(_noisy_then, 2, args=(True,), timeout_s=15.0)
    out, err = capfd.readouterr()
    assert "library noise" not in out + err
    assert str(info.value).startswith("rank 1 failed: RuntimeError: rank 1 gave up") and "\n" not in str(info.value)
    with open(info.value.log_path) as f:
        assert "library noise from rank 1" in f.read()
    assert info.value.log_path in info.value.details
    assert spawn(_noisy_then, 2, args=(False,), timeout_s=15.0) == [0, 1]
    _, err = capfd.readouterr()
    assert "library noise from rank 0" in err and "library noise from rank 1" in err


def test_a_port_taken_before_the_store_listens_starts_the_run_again(monkeypatch):
    # free_port chooses a port and lets it go; another process (a run beside this one, a
    # test on another worker) may take it before rank 0's store listens. Here a socket
    # holds the first port chosen: the run starts again on the next, and returns
    import socket

    import hw.spawn as spawn_module

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real, chosen = spawn_module.free_port, []

    def choose() -> int:
        chosen.append(real() if chosen else taken.getsockname()[1])
        return chosen[-1]
    monkeypatch.setattr(spawn_module, "free_port", choose)
    try:
        t0 = time.monotonic()
        assert spawn_module.spawn(_noisy_then, 2, args=(False,), timeout_s=15.0) == [0, 1]
        assert len(chosen) == 2                            # the taken port, then a free one
        assert time.monotonic() - t0 < 30.0                # the first run given up at once
        # taken every time: a one-line failure that names the taken address
        monkeypatch.setattr(spawn_module, "free_port", lambda: taken.getsockname()[1])
        monkeypatch.setattr(spawn_module, "PORT_TRIES", 2)
        with pytest.raises(RankFailure, match="rank 0 failed: .*EADDRINUSE") as info:
            spawn_module.spawn(_noisy_then, 2, args=(False,), timeout_s=15.0)
        assert "\n" not in str(info.value)
    finally:
        taken.close()
