"""The inference kernels (hw.inference: prefill over a cached prefix, pass-KV, pass-Q and
all-gather; hw.inference_decode: decode over a sharded cache) against attention over the
whole context in float64 (torch's scaled_dot_product_attention with the mask, and the
log-sum-exp of the masked scores), on 1, 2, 3 and 5 gloo ranks: every new-token layout,
cache layout, GQA, full and causal; decode batches of requests of different lengths,
both cache layouts and both merges.

One spawned group per rank count runs every case (start-up paid once); each rank
returns its shard's output, log-sum-exp and spans.
"""

from __future__ import annotations

import itertools
import math
import zlib

import pytest
import torch

from tests.hw.conftest import max_err

BATCH, HEADS, HEAD_DIM, PER_CHUNK = 2, 4, 8, 2
DECODE_HEADS = 6           # 2 and 3 divide them, 5 does not: the all-to-all's last share is padded
TOL = 1e-5                 # fp32, absolute, against float64 (outputs and log-sum-exp)

PREFILL = [dict(kind="prefill", scheme=s, layout=lay, cache=c, kv_heads=kvh, causal=causal)
           for s, lay, c, kvh, causal in itertools.product(
               ("pass-kv", "pass-q", "allgather"), ("contiguous", "striped", "zigzag"),
               (None, "contiguous", "zigzag", "striped"), (HEADS, 2), (True, False))]
DECODE = [dict(kind="decode", layout=lay, merge=m, kv_heads=kvh, new=s)
          for lay, m, kvh, s in itertools.product(("contiguous", "round-robin"), ("all-to-all", "all-gather"),
                                                 (DECODE_HEADS, 2), (1, 3))]
# bf16 on a few: the kernels merge in fp32 whatever the inputs' dtype
BF16 = ([dict(kind="prefill", scheme=sch, layout="zigzag", cache="zigzag", kv_heads=2, causal=True, dtype="bf16")
         for sch in ("pass-kv", "pass-q", "allgather")]
        + [dict(kind="decode", layout="round-robin", merge=m, kv_heads=2, new=3, dtype="bf16")
           for m in ("all-to-all", "all-gather")])
CASES = PREFILL + DECODE + BF16
BF16_TOL = 2e-2
"""bf16 against float64: the inputs are rounded to bf16 alike on both sides, the output once
more when stored (|out| < 2 here: 2^-8 x 2 = 8e-3), the partial results merged in fp32."""


def _dtype(case: dict) -> torch.dtype:
    return torch.bfloat16 if case.get("dtype") == "bf16" else torch.float32


def _tol(case: dict) -> float:
    return BF16_TOL if case.get("dtype") == "bf16" else TOL


def _gen(case: dict, n: int) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(sorted(case.items())).encode()) + n)


def cached_tokens(n: int) -> int:
    """A prefix no layout divides evenly on 2, 3 or 5 ranks: some hold a token more."""
    return 6 * n + 1


def cache_shard(cached: int, n: int, layout: str, rank: int) -> torch.Tensor:
    """The positions of the prefix rank holds (boundaries at floor(i P / pieces), as the
    cache was written: contiguous N pieces, zigzag 2N, striped token t on rank t mod N)."""
    t = torch.arange(cached)
    if layout == "striped":
        return t[rank::n]
    pieces = n if layout == "contiguous" else 2 * n
    edge = [i * cached // pieces for i in range(pieces + 1)]
    if layout == "contiguous":
        return t[edge[rank]:edge[rank + 1]]
    return torch.cat((t[edge[rank]:edge[rank + 1]], t[edge[2 * n - 1 - rank]:edge[2 * n - rank]]))


def prefill_inputs(case: dict, n: int):
    """q (b, T, h, d) of the new tokens; k, v (b, P + T, kv_h, d): cached, then new."""
    new = 2 * n * PER_CHUNK
    cached = 0 if case["cache"] is None else cached_tokens(n)
    g = _gen(case, n)
    q = torch.randn(BATCH, new, HEADS, HEAD_DIM, generator=g).to(_dtype(case))
    k, v = (torch.randn(BATCH, cached + new, case["kv_heads"], HEAD_DIM, generator=g).to(_dtype(case))
            for _ in range(2))
    return q, k, v, cached


PROMPTS, GENERATED = (1, 3, 11, 17), 2
"""Prompts of different lengths (shorter than the ranks: some hold none of a prompt),
each followed by 2 generated tokens."""


def decode_inputs(case: dict, n: int):
    """q (requests, new, h, d); per request k, v (length, kv_h, d)."""
    g = _gen(case, n)
    lengths = [p + GENERATED for p in PROMPTS]
    q = torch.randn(len(lengths), case["new"], DECODE_HEADS, HEAD_DIM, generator=g).to(_dtype(case))
    kv = [tuple(torch.randn(length, case["kv_heads"], HEAD_DIM, generator=g).to(_dtype(case)) for _ in range(2))
          for length in lengths]
    return q, kv


def run_cases(ctx, cases: list[dict]) -> list[dict]:
    """Run in every rank: each case's kernel on this rank's shard of its inputs."""
    from hw.blocks import select_block_ops
    from hw.comm import Ring
    from hw.inference import Prefill, prefill_kernel
    from hw.inference_decode import DecodeBatch, decode_forward
    from hw.layouts import shard
    from hw.timing import CpuClock, Recorder

    torch.set_num_threads(1)
    n, r = ctx.n_gpus, ctx.rank
    rows = []
    for case in cases:
        ops = select_block_ops("cpu", case.get("dtype", "fp32"), HEAD_DIM)
        clock = CpuClock(30.0)
        rec = Recorder(clock, r)
        ring = Ring(r, n, ctx.group, clock, rec)
        ctx.barrier()
        clock.origin = clock.mark()
        if case["kind"] == "prefill":
            q, k, v, cached = prefill_inputs(case, n)
            new = q.shape[1]
            qs, kn, vn = (shard(x, case["layout"], n, r) for x in (q, k[:, cached:], v[:, cached:]))
            layout = case["cache"] or "contiguous"
            kc, vc = (x[:, cache_shard(cached, n, layout, r)] for x in (k, v))
            counts = tuple(len(cache_shard(cached, n, layout, j)) for j in range(n))
            pf = Prefill(n_gpus=n, layout=case["layout"], new_per_rank=new // n, cached=counts,
                         causal=case["causal"])
            out, lse = prefill_kernel(case["scheme"])(qs, kn, vn, kc, vc, ring=ring, pf=pf, ops=ops)
        else:
            q, kv = decode_inputs(case, n)
            batch = DecodeBatch(PROMPTS, GENERATED, case["new"], n, case["layout"])
            held = batch.held(r)
            k = torch.cat([kv[i][0][torch.from_numpy(pos)] for i, pos in enumerate(held)])
            v = torch.cat([kv[i][1][torch.from_numpy(pos)] for i, pos in enumerate(held)])
            if case["new"] == 3:     # heads-first in memory, as the runner lays the shard out
                k, v = (x.transpose(0, 1).contiguous().transpose(0, 1) for x in (k, v))
            out, lse = decode_forward(q, k, v, ring=ring, batch=batch, merge=case["merge"], ops=ops)
        clock.close()
        rows.append({"out": out.contiguous(), "lse": lse.contiguous(), "spans": [s.to_dict() for s in rec.spans()]})
    return rows


_RESULTS: dict[int, list[list[dict]]] = {}


def results(n: int) -> list[list[dict]]:
    """Per rank, per case (one spawned group per rank count, cached)."""
    if n not in _RESULTS:
        if n == 1:
            from tests.hw.test_schemes_common import Solo
            _RESULTS[n] = [run_cases(Solo(), CASES)]
        else:
            from hw.spawn import spawn
            _RESULTS[n] = spawn(run_cases, n, args=(CASES,), timeout_s=120.0)
    return _RESULTS[n]


def reference(q, k, v, mask):
    """Output (b, t, h, d) and log-sum-exp (b, h, t) in float64; mask (t, keys), True: kept."""
    qh, kh, vh = (x.double().transpose(1, 2) for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask,
                                                           enable_gqa=qh.shape[1] != kh.shape[1])
    g = qh.shape[1] // kh.shape[1]
    scores = qh @ kh.repeat_interleave(g, dim=1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return out.transpose(1, 2), lse


def _gpus(n: int):
    return pytest.param(n, marks=[pytest.mark.slow] if n > 1 else [], id=f"n{n}")


GPU_COUNTS = [_gpus(n) for n in (1, 2, 3, 5)]


def _id(c: dict) -> str:
    bf16 = "-bf16" if c.get("dtype") == "bf16" else ""
    if c["kind"] == "prefill":
        return (f"{c['scheme']}-{c['layout']}-cache-{c['cache'] or 'none'}-kv{c['kv_heads']}-"
                f"{'causal' if c['causal'] else 'full'}{bf16}")
    return f"decode-{c['layout']}-{c['merge']}-kv{c['kv_heads']}-new{c['new']}{bf16}"


PREFILL_IDX = [i for i, c in enumerate(CASES) if c["kind"] == "prefill"]
DECODE_IDX = [i for i, c in enumerate(CASES) if c["kind"] == "decode"]


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("index", PREFILL_IDX, ids=[_id(CASES[i]) for i in PREFILL_IDX])
def test_prefill_matches_float64_attention_over_the_whole_context(n_gpus, index):
    from hw.layouts import unshard

    case = CASES[index]
    per_rank = [rows[index] for rows in results(n_gpus)]
    out = unshard([p["out"] for p in per_rank], case["layout"])
    lse = unshard([p["lse"] for p in per_rank], case["layout"], dim=2)
    q, k, v, cached = prefill_inputs(case, n_gpus)
    new = q.shape[1]
    pos_q = cached + torch.arange(new)[:, None]
    mask = (torch.arange(cached + new)[None, :] <= pos_q) if case["causal"] else torch.ones(new, cached + new,
                                                                                              dtype=torch.bool)
    want_out, want_lse = reference(q, k, v, mask)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (BATCH, HEADS, new) and lse.dtype == torch.float32
    assert max_err(out, want_out) <= _tol(case)
    assert max_err(lse, want_lse) <= _tol(case)


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("index", DECODE_IDX, ids=[_id(CASES[i]) for i in DECODE_IDX])
def test_decode_matches_float64_attention_per_request(n_gpus, index):
    case = CASES[index]
    q, kv = decode_inputs(case, n_gpus)
    s = case["new"]
    want = []
    for i, (k, v) in enumerate(kv):
        length = k.shape[0]
        mask = torch.arange(length)[None, :] <= (length - s + torch.arange(s))[:, None]
        want.append(reference(q[i:i + 1], k[None], v[None], mask))
    want_out = torch.cat([w[0] for w in want])
    want_lse = torch.cat([w[1] for w in want])
    share = -(-DECODE_HEADS // n_gpus)
    for r, rows in enumerate(results(n_gpus)):
        got = rows[index]
        assert got["out"].shape == want_out.shape and got["out"].dtype == q.dtype
        assert max_err(got["out"], want_out) <= _tol(case)
        if case["merge"] == "all-to-all":     # rank r merged ceil(H/N) heads, fewer at the end
            heads = slice(min(r * share, DECODE_HEADS), min((r + 1) * share, DECODE_HEADS))
        else:
            heads = slice(None)
        assert got["lse"].shape == want_lse[:, heads].shape
        if got["lse"].numel():               # 6 heads on 5 ranks: the last two merge none
            assert max_err(got["lse"], want_lse[:, heads]) <= _tol(case)


def _trace(n: int, index: int):
    from tests.hw.test_schemes_common import trace_of

    return trace_of([[rows[index]] for rows in results(n)], 0, n)


PASS_Q_ZIGZAG = [i for i in PREFILL_IDX if CASES[i]["scheme"] == "pass-q" and CASES[i]["layout"] == "zigzag"
                 and CASES[i]["kv_heads"] == 2 and "dtype" not in CASES[i]]


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("index", PASS_Q_ZIGZAG, ids=[_id(CASES[i]) for i in PASS_Q_ZIGZAG])
def test_pass_q_trace_moves_queries_then_partial_results(n_gpus, index):
    """Queries travel N - 1 hops of T/N tokens x heads; the partial results go home in one
    all-to-all of N - 1 messages of (output, log-sum-exp) in fp32; the work is every
    unmasked pair once, counted independently here (positions of each rank's tokens)."""
    from hw.inference import Q_KIND
    from hw.layouts import token_index
    from tests.hw.test_schemes_common import check_no_overlap

    case = CASES[index]
    n = n_gpus
    trace = _trace(n, index)
    check_no_overlap(trace)
    new = 2 * n * PER_CHUNK
    cached = 0 if case["cache"] is None else cached_tokens(n)
    t = new // n
    q_bytes = BATCH * t * HEADS * HEAD_DIM * 4
    result_bytes = BATCH * HEADS * t * (HEAD_DIM + 1) * 4
    pos = token_index(case["layout"], new, n)
    for r, spans in enumerate(trace.by_rank()):
        sends = sorted((s.kind, s.step, s.bytes) for s in spans if s.stream == "send")
        want = [(Q_KIND, k, q_bytes) for k in range(n - 1)] + ([("a2a", n, (n - 1) * result_bytes)] if n > 1 else [])
        assert sends == sorted(want)
        flops = sum(s.flops for s in spans if s.stream == "compute")
        # rank r's keys: its cached shard (all visible) and its new tokens, met by every query
        q_pos = pos.reshape(-1)
        mine = pos[r]
        new_pairs = int((mine[None, :] <= q_pos[:, None]).sum()) if case["causal"] else new * t
        pairs = new * len(cache_shard(cached, n, case["cache"] or "contiguous", r)) + new_pairs
        assert flops == 4 * HEAD_DIM * pairs * HEADS * BATCH


def test_decode_refuses_queries_of_another_batch():
    from hw.blocks import select_block_ops
    from hw.comm import Ring
    from hw.inference_decode import DecodeBatch, decode_forward
    from hw.timing import CpuClock
    from sim.errors import RingsimError

    ring = Ring(0, 3, None, CpuClock(1.0))
    batch = DecodeBatch((5,), 0, 1, 3)
    q = torch.zeros(2, 1, 4, 8)
    with pytest.raises(RingsimError, match="do not match") as e:
        decode_forward(q, torch.zeros(2, 4, 8), torch.zeros(2, 4, 8), ring=ring, batch=batch, merge="all-gather",
                       ops=select_block_ops("cpu", "fp32", 8))
    assert "\n" not in str(e.value)


def test_decode_batch_refuses_requests_shorter_than_their_new_tokens():
    from hw.inference_decode import DecodeBatch
    from sim.errors import RingsimError

    with pytest.raises(RingsimError, match="cannot hold"):
        DecodeBatch((2, 9), 0, 3, 2)


def test_held_tokens_cover_every_position_once():
    import numpy as np

    from hw.inference_decode import held_tokens

    for layout in ("contiguous", "round-robin"):
        for n, prompt, generated in ((3, 7, 0), (5, 3, 4), (2, 10, 1)):
            got = np.sort(np.concatenate([held_tokens(layout, prompt, generated, n, r) for r in range(n)]))
            assert got.tolist() == list(range(prompt + generated))
    # contiguous: the generated tokens all on the last rank
    assert held_tokens("contiguous", 7, 3, 3, 2).tolist() == [4, 5, 6, 7, 8, 9]
