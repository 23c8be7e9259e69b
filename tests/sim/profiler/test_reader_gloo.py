"""A two-rank run recorded here on gloo (CPU): all-reduce, a ring exchange of send/recv and
torch's SDPA under torch.profiler, three ProfilerSteps, one trace file per rank. The reader
puts the ranks together (distributedInfo), finds the communication ops with their message
sizes (record_param_comms) and breaks the host operators down."""

from __future__ import annotations

import numpy as np
import pytest

from sim.profiler.breakdown import breakdown
from sim.profiler.reader import read_run

torch = pytest.importorskip("torch")

ELEMENTS = 4096  # float32: 16 KiB per message


def _rank(rank: int, world: int, folder: str) -> None:
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world)
    x = torch.ones(ELEMENTS)
    q = torch.randn(1, 2, 32, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(f"{folder}/rank{rank}.json")) as prof:
        for _ in range(4):
            dist.all_reduce(x)
            send = dist.isend(x, (rank + 1) % world)
            recv = torch.empty(ELEMENTS)
            dist.recv(recv, (rank - 1) % world)
            send.wait()
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    import torch.multiprocessing as mp

    folder = tmp_path_factory.mktemp("gloo")
    mp.spawn(_rank, args=(2, str(folder)), nprocs=2, join=True)
    (folder / "store").unlink(missing_ok=True)
    return folder


@pytest.mark.slow
def test_two_gloo_ranks_read_as_one_run(gloo_run):
    run = read_run([gloo_run])
    assert run.ranks == (0, 1) and run.world_size == 2
    assert all(len(run.iterations[r]) == 3 for r in run.ranks)
    ev = run.events
    assert not ev.on_gpu.any()
    comm = ev.kind == "cpu_comm"
    sized = comm & (ev.msg_bytes > 0)
    # record_param_comms gives every collective and point-to-point message its size
    assert set(ev.msg_bytes[sized].tolist()) == {ELEMENTS * 4}
    assert (ev.kind == "cpu_attention_fwd").any()
    for r in run.ranks:
        mine = ev.rank == r
        assert (sized & mine).sum() >= 3 * 3  # all-reduce, send, recv in each active step
    # one host, one clock: nothing to align
    assert set(run.clock_offsets_s.values()) == {0.0}
    rows = breakdown(run)
    assert [b.rank for b in rows] == [0, 1]
    for b in rows:
        assert not b.on_gpu and b.compute_s > 0 and b.comm_kernel_s > 0
        assert b.compute_s + b.comm_s + b.memory_s + b.other_s + b.idle_s == pytest.approx(b.span_s, rel=1e-9)
    assert np.isfinite(ev.start_s).all()
