"""Shared runner of the kernel tests (ring, all-gather, Ulysses): every case of a GPU
count in one spawned group (start-up paid once), each rank returning its outputs and spans."""

from __future__ import annotations

import zlib

import torch

BATCH, HEADS, HEAD_DIM, PER_CHUNK = 2, 12, 16, 3
TOL = (1e-5, 1e-4)   # fp32 (forward, gradients), absolute, against float64


def inputs(case: dict, n_gpus: int):
    seq = 2 * n_gpus * PER_CHUNK
    g = torch.Generator().manual_seed(zlib.crc32(repr(sorted(case.items())).encode()) + n_gpus)
    q, dout = (torch.randn(BATCH, seq, HEADS, HEAD_DIM, generator=g) for _ in range(2))
    k, v = (torch.randn(BATCH, seq, case["kv_heads"], HEAD_DIM, generator=g) for _ in range(2))
    return q, k, v, dout


def run_cases(ctx, cases: list[dict], make_inputs=inputs, packing=None) -> list[dict]:
    """Run in every rank: each case forward (steps from 0) and backward (steps from N),
    on `make_inputs(case, n_gpus)` (a case names its scheme, ring by default, its dtype and
    block implementation); `packing(case, n_gpus)`: the case's packed documents
    (sim.layouts.packed.Packed), which shard the tensors and reach the kernels."""
    from hw.blocks import select_block_ops
    from hw.comm import Ring
    from hw.kernels import kernels
    from hw.layouts import shard
    from hw.ring import heads_first_memory
    from hw.timing import CpuClock, Recorder

    torch.set_num_threads(1)
    n, r = ctx.n_gpus, ctx.rank
    rows = []
    for i, case in enumerate(cases):
        p = None if packing is None else packing(case, n)
        mine = [shard(x, case["layout"] if p is None else p, n, r) for x in make_inputs(case, n)]
        if i % 2:
            mine = [heads_first_memory(x) for x in mine]
        before = [x.clone() for x in mine]
        forward, backward = kernels(case.get("scheme", "ring"))
        clock = CpuClock(30.0)
        rec = Recorder(clock, r)
        ring = Ring(r, n, ctx.group, clock, rec)
        ops = select_block_ops("cpu", case.get("dtype", "fp32"), mine[0].shape[-1], case.get("block_impl", "auto"))
        args = dict(ring=ring, layout=case["layout"], causal=case["causal"], ops=ops)
        if p is not None:
            args["packed"] = p
        ctx.barrier()
        clock.origin = clock.mark()
        out, state = forward(*mine[:3], **args)
        grads = backward(mine[3], *mine[:3], out, state, step0=n, **args)
        clock.close()
        rows.append({"outputs": [x.contiguous() for x in (out, *grads)],
                     "spans": [s.to_dict() for s in rec.spans()],
                     "inputs_kept": all(torch.equal(a, b) for a, b in zip(mine, before))})
    return rows


class Solo:
    rank, n_gpus, group = 0, 1, None

    def barrier(self) -> None:
        pass


_RESULTS: dict[tuple[str, int], list[list[dict]]] = {}


def results(name: str, cases: list[dict], n_gpus: int, make_inputs=inputs, packing=None,
            timeout_s: float = 60.0) -> list[list[dict]]:
    """Per rank, per case: outputs and spans (one spawned group per name and GPU count, cached)."""
    key = (name, n_gpus)
    if key not in _RESULTS:
        if n_gpus == 1:
            _RESULTS[key] = [run_cases(Solo(), cases, make_inputs, packing)]
        else:
            from hw.spawn import spawn
            _RESULTS[key] = spawn(run_cases, n_gpus, args=(cases, make_inputs, packing), timeout_s=timeout_s)
    return _RESULTS[key]


def check_exact(per_rank_results: list[list[dict]], index: int, case: dict, n_gpus: int) -> None:
    from hw.layouts import unshard
    from tests.hw.conftest import max_err, reference_attention

    per_rank = [rank_rows[index]["outputs"] for rank_rows in per_rank_results]
    got = [unshard([p[i] for p in per_rank], case["layout"]) for i in range(4)]
    q, k, v, dout = inputs(case, n_gpus)
    want = reference_attention(q, k, v, case["causal"], dout)
    for g, x in zip(got, (q, q, k, v)):
        assert g.dtype == x.dtype and g.shape == x.shape
    assert all(rank_rows[index]["inputs_kept"] for rank_rows in per_rank_results)
    err_out = max_err(got[0], want[0])
    err_grads = [max_err(g, w) for g, w in zip(got[1:], want[1:])]
    assert err_out <= TOL[0], f"out error {err_out:.3g}"
    assert max(err_grads) <= TOL[1], f"dq/dk/dv errors {err_grads}"


def trace_of(per_rank_results: list[list[dict]], index: int, n_gpus: int):
    from sim.trace.format import Trace

    spans = [s for rank_rows in per_rank_results for s in rank_rows[index]["spans"]]
    return Trace.from_dict({"format": "ringsim-trace", "version": 1, "source": "measured",
                            "world_size": n_gpus, "spans": spans})   # version 1: a list of spans


def check_no_overlap(trace) -> None:
    for r, spans in enumerate(trace.by_rank()):
        comp = sorted((s for s in spans if s.stream == "compute"), key=lambda s: s.start_s)
        for a, b in zip(comp, comp[1:]):
            assert a.end_s <= b.start_s, f"rank {r}: compute spans overlap"
        for w in (s for s in spans if s.stream == "wait"):
            for c in comp:
                assert w.end_s <= c.start_s or w.start_s >= c.end_s, f"rank {r}: wait overlaps compute"
