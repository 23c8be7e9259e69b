"""The CUDA/NCCL path's deciding logic, on CPU: device functions are replaced by fakes
that log what they were asked to do, and each test checks the log or the outcome
against what a GPU run must do."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

from hw.comm import PeerFailure, Ring
from hw.config import RunConfig
from hw.timing import CpuClock, CudaClock, Pending, Recorder, TransferStalled
from sim.errors import RingsimError
from sim.scenario.config import Workload

# ---- the interference part times compute on its own stream ----------------------------

class _FakeEvent:
    log: list = []
    times = iter(())

    def __init__(self, enable_timing: bool = False):
        assert enable_timing
        self.t = None

    def record(self, stream=None):
        self.t = next(_FakeEvent.times)
        _FakeEvent.log.append(("record", self.t))

    def synchronize(self):
        _FakeEvent.log.append(("event-sync", self.t))

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def test_interference_times_compute_with_events_not_a_device_wide_synchronize(monkeypatch):
    from hw.bench.measure import time_compute

    _FakeEvent.log = []
    _FakeEvent.times = iter([10.0, 10.25])
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)

    def no_device_sync(*_a, **_k):
        raise AssertionError("a device-wide synchronize also waits for NCCL's stream")
    monkeypatch.setattr(torch.cuda, "synchronize", no_device_sync)
    t = time_compute(lambda: _FakeEvent.log.append(("compute",)), torch.device("cuda", 0))
    assert t == pytest.approx(0.25)
    assert _FakeEvent.log == [("record", 10.0), ("compute",), ("record", 10.25), ("event-sync", 10.25)]


# ---- one GPU per rank, or a refusal that names the counts ------------------------------

def test_ranks_get_their_own_gpu_or_a_refusal_naming_the_counts():
    from hw.runner import gpu_for_rank

    assert [gpu_for_rank(r, 4, 4) for r in range(4)] == [0, 1, 2, 3]
    assert gpu_for_rank(1, 2, 8) == 1
    for rank in (0, 3):   # every rank refuses, not only those past the last GPU
        with pytest.raises(RingsimError, match=r"4 ranks on this host but 2 GPUs visible.*"
                                               r"--nproc-per-node 2"):
            gpu_for_rank(rank, 4, 2)


def test_torchrun_with_more_ranks_than_gpus_fails_on_every_rank_naming_the_counts(monkeypatch, capsys):
    from hw import main as hw_main

    set_devices = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", set_devices.append)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    for rank in (0, 3):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        with pytest.raises(SystemExit) as info:
            hw_main.main(["--device", "cuda", "--seq", "64", "--heads", "2", "--head-dim", "8"])
        assert info.value.code == 1
        err = capsys.readouterr().err
        assert f"rank {rank} failed" in err and "4 ranks on this host but 2 GPUs" in err
    assert set_devices == []   # refused before any rank picked a GPU


# ---- timeouts: the gloo side group, NCCL's watchdog after the run's own -----------------

def test_nccl_join_uses_the_run_timeout_for_the_gloo_group_and_a_longer_one_for_nccl(monkeypatch):
    import torch.distributed as dist

    from hw import launch

    calls = {}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: calls.setdefault("device", i))
    monkeypatch.setattr(dist, "init_process_group",
                        lambda backend, **kw: calls.setdefault("init", (backend, kw["timeout"])))
    monkeypatch.setattr(dist, "new_group", lambda **kw: calls.setdefault("new_group", kw) and "control")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    _group, control = launch.join_group("nccl", rank=5, n_gpus=16, local_rank=5, timeout_s=42.0,
                                        store=object())
    assert control == "control" and calls["device"] == 5
    assert calls["new_group"] == {"backend": "gloo", "timeout": timedelta(seconds=42.0)}
    backend, nccl_timeout = calls["init"]
    assert backend == "nccl" and nccl_timeout > timedelta(seconds=42.0)


# ---- CUDA clock: a dead or hung peer is noticed on the CPU, within the timeout ---------

class _Work:
    def __init__(self, done: bool = True, error: str | None = None):
        self.done, self.error = done, error

    def is_completed(self) -> bool:
        return self.done or self.error is not None

    def wait(self):
        if self.error is not None:
            raise RuntimeError(self.error)
        return True


def _cuda_clock(timeout_s: float, on_poll=None) -> CudaClock:
    clock = CudaClock.__new__(CudaClock)   # no CUDA stream: settle() needs none
    clock.device, clock.timeout_s, clock.on_poll = torch.device("cuda", 0), timeout_s, on_poll
    clock._last, clock._outstanding = None, []
    return clock


def test_cuda_clock_settles_completed_transfers_and_names_the_ones_that_fail():
    clock = _cuda_clock(5.0)
    clock._outstanding = [Pending([_Work(), _Work()]), Pending([_Work()])]
    clock.settle()
    assert clock._outstanding == []
    clock._outstanding = [Pending([_Work(error="NCCL error: remote process exited")])]
    with pytest.raises(TransferStalled, match="remote process exited"):
        clock.settle()


def test_cuda_clock_gives_up_after_the_timeout_and_polls_for_a_peers_word():
    clock = _cuda_clock(0.05)
    clock._outstanding = [Pending([_Work(done=False)])]
    with pytest.raises(TransferStalled, match="not complete 0 s after"):
        clock.settle()
    polls = []

    def peer_said_so():
        polls.append(1)
        if len(polls) == 3:
            raise PeerFailure("rank 2 failed: boom", 2)
    clock = _cuda_clock(60.0, on_poll=peer_said_so)
    clock.ON_POLL_S = 0.0
    clock._outstanding = [Pending([_Work(done=False)])]
    with pytest.raises(PeerFailure, match="rank 2 failed"):
        clock.settle()
    assert len(polls) == 3


class _Store:
    def __init__(self, note: str | None):
        self.note = note

    def check(self, keys):
        return self.note is not None

    def get(self, key):
        return self.note.encode()


def test_a_stalled_transfer_is_reported_as_the_loss_of_the_peer_that_left_word(monkeypatch):
    from hw import runner

    class StalledClock(CpuClock):
        def synchronize(self):
            raise TransferStalled("a transfer was not complete 5 s after it was posted")

    monkeypatch.setattr(runner, "CpuClock", StalledClock)
    cfg = RunConfig(workload=Workload(seq=8, heads=2, kv_heads=2, head_dim=4, dtype="fp32"),
                    n_gpus=1, warmup=0)
    with pytest.raises(PeerFailure, match=r"rank 2 failed: boom.*not complete 5 s"):
        runner.run_rank(cfg, rank=0, group=None, inputs=None, device=torch.device("cpu"),
                        barrier=lambda: None, store=_Store("rank 2 failed: boom"))


def test_a_failed_barrier_is_the_loss_of_a_peer_not_the_ranks_own_failure():
    from hw import runner

    def broken_barrier():
        raise RuntimeError("Connection closed by peer")

    cfg = RunConfig(workload=Workload(seq=8, heads=2, kv_heads=2, head_dim=4, dtype="fp32"),
                    n_gpus=1, warmup=0)
    with pytest.raises(PeerFailure, match="a barrier .*Connection closed by peer"):
        runner.run_rank(cfg, rank=0, group=None, inputs=None, device=torch.device("cpu"),
                        barrier=broken_barrier, store=_Store(None))


# ---- NCCL's one stream per device: a batch starts when the one before it ended ---------

def test_a_queued_nccl_batch_starts_when_the_batch_before_it_ended():
    clock = CpuClock(10.0)       # marks are plain seconds here
    rec = Recorder(clock, 0)
    kv = Pending([_Work()])
    kv.mark = 5.0
    dkv = Pending([_Work()], after=kv)
    dkv.mark = 9.0
    late = Pending([_Work()], after=dkv)
    late.mark = 12.0
    rec.transfer("send", "kv", 0, 1.0, kv, 8.0, (0,), 1)
    rec.transfer("send", "dkv", 0, 2.0, dkv, 8.0, (0,), 1)      # posted while kv ran
    rec.transfer("send", "kv", 1, 10.0, late, 8.0, (1,), 1)     # posted after dkv ended
    assert [(s.kind, s.start_s, s.end_s) for s in rec.spans()] == [
        ("kv", 1.0, 5.0), ("dkv", 5.0, 9.0), ("kv", 10.0, 12.0)]


def test_nccl_batches_are_chained_in_posting_order_and_send_and_receive_end_together(monkeypatch):
    import torch.distributed as dist

    from hw.comm import RingComm

    clock = _cuda_clock(10.0)
    clock.side = None
    monkeypatch.setattr(CudaClock, "_event", lambda self, stream=None: "event")
    monkeypatch.setattr(CudaClock, "mark", lambda self: 0.0)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: _NullContext())
    coalesced = [_Work()]
    monkeypatch.setattr(dist, "batch_isend_irecv", lambda ops: coalesced)   # NCCL: one work
    monkeypatch.setattr(dist, "P2POp", lambda *a: a)
    ring = Ring(0, 2, None, clock, None)
    kv, dkv = RingComm(ring, "kv"), RingComm(ring, "dkv")
    t = torch.zeros(2)
    kv.post([t, t], [t, t], step=0, send_chunks=(0,), recv_chunks=(1,))
    dkv.post([t], [t], step=0, send_chunks=(0,), recv_chunks=(1,))
    kv.post([t, t], [t, t], step=1, send_chunks=(1,), recv_chunks=(0,))
    first, second, third = clock._outstanding
    assert first.after is None and second.after is first and third.after is second
    assert kv._pending == [third]   # one completion for the send and the receive


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
