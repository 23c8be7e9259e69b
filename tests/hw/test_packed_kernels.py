"""The ring and all-gather kernels on packed documents, against attention in float64 under
the document mask, on 2 and 3 gloo ranks.

One spawned group per GPU count runs every case (layouts x documents x window x mask,
forward and backward), as tests/hw/test_ring.py does. The reference mask is built token
by token from the documents' cumulative lengths (tests.reference.document_mask), not
from sim.layouts.packed; the recorded work of every compute is checked against a brute-force
count of the pairs that mask keeps between the two ranks' tokens.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
import torch

from sim.scenario.documents import bounds
from sim.trace.format import Trace
from tests.hw import test_schemes_common as common
from tests.hw.conftest import max_err
from tests.reference import document_mask, masked_attention

BATCH, HEADS, KV_HEADS, HEAD_DIM = 2, 4, 2, 8
TOKENS_PER_RANK = 32
TOL = (1e-5, 1e-4)   # fp32 (forward, gradients), absolute, against float64
PAIR_FLOPS = 4 * HEAD_DIM * HEADS * BATCH

DOCS = ("5,20,7",                          # lengths no chunk count divides, repeated
        "1,3,28",                          # documents shorter than the chunks
        "lognormal:median=24,sigma=1")     # drawn, the last one cut where the sequence ends
RING_LAYOUTS = ("contiguous", "striped", "zigzag", "doc-contiguous", "balanced")
CASES = [dict(scheme="ring", layout=lay, docs=docs, window=w, causal=c)
         for lay, docs, w, c in itertools.product(RING_LAYOUTS, DOCS, (None, 5), (True, False))]
CASES += [dict(scheme="ring", layout=lay, docs=None, window=w, causal=c)     # one document, packed path
          for lay, w, c in (("zigzag", 7, True), ("striped", 1, True), ("contiguous", 9, False),
                            ("balanced", None, True), ("doc-contiguous", None, False))]
CASES += [dict(scheme="allgather", layout=lay, docs=docs, window=w, causal=c)
          for lay, docs, w, c in itertools.product(("contiguous", "zigzag"), DOCS, (None, 5), (True, False))]
CASES += [dict(scheme=scheme, layout=lay, docs="5,20,7", window=5, causal=True, block_impl="matmul")
          for scheme, lay in (("ring", "zigzag"), ("ring", "striped"), ("allgather", "contiguous"))]


def _id(case: dict) -> str:
    return (f"{case['scheme']}-{case['layout']}-{case['docs'] or 'one'}-w{case['window']}-"
            f"{'causal' if case['causal'] else 'full'}" + ("-matmul" if "block_impl" in case else ""))


def _bounds(case: dict, n_gpus: int) -> tuple[int, ...]:
    seq = TOKENS_PER_RANK * n_gpus
    if case["docs"] is None:
        return (0, seq)
    if ":" not in case["docs"]:    # a list repeats whole: its cumulative lengths, independently
        lengths = [int(x) for x in case["docs"].split(",")] * (seq // 32)
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(lengths)]))
    return tuple(int(x) for x in bounds(case["docs"], seq, seed=3))


def packed(case: dict, n_gpus: int):
    from sim.layouts.packed import Packed

    return Packed(_bounds(case, n_gpus), n_gpus, case["layout"], case["window"], case["causal"])


def _inputs(case: dict, n_gpus: int):
    seq = TOKENS_PER_RANK * n_gpus
    g = torch.Generator().manual_seed(zlib.crc32(repr(sorted(case.items())).encode()) + n_gpus)
    q, dout = (torch.randn(BATCH, seq, HEADS, HEAD_DIM, generator=g) for _ in range(2))
    k, v = (torch.randn(BATCH, seq, KV_HEADS, HEAD_DIM, generator=g) for _ in range(2))
    return q, k, v, dout


def results(n_gpus: int) -> list[list[dict]]:
    """Per rank, per case: outputs and spans (one spawned group per GPU count, cached;
    every other case on tensors laid out heads first in memory)."""
    return common.results("packed", CASES, n_gpus, _inputs, packing=packed, timeout_s=120.0)


GPU_COUNTS = [pytest.param(n, marks=pytest.mark.slow, id=f"n{n}") for n in (2, 3)]


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("index", range(len(CASES)), ids=[_id(c) for c in CASES])
def test_output_and_gradients_match_float64_attention_under_the_document_mask(n_gpus, index):
    from hw.layouts import unshard

    case = CASES[index]
    per_rank = [rank_rows[index]["outputs"] for rank_rows in results(n_gpus)]
    got = [unshard([p[i] for p in per_rank], packed(case, n_gpus)) for i in range(4)]
    q, k, v, dout = _inputs(case, n_gpus)
    mask = document_mask(_bounds(case, n_gpus), case["causal"], case["window"])
    want = masked_attention(q, k, v, mask, dout)
    for g, x in zip(got, (q, q, k, v)):
        assert g.dtype == x.dtype and g.shape == x.shape
    err_out = max_err(got[0], want[0])
    err_grads = [max_err(g, w) for g, w in zip(got[1:], want[1:])]
    assert err_out <= TOL[0], f"out error {err_out:.3g}"
    assert max(err_grads) <= TOL[1], f"dq/dk/dv errors {err_grads}"


def _kept_pairs(case: dict, n_gpus: int) -> np.ndarray:
    """(N, N): the pairs the document mask keeps between rank r's queries and rank s's keys,
    counted on the full mask."""
    from hw.layouts import token_index

    mask = document_mask(_bounds(case, n_gpus), case["causal"], case["window"])
    tokens = token_index(packed(case, n_gpus), TOKENS_PER_RANK * n_gpus, n_gpus)
    return np.array([[int(mask[tokens[r]][:, tokens[s]].sum()) for s in range(n_gpus)] for r in range(n_gpus)])


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("index", range(len(CASES)), ids=[_id(c) for c in CASES])
def test_recorded_work_is_the_pairs_the_mask_keeps(n_gpus, index):
    case = CASES[index]
    spans = [s for rank_rows in results(n_gpus) for s in rank_rows[index]["spans"]]
    trace = Trace.from_dict({"format": "ringsim-trace", "version": 1, "source": "measured",
                             "world_size": n_gpus, "spans": spans})   # version 1: a list of spans
    kept = _kept_pairs(case, n_gpus)
    n = n_gpus
    for r, mine in enumerate(trace.by_rank()):
        comp = sorted((s for s in mine if s.stream == "compute"), key=lambda s: s.start_s)
        for phase, factor, base in (("fwd", 1.0, 0), ("bwd", 2.5, n)):
            spans_of = [s for s in comp if s.kind == phase]
            if case["scheme"] == "allgather":
                assert [s.step for s in spans_of] == [base]
                assert spans_of[0].flops == factor * PAIR_FLOPS * kept[r].sum()
                assert spans_of[0].q_chunks == (r,) and spans_of[0].kv_chunks == tuple(range(n))
                continue
            # one compute per block that keeps a pair, and none for the others
            owners = {s.step - base: (r - (s.step - base)) % n for s in spans_of}
            assert sorted(owners) == [k for k in range(n) if kept[r, (r - k) % n] > 0]
            for s in spans_of:
                owner = owners[s.step - base]
                assert s.flops == factor * PAIR_FLOPS * kept[r, owner]
                assert s.q_chunks == (r,) and s.kv_chunks == (owner,)


@pytest.mark.parametrize("layout", RING_LAYOUTS)
@pytest.mark.parametrize("window", [None, 1, 5])
@pytest.mark.parametrize("causal", [True, False])
def test_the_pieces_of_a_block_keep_exactly_the_masked_pairs(layout, window, causal):
    """Each block's pieces: disjoint rows of one document each, and the pairs they keep
    (dense, diagonal or masked) are the document mask's, pair by pair."""
    from hw.layouts import doc_pieces, token_index

    n_gpus = 3
    case = dict(docs="5,20,7", layout=layout, window=window, causal=causal)
    p = packed(case, n_gpus)
    mask = document_mask(p.bounds, causal, window)
    tokens = token_index(p, p.seq, n_gpus)
    for r in range(n_gpus):
        for owner in [*range(n_gpus), None]:
            keys = tokens[owner] if owner is not None else torch.arange(p.seq)
            want = mask[tokens[r]][:, keys]
            got = torch.zeros_like(want)
            for piece in doc_pieces(p, r, owner):
                rows = got[piece.q, piece.kv]
                assert not rows.any(), "pieces overlap"
                nq, nk = rows.shape
                if piece.mask is not None:
                    kept = piece.mask
                elif piece.causal:
                    kept = torch.ones(nq, nk, dtype=torch.bool).tril()
                else:
                    kept = torch.ones(nq, nk, dtype=torch.bool)
                assert kept.any(1).any() and piece.kept == int(kept.sum())
                got[piece.q, piece.kv] = kept
            assert torch.equal(got, want)
            doc_of_row = np.searchsorted(p.bounds, tokens[r].numpy(), side="right")
            for piece in doc_pieces(p, r, owner):
                assert len(set(doc_of_row[piece.q])) == 1


def test_allgather_refuses_packed_documents_on_other_layouts():
    from hw.config import RunConfig
    from sim.errors import RingsimError
    from sim.scenario.config import Workload

    w = Workload(seq=64, heads=2, kv_heads=2, head_dim=8, docs="5,20,7")
    with pytest.raises(RingsimError, match="contiguous or zigzag") as e:
        RunConfig(workload=w, n_gpus=2, layout="striped", scheme="allgather")
    assert "\n" not in str(e.value)
    RunConfig(workload=w, n_gpus=2, layout="contiguous", scheme="allgather")
