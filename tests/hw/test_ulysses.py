"""Ulysses attention (hw.ulysses) against torch's attention in float64, on 1-4 gloo
ranks: outputs and gradients (GQA, with K/V heads replicated when the degree exceeds
them), the recorded trace (computes, all-to-all bytes), and the refused degrees."""

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

ALL = [dict(scheme="ulysses", layout=lay, causal=c, kv_heads=kvh)
       for lay, c, kvh in itertools.product(("contiguous", "zigzag", "striped"), (True, False), (HEADS, 6, 2, 1))]


def _fits(n_gpus: int, case: dict) -> bool:
    kvh = case["kv_heads"]
    return HEADS % n_gpus == 0 and (kvh % n_gpus == 0 if n_gpus <= kvh else n_gpus % kvh == 0)


def cases(n_gpus: int) -> list[dict]:
    return [c for c in ALL if _fits(n_gpus, c)]


def _params():
    out = []
    for n in (1, 2, 3, 4):
        for i, c in enumerate(cases(n)):
            out.append(pytest.param(n, i, marks=[pytest.mark.slow] if n > 1 else [],
                                    id=f"n{n}-{c['layout']}-{'causal' if c['causal'] else 'full'}-kv{c['kv_heads']}"))
    return out


PARAMS = _params()


@pytest.mark.parametrize("n_gpus,index", PARAMS)
def test_ulysses_matches_float64_attention(n_gpus, index):
    check_exact(results("ulysses", cases(n_gpus), n_gpus), index, cases(n_gpus)[index], n_gpus)


@pytest.mark.parametrize("n_gpus,index", PARAMS)
def test_ulysses_trace(n_gpus, index):
    case = cases(n_gpus)[index]
    trace = trace_of(results("ulysses", cases(n_gpus), n_gpus), index, n_gpus)
    check_no_overlap(trace)
    n, seq, kvh = n_gpus, 2 * n_gpus * PER_CHUNK, case["kv_heads"]
    sent_kv = max(kvh, n)          # K/V heads sent: each replicated head once per rank using it
    # docs/design.md: (N-1)/N * (S/N) * (2H + 2H_kv) * d * b forward (Q, K, V in, O out), fp32
    fwd_bytes = (n - 1) / n * (seq / n) * (2 * HEADS + 2 * sent_kv) * HEAD_DIM * 4 * BATCH
    # backward: dO in, dQ, dK, dV out
    bwd_bytes = fwd_bytes
    pairs = seq * (seq + 1) // 2 if case["causal"] else seq * seq
    for r, spans in enumerate(trace.by_rank()):
        comp = [s for s in spans if s.stream == "compute"]
        assert [(s.kind, s.step) for s in comp] == [("fwd", 0), ("bwd", n)]
        assert comp[0].flops == 4 * HEAD_DIM * pairs * (HEADS // n) * BATCH
        assert comp[1].flops == 2.5 * comp[0].flops
        for stream in ("send", "recv"):
            xs = [s for s in spans if s.stream == stream]
            assert all(s.kind == "a2a" and s.peer == -1 for s in xs)
            assert sorted(s.step for s in xs) == ([] if n == 1 else [0, 1, n, n + 1])
            assert sum(s.bytes for s in xs if s.step < n) == pytest.approx(fwd_bytes)
            assert sum(s.bytes for s in xs if s.step >= n) == pytest.approx(bwd_bytes)
        assert all(s.kind in ("a2a", "idle") for s in spans if s.stream == "wait")


@pytest.mark.parametrize("heads,kv_heads,n_gpus,what", [
    (4, 4, 3, "does not divide the 4 query heads"),
    (12, 4, 3, "one must divide the other"),
    (12, 2, 3, "one must divide the other"),
])
def test_ulysses_refuses_degrees_that_do_not_split_the_heads(heads, kv_heads, n_gpus, what):
    import torch

    from hw.launch import run_local
    from hw.ulysses import check_degree
    from sim.errors import RingsimError

    q = torch.zeros(1, 2 * n_gpus, heads, 8)
    kv = torch.zeros(1, 2 * n_gpus, kv_heads, 8)
    with pytest.raises(RingsimError, match=what) as e:
        run_local(q, kv, kv, n_gpus=n_gpus, causal=True, scheme="ulysses")
    assert "\n" not in str(e.value)
    with pytest.raises(RingsimError, match=what):
        check_degree(heads, kv_heads, n_gpus)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["allgather", "ulysses"])
def test_run_local_runs_the_scheme_and_records_its_trace(scheme):
    import torch

    from hw.launch import run_local
    from tests.hw.conftest import max_err, reference_attention

    g = torch.Generator().manual_seed(7)
    q, dout = (torch.randn(1, 24, 4, 16, generator=g) for _ in range(2))
    k, v = (torch.randn(1, 24, 2, 16, generator=g) for _ in range(2))
    res = run_local(q, k, v, n_gpus=2, causal=True, scheme=scheme, dout=dout, timeout_s=30.0)
    want = reference_attention(q, k, v, True, dout)
    assert max_err(res.out, want[0]) <= 1e-5
    assert max(max_err(a, b) for a, b in zip((res.dq, res.dk, res.dv), want[1:])) <= 1e-4
    assert res.trace.config["scheme"] == scheme and res.trace.meta["schedule"] == scheme
    kinds = {s.kind for s in res.trace.spans if s.stream == "send"}
    assert kinds == ({"ag", "rs"} if scheme == "allgather" else {"a2a"})
