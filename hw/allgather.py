"""All-gather context parallelism (Llama 3; docs/design.md, "Beyond the ring") over
torch.distributed collectives.

Tokens lie in the zigzag layout: 2N chunks of c tokens, rank i holds chunks i and
2N-1-i (its first c rows, then its last c). Forward: K and V are all-gathered (one
`all_gather` of K and V stacked), put back in token order, and the rank attends its
queries against the whole K/V: without the mask one call of its 2c queries against all
S keys; causal, per query chunk a one causal call against chunk a (the diagonal) and
one dense call against chunks 0..a-1, merged (`hw.merge`). Backward: K/V gathered
again (the forward keeps nothing S-sized, as `sim.schemes.allgather` assumes), the same
pieces' gradients with the final output and log-sum-exp, dQ kept, and the dK/dV partial
sums (fp32, as the ring's) reduce-scattered (`reduce_scatter`, which gloo supports) to
the ranks that hold those tokens.

Packed documents (`packed`, docs/packed.md) run on the contiguous layout (the llama3
varlen variant: the packed sequence cut in N consecutive shards) or the per-document
zigzag (`sim.layouts.packed.rank_tokens`): the gathered shards are put in token order by the
tokens each rank holds, and the rank attends its queries against all keys per document
(`hw.layouts.doc_pieces`, rows of one document against that document's keys); the
dK/dV partial sums go back the same way.

Spans: the gather ("ag", step0), one compute ("fwd"/"bwd", step0), the reduce-scatter
("rs", step0 + 1); each collective's send/recv carry the bytes this rank sends and
receives: the gather sends its K/V shard to each of N-1 ranks and receives (N-1)/N of
the whole K/V, the ring's volume. Chunks are the zigzag's 2N, or with packed documents
each rank's shard (`sim.layouts.packed.chunks_of_rank`); a compute's work is its unmasked
pairs (`sim.layouts.packed.block_tables` with documents).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from hw.blocks import BlockOps
from hw.collective import nbytes, run_collective
from hw.comm import Ring
from hw.layouts import doc_pieces, token_index
from hw.merge import merge_, new_accumulators
from sim.errors import RingsimError
from sim.layouts import chunks_of_rank
from sim.layouts.packed import Packed, block_tables
from sim.scenario.config import Workload
from sim.scenario.quantities import BWD_FLOPS_FACTOR
from sim.schemes.allgather import PACKED_LAYOUTS

LAYOUT = "zigzag"


def check_layout(layout: str, packed: Packed | None = None) -> None:
    if packed is not None:
        if packed.layout not in PACKED_LAYOUTS:
            raise RingsimError(f"the allgather scheme runs packed documents on the contiguous or zigzag layout, "
                               f"got {packed.layout!r}")
    elif layout != LAYOUT:
        raise RingsimError(f"the allgather scheme runs on the zigzag layout (rank i holds chunks i and 2N-1-i), "
                           f"got {layout!r}")


def _hf(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)


def _pieces(r: int, n: int, c: int, causal: bool):
    """(query rows, key slice, causal, mask) of every call of rank r; total unmasked pairs."""
    if not causal:
        return [(slice(0, 2 * c), slice(0, 2 * n * c), False, None)], (2 * c) * (2 * n * c)
    out, pairs = [], 0
    for half, a in enumerate((r, 2 * n - 1 - r)):
        rows = slice(half * c, (half + 1) * c)
        out.append((rows, slice(a * c, (a + 1) * c), True, None))
        pairs += c * (c + 1) // 2
        if a > 0:
            out.append((rows, slice(0, a * c), False, None))
            pairs += a * c * c
    return out, pairs


def _calls(r: int, n: int, tokens: int, causal: bool, packed: Packed | None, device):
    """`_pieces` of rank r holding `tokens` queries; with packed documents one call per
    document it holds, against that document's gathered keys."""
    if packed is None:
        return _pieces(r, n, tokens // 2, causal)
    calls = [(p.q, p.kv, p.causal, p.mask) for p in doc_pieces(packed, r, None, device)]
    return calls, int(block_tables(packed).work[r].sum())


def _flops(q: torch.Tensor, pairs: int) -> float:
    b, _, h, d = q.shape
    return Workload(batch=b, seq=1, heads=h, kv_heads=1, head_dim=d).fwd_flops(pairs)


def _all_chunks(n: int, packed: Packed | None = None) -> tuple[int, ...]:
    return tuple(range(n if packed is not None else 2 * n))


def _held(n: int, packed: Packed | None) -> list[tuple[int, ...]]:
    """The chunks each rank holds (the trace's): zigzag's two, or its packed shard."""
    return [(r,) for r in range(n)] if packed is not None else chunks_of_rank(LAYOUT, n)


_GATHER_BUFFERS: dict[tuple, tuple[list[torch.Tensor], torch.Tensor]] = {}
"""The gather's receive buffers and the whole K/V in token order, kept by shape, dtype,
device and GPU count from one call to the next, as a GPU's caching allocator keeps
them: fresh on every call, the CPU allocator hands back untouched pages, and touching
the whole K/V of two ranks at 6144 tokens (fp32, 25 MB) took 9 ms to write alone and up
to 80 ms in a validation batch (docs/calibration.md). Each rank computes on
the whole K/V only until its next gather."""
_KEPT_SHAPES = 16


def _gather_buffers(local: torch.Tensor, n: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    key = (tuple(local.shape), local.dtype, local.device, n)
    kept = _GATHER_BUFFERS.get(key)
    if kept is None:
        if len(_GATHER_BUFFERS) >= _KEPT_SHAPES:
            _GATHER_BUFFERS.clear()
        shape = list(local.shape)
        shape[3] *= n
        kept = _GATHER_BUFFERS[key] = ([torch.empty_like(local) for _ in range(n)] if n > 1 else [],
                                       torch.empty(shape, dtype=local.dtype, device=local.device))
    return kept


def gather_kv(k: torch.Tensor, v: torch.Tensor, ring: Ring, step: int,
              q_chunks: tuple[int, ...], packed: Packed | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole K and V, (batch, kv_heads, S, d) in token order, from every rank's shard
    (views of buffers kept for the next call of the same shape: _GATHER_BUFFERS)."""
    n, r = ring.n_gpus, ring.rank
    local = torch.stack((_hf(k), _hf(v)))           # (2, b, kv_h, 2c, d), contiguous
    parts, full = _gather_buffers(local, n)
    if n == 1:
        parts = [local]
    else:
        mine = _held(n, packed)[r]
        others = tuple(sorted(set(_all_chunks(n, packed)) - set(mine)))
        run_collective(ring, "ag", lambda: dist.all_gather(parts, local, group=ring.group, async_op=True),
                       step=step, sent=(n - 1) * nbytes(local), received=(n - 1) * nbytes(local),
                       send_chunks=mine, recv_chunks=others, q_chunks=q_chunks, kv_chunks=others)
    if packed is not None:
        tokens = token_index(packed, packed.seq, n).to(full.device)
        for j in range(n):
            full.index_copy_(3, tokens[j], parts[j])
        return full[0], full[1]
    c = local.shape[3] // 2
    torch.cat([parts[j][:, :, :, :c] if j < n else parts[2 * n - 1 - j][:, :, :, c:] for j in range(2 * n)],
              dim=3, out=full)
    return full[0], full[1]


def allgather_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, ring: Ring, layout: str,
                      causal: bool, ops: BlockOps, step0: int = 0, on_step=None,
                      packed: Packed | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's output (q's dtype and shape) and log-sum-exp (fp32, (b, h, t)).

    `packed`: the documents of a packed sequence (its layout is the one sharded by);
    None: one document."""
    check_layout(layout, packed)
    n, r = ring.n_gpus, ring.rank
    mine = _held(n, packed)[r]
    if on_step is not None:
        on_step(step0)
    kf, vf = gather_kv(k, v, ring, step0, mine, packed)
    qh = _hf(q)
    pieces, pairs = _calls(r, n, q.shape[1], causal, packed, q.device)
    t0 = ring.clock.mark()
    if not causal and packed is None:
        out, lse = ops.forward(qh, kf, vf, False)
    else:
        out, lse = new_accumulators(q.shape, q.device)
        done = set()
        for rows, keys, diag, mask in pieces:
            b_out, b_lse = ops.forward(qh[:, :, rows], kf[:, :, keys], vf[:, :, keys], diag, mask)
            merge_(out[:, :, rows], lse[:, :, rows], b_out, b_lse, first=rows.start not in done)
            done.add(rows.start)
    if ring.recorder is not None:
        ring.recorder.compute("fwd", step0, t0, ring.clock.mark(), _flops(q, pairs), mine,
                              _all_chunks(n, packed))
    return out.transpose(1, 2).to(q.dtype), lse


def allgather_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       out: torch.Tensor, lse: torch.Tensor, *, ring: Ring, layout: str, causal: bool,
                       ops: BlockOps, step0: int = 0, on_step=None,
                       packed: Packed | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of this rank's shard (input dtype), given the forward's out and lse."""
    check_layout(layout, packed)
    n, r = ring.n_gpus, ring.rank
    c = q.shape[1] // 2
    mine = _held(n, packed)[r]
    if on_step is not None:
        on_step(step0)
    kf, vf = gather_kv(k, v, ring, step0, mine, packed)
    qh, outh, douth = _hf(q), _hf(out), _hf(dout)
    pieces, pairs = _calls(r, n, q.shape[1], causal, packed, q.device)
    t0 = ring.clock.mark()
    dq = torch.zeros(qh.shape, dtype=torch.float32, device=q.device)
    dkv = torch.zeros((2, *kf.shape), dtype=torch.float32, device=q.device)
    for rows, keys, diag, mask in pieces:
        g_q, g_k, g_v = ops.backward(douth[:, :, rows], qh[:, :, rows], kf[:, :, keys], vf[:, :, keys],
                                     outh[:, :, rows], lse[:, :, rows], diag, mask)
        dq[:, :, rows] += g_q
        dkv[0][:, :, keys] += g_k
        dkv[1][:, :, keys] += g_v
    if ring.recorder is not None:
        ring.recorder.compute("bwd", step0, t0, ring.clock.mark(),
                              BWD_FLOPS_FACTOR * _flops(q, pairs), mine, _all_chunks(n, packed))
    if packed is not None:   # the partial sums of the tokens rank j holds, for every j
        tokens = token_index(packed, packed.seq, n).to(dkv.device)
        share = [dkv.index_select(3, tokens[j]) for j in range(n)]
    else:                    # the partial sums of rank j's tokens (chunks j and 2N-1-j), for every j
        share = [torch.cat((dkv[:, :, :, j * c:(j + 1) * c], dkv[:, :, :, (2 * n - 1 - j) * c:(2 * n - j) * c]),
                           dim=3) for j in range(n)]
    if n == 1:
        mine_dkv = share[0]
    else:
        mine_dkv = torch.empty_like(share[0])
        others = tuple(sorted(set(_all_chunks(n, packed)) - set(mine)))
        run_collective(ring, "rs", lambda: dist.reduce_scatter(mine_dkv, share, group=ring.group, async_op=True),
                       step=step0 + 1, sent=(n - 1) * nbytes(mine_dkv), received=(n - 1) * nbytes(mine_dkv),
                       send_chunks=others, recv_chunks=mine, q_chunks=mine, kv_chunks=mine)
    return (_hf(dq).to(q.dtype), _hf(mine_dkv[0]).to(k.dtype), _hf(mine_dkv[1]).to(v.dtype))
