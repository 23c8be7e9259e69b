"""All-gather attention (hw.allgather) against torch's attention in float64, on 1-4 gloo
ranks: outputs and gradients, and the recorded trace (computes, collective bytes)."""

from __future__ import annotations

import itertools

import pytest

from tests.hw.test_schemes_common import (
    BATCH,
    HEAD_DIM,
    HEADS,
    PER_CHUNK,
    check_exact,
    check_no_overlap,
    results,
    trace_of,
)

CASES = [dict(scheme="allgather", layout="zigzag", causal=c, kv_heads=kvh)
         for c, kvh in itertools.product((True, False), (HEADS, 2, 1))]


def _gpus_param(n: int):
    return pytest.param(n, marks=[pytest.mark.slow] if n > 1 else [], id=f"n{n}")


GPU_COUNTS = [_gpus_param(n) for n in (1, 2, 3, 4)]
IDS = [f"{'causal' if c['causal'] else 'full'}-kv{c['kv_heads']}" for c in CASES]


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_allgather_matches_float64_attention(n_gpus, index):
    check_exact(results("allgather", CASES, n_gpus), index, CASES[index], n_gpus)


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_allgather_trace(n_gpus, index):
    case = CASES[index]
    trace = trace_of(results("allgather", CASES, n_gpus), index, n_gpus)
    check_no_overlap(trace)
    n, seq, kvh = n_gpus, 2 * n_gpus * PER_CHUNK, case["kv_heads"]
    c = PER_CHUNK
    kv_bytes = (n - 1) / n * seq * 2 * kvh * HEAD_DIM * 4 * BATCH     # docs/design.md: received K/V, fp32
    for r, spans in enumerate(trace.by_rank()):
        comp = [s for s in spans if s.stream == "compute"]
        assert [(s.kind, s.step) for s in comp] == [("fwd", 0), ("bwd", n)]
        if case["causal"]:
            pairs = sum(a * c * c + c * (c + 1) // 2 for a in (r, 2 * n - 1 - r))
        else:
            pairs = 2 * c * seq
        assert comp[0].flops == 4 * HEAD_DIM * pairs * HEADS * BATCH
        assert comp[1].flops == 2.5 * comp[0].flops
        assert comp[0].q_chunks == (r, 2 * n - 1 - r)
        for stream in ("send", "recv"):
            xs = sorted(((s.kind, s.step, s.bytes, s.peer) for s in spans if s.stream == stream))
            want = [] if n == 1 else sorted([("ag", 0, kv_bytes, -1), ("ag", n, kv_bytes, -1),
                                             ("rs", n + 1, kv_bytes, -1)])
            assert xs == want
        assert all(s.kind in ("ag", "rs", "idle") for s in spans if s.stream == "wait")


def test_allgather_refuses_other_layouts():
    import torch

    from hw.launch import run_local
    from sim.errors import RingsimError

    q = torch.zeros(1, 8, 2, 8)
    with pytest.raises(RingsimError, match="zigzag") as e:
        run_local(q, q, q, n_gpus=2, causal=True, layout="contiguous", scheme="allgather")
    assert "\n" not in str(e.value)


def test_the_gathered_kv_lands_in_buffers_kept_from_one_call_to_the_next():
    """A second gather of the same shape writes the same storage (no fresh pages to touch)
    and holds the second call's K/V in token order; another shape gets its own."""
    import torch

    from hw.allgather import gather_kv
    from hw.comm import Ring

    ring = Ring.__new__(Ring)
    ring.rank, ring.n_gpus, ring.recorder = 0, 1, None
    k1, v1 = torch.randn(1, 8, 2, 4), torch.randn(1, 8, 2, 4)      # (batch, tokens, kv heads, d)
    kf1, _ = gather_kv(k1, v1, ring, 0, (0, 1))
    first = kf1.data_ptr()
    assert torch.equal(kf1, k1.transpose(1, 2))
    k2, v2 = torch.randn(1, 8, 2, 4), torch.randn(1, 8, 2, 4)
    kf2, vf2 = gather_kv(k2, v2, ring, 0, (0, 1))
    assert kf2.data_ptr() == first
    assert torch.equal(kf2, k2.transpose(1, 2)) and torch.equal(vf2, v2.transpose(1, 2))
    kf3, _ = gather_kv(torch.randn(1, 16, 2, 4), torch.randn(1, 16, 2, 4), ring, 0, (0, 1))
    assert kf3.data_ptr() != first
