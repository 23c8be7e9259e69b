"""The ring played by threads of one process (hw.inprocess) and the exactness bench on it
(bench/checks/ring_exact.py), on CPU, against torch's attention in float64."""

from __future__ import annotations

import itertools
import threading

import pytest
import torch

import bench.checks.ring_exact as ring_exact
from hw.blocks import CpuFlashOps
from hw.comm import Ring
from hw.inprocess import ThreadChannel, play_ring
from sim.errors import RingsimError
from tests.hw.conftest import max_err, reference_attention


def _inputs(seq: int, kv_heads: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, dout = (torch.randn(2, seq, 4, 16, generator=g) for _ in range(2))
    k, v = (torch.randn(2, seq, kv_heads, 16, generator=g) for _ in range(2))
    return q, k, v, dout


@pytest.mark.parametrize("n_gpus,layout,causal,kv_heads", [
    (w, lay, c, kvh) for w, lay, c, kvh in itertools.product((1, 2, 3, 4), ("contiguous", "striped", "zigzag"),
                                                             (True, False), (4, 1))])
def test_threads_ring_matches_fp64_attention(n_gpus, layout, causal, kv_heads):
    q, k, v, dout = _inputs(24, kv_heads, seed=n_gpus)
    got = play_ring(q, k, v, dout, n_gpus=n_gpus, layout=layout, causal=causal, ops=CpuFlashOps())
    want = reference_attention(q, k, v, causal, dout)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.shape == b.shape and a.dtype == q.dtype, name
        assert max_err(a, b) < (1e-5 if name == "out" else 1e-4), name


def test_forward_alone_returns_the_output():
    q, k, v, _ = _inputs(12, 4)
    (out,) = play_ring(q, k, v, None, n_gpus=3, layout="contiguous", causal=True, ops=CpuFlashOps())
    assert max_err(out, reference_attention(q, k, v, True)[0]) < 1e-5


def test_a_rank_that_fails_stops_the_ring_with_its_own_error():
    class FailsOnRank2(CpuFlashOps):
        def _forward(self, q, k, v, causal):
            if threading.current_thread().name == "ring-rank-2":
                raise RuntimeError("planted on rank 2")
            return super()._forward(q, k, v, causal)

    q, k, v, dout = _inputs(16, 4)
    with pytest.raises(RuntimeError, match="planted on rank 2"):
        play_ring(q, k, v, dout, n_gpus=4, layout="zigzag", causal=True, ops=FailsOnRank2(), timeout_s=20)


def test_sizes_that_do_not_split_are_refused():
    q, k, v, _ = _inputs(12, 4)
    with pytest.raises(RingsimError, match="12 tokens do not split into 8 chunks"):
        play_ring(q, k, v, None, n_gpus=4, layout="zigzag", causal=True, ops=CpuFlashOps())


def test_a_wait_with_nothing_posted_is_an_error():
    ring = Ring(rank=0, n_gpus=2, group=None, clock=None)
    with pytest.raises(RingsimError, match="nothing posted"):
        ThreadChannel(ring, "kv").wait(step=1)


def test_bench_passes_the_kernel_and_fails_a_planted_error(monkeypatch):
    kw = dict(seq=24, batch=1, heads=4, kv_heads=[4, 2], head_dim=16, gpu_counts=[2, 3], dtypes=["fp32", "bf16"],
              log=lambda *_: None)
    good = ring_exact.run("cpu", **kw)
    assert len(good["cases"]) == 2 * 2 * 2 * 2 * 3 and good["failed"] == 0
    for c in good["cases"]:
        assert c["errors"]["out"] <= max(2 * c["torch"]["out"], ring_exact.FLOOR[c["dtype"]])

    class Skewed(CpuFlashOps):
        def _forward(self, q, k, v, causal):   # a block's output 0.1% off
            out, lse = super()._forward(q, k, v, causal)
            return out * 1.001, lse

    import hw.blocks
    monkeypatch.setattr(hw.blocks, "select_block_ops", lambda *a, **k: Skewed())
    bad = ring_exact.run("cpu", **{**kw, "dtypes": ["fp32"], "kv_heads": [4], "gpu_counts": [2]})
    assert bad["failed"] == len(bad["cases"]) == 6
    assert all(c["errors"]["out"] > 1e-4 for c in bad["cases"])


def test_bench_command_line_refusals(tmp_path, capsys):
    assert ring_exact.main(["--device", "cpu", "--seq", "12", "--gpus", "4"]) == 2
    assert "--seq 12 must divide into 2 x 4 chunks" in capsys.readouterr().err
    assert ring_exact.main(["--device", "cpu", "--heads", "8", "--kv-heads", "3"]) == 2
    assert "--kv-heads 3 must divide --heads 8" in capsys.readouterr().err
    out = tmp_path / "r.json"
    out.write_text("mine")
    assert ring_exact.main(["--device", "cpu", "--seq", "16", "--gpus", "2", "--json", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err and out.read_text() == "mine"
    if not torch.cuda.is_available():
        assert ring_exact.main(["--device", "cuda"]) == 2
        assert "sees no CUDA device" in capsys.readouterr().err



def test_a_timed_play_gives_each_rank_s_steps_alone_and_numbered_as_the_simulator_does():
    """play_ring(timed=True): one compute span per rank and step that computes, forward
    steps 0..N-1 and backward N..2N-1 (sim.engine.schedule's numbering), no two overlapping (each
    step's compute runs alone on the device), and the same numbers as an untimed play."""
    import torch

    from hw.blocks import select_block_ops
    from hw.inprocess import play_ring

    n_gpus, seq = 3, 3 * 2 * 32
    gen = torch.Generator().manual_seed(3)
    q, dout = (torch.randn(1, seq, 4, 16, generator=gen) for _ in range(2))
    k, v = (torch.randn(1, seq, 2, 16, generator=gen) for _ in range(2))
    ops = select_block_ops("cpu", "fp32", 16)
    plain = play_ring(q, k, v, dout, n_gpus=n_gpus, layout="zigzag", causal=True, ops=ops)
    timed, spans = play_ring(q, k, v, dout, n_gpus=n_gpus, layout="zigzag", causal=True, ops=ops, timed=True)
    for a, b in zip(plain, timed):
        assert torch.equal(a, b)
    keys = sorted((s.rank, s.kind, s.step) for s in spans)
    want = sorted([(r, "fwd", s) for r in range(n_gpus) for s in range(n_gpus)]
                  + [(r, "bwd", n_gpus + s) for r in range(n_gpus) for s in range(n_gpus)])
    assert keys == want                      # zigzag: every block computes something
    order = sorted(spans, key=lambda s: s.start_s)
    assert all(a.end_s <= b.start_s for a, b in zip(order, order[1:]))
    assert all(s.end_s > s.start_s and s.flops > 0 for s in spans)
