"""The ring against torch's own attention in float64, on 1-4 gloo ranks.

One spawned group per GPU count runs every case (layouts x causal x K/V heads x
dtypes, forward and backward) so that start-up is paid once; each rank compares its
own shard with the reference and returns the errors and its recorded spans.
"""

from __future__ import annotations

import itertools
import zlib

import pytest
import torch

from sim.layouts import chunks_of_rank, exact_work
from sim.trace.format import Trace
from tests.hw import test_schemes_common as common
from tests.hw.conftest import max_err, reference_attention

LAYOUTS = ("contiguous", "striped", "zigzag")
CASES = [dict(layout=lay, causal=c, kv_heads=kvh, dtype=dt)
         for lay, c, kvh, dt in itertools.product(LAYOUTS, (True, False), (4, 2, 1), ("fp32", "bf16"))]
TOL = {"fp32": (1e-5, 1e-4), "bf16": (2.5e-2, 2.5e-2)}   # (forward, gradients)
# fp32 errors are absolute. A bf16 result of magnitude x is rounded by up to x·2^-9 when
# it is stored at all (|dV| reaches 8 here: 0.03 from the final cast alone), so bf16
# errors are measured relative to max(1, the reference's largest magnitude).
BATCH, HEADS, HEAD_DIM, PER_CHUNK = 2, 4, 16, 3


def _inputs(case: dict, n_gpus: int):
    chunks = 2 * n_gpus if case["layout"] == "zigzag" else n_gpus
    seq = chunks * PER_CHUNK
    # a seed every rank derives alike (str hashes differ between interpreters)
    g = torch.Generator().manual_seed(zlib.crc32(repr(sorted(case.items())).encode()) + n_gpus)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[case["dtype"]]
    q, dout = (torch.randn(BATCH, seq, HEADS, HEAD_DIM, generator=g).to(dt) for _ in range(2))
    k, v = (torch.randn(BATCH, seq, case["kv_heads"], HEAD_DIM, generator=g).to(dt) for _ in range(2))
    return q, k, v, dout


def results(n_gpus: int) -> list[list[dict]]:
    """Per rank, per case: outputs and spans (one spawned group per GPU count, cached)."""
    return common.results("ring", CASES, n_gpus, _inputs)


def _id(case: dict) -> str:
    return f"{case['layout']}-{'causal' if case['causal'] else 'full'}-kv{case['kv_heads']}-{case['dtype']}"


def _gpus_param(n_gpus: int):
    return pytest.param(n_gpus, marks=[pytest.mark.slow] if n_gpus > 1 else [], id=f"n{n_gpus}")


GPU_COUNTS = [_gpus_param(n) for n in (1, 2, 3, 4)]


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("index", range(len(CASES)), ids=[_id(c) for c in CASES])
def test_output_and_gradients_match_float64_attention(n_gpus, index):
    from hw.layouts import unshard

    case = CASES[index]
    fwd_tol, grad_tol = TOL[case["dtype"]]
    per_rank = [rank_rows[index]["outputs"] for rank_rows in results(n_gpus)]
    got = [unshard([p[i] for p in per_rank], case["layout"]) for i in range(4)]
    q, k, v, dout = _inputs(case, n_gpus)
    want = reference_attention(q, k, v, case["causal"], dout)
    for g, x in zip(got, (q, q, k, v)):
        assert g.dtype == x.dtype and g.shape == x.shape

    def err(g, w) -> float:
        scale = max(1.0, w.abs().max().item()) if case["dtype"] == "bf16" else 1.0
        return max_err(g, w) / scale
    err_out = err(got[0], want[0])
    err_grads = [err(g, w) for g, w in zip(got[1:], want[1:])]
    assert all(rank_rows[index]["inputs_kept"] for rank_rows in results(n_gpus))
    assert err_out <= fwd_tol, f"out error {err_out:.3g}"
    assert max(err_grads) <= grad_tol, f"dq/dk/dv errors {err_grads}"


def check_trace_structure(trace: Trace, layout: str, causal: bool, phases: list[str], seq: int,
                          *, batch: int, heads: int, head_dim: int) -> None:
    """The invariants of a measured ring trace (forward and/or backward phases)."""
    n = trace.n_gpus
    work = exact_work(layout, seq, n, causal)
    chunks = chunks_of_rank(layout, n)
    for r, spans in enumerate(trace.by_rank()):
        comp = sorted((s for s in spans if s.stream == "compute"), key=lambda s: s.start_s)
        for a, b in zip(comp, comp[1:]):
            assert a.end_s <= b.start_s, f"rank {r}: compute spans overlap"
        waits = [s for s in spans if s.stream == "wait"]
        for w in waits:
            for c in comp:
                assert w.end_s <= c.start_s or w.start_s >= c.end_s, f"rank {r}: wait overlaps compute"
        for p, phase in enumerate(phases):
            steps = range(p * n, (p + 1) * n)
            mine = [s for s in comp if s.step in steps]
            assert all(s.kind == phase for s in mine)
            # one compute per step whose block is not fully masked, and no other
            want_steps = [p * n + k for k in range(n) if work[r, (r - k) % n] > 0]
            assert sorted(s.step for s in mine) == want_steps
            for s in mine:
                owner = (r - (s.step - p * n)) % n
                assert s.q_chunks == chunks[r] and s.kv_chunks == chunks[owner]
                factor = 1.0 if phase == "fwd" else 2.5
                assert s.flops == factor * 4 * head_dim * work[r, owner] * heads * batch
            kv = [s for s in spans if s.stream == "send" and s.kind == "kv" and s.step in steps]
            assert len(kv) == n - 1
            dkv = [s for s in spans if s.stream == "send" and s.kind == "dkv" and s.step in steps]
            assert len(dkv) == (n if phase == "bwd" and n > 1 else 0)
    sends = [s for s in trace.spans if s.stream == "send"]
    recvs = {(s.rank, s.peer, s.kind, s.step, s.kv_chunks) for s in trace.spans if s.stream == "recv"}
    assert len(recvs) == len(sends)
    for s in sends:
        assert s.peer == (s.rank + 1) % n
        assert (s.peer, s.rank, s.kind, s.step, s.kv_chunks) in recvs, f"unmatched send {s}"


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("index", [i for i, c in enumerate(CASES) if c["dtype"] == "fp32" and c["kv_heads"] == 2],
                         ids=[_id(c) for c in CASES if c["dtype"] == "fp32" and c["kv_heads"] == 2])
def test_recorded_spans_form_a_valid_ring_trace(n_gpus, index):
    case = CASES[index]
    spans = [s for rank_rows in results(n_gpus) for s in rank_rows[index]["spans"]]
    trace = Trace.from_dict({"format": "ringsim-trace", "version": 1, "source": "measured",
                             "world_size": n_gpus, "spans": spans})   # version 1: a list of spans
    seq = (2 * n_gpus if case["layout"] == "zigzag" else n_gpus) * PER_CHUNK
    check_trace_structure(trace, case["layout"], case["causal"], ["fwd", "bwd"], seq,
                          batch=BATCH, heads=HEADS, head_dim=HEAD_DIM)
