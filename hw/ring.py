"""Ring Attention forward and backward over torch.distributed point-to-point operations.

Forward (docs/design.md, facts 2-3): at step k rank r holds the K/V block of rank
(r - k) mod N. It posts the send of that block to r + 1 and the receive of the next
from r - 1 (two buffers: the block computed on and the one arriving), computes its
queries against the block piece by piece (`hw.layouts`: fully masked blocks are
skipped, diagonal pieces use the causal mask), merges each piece into its (out, lse)
accumulators (`hw.merge`; the own block's result, which covers every row, is the
first accumulator), then waits for both transfers.

Backward: K/V travel as in the forward. Each block's dK/dV accumulator (fp32) travels
one hop behind it: after a rank computes its share of the block's gradient it adds it
to the accumulator received from r - 1 and sends the sum to r + 1; after N hops the
accumulator is back with the block's owner, complete (the owner's own share starts
it). dQ stays local. Every piece's backward uses the final output and log-sum-exp of
its query rows, so its gradient is its exact share.

Tensors are shards in the model's layout (batch, tokens, heads, head_dim), tokens in the
layout's order (`hw.layouts.shard`), of any strides. Heads-first in memory
(`heads_first_memory`: (batch, heads, tokens, head_dim) contiguous, as torch's
attention takes them) is the fast case: K and V then travel as two messages from where
they lie, and the fused CPU operator runs 3-5% faster than on tokens-first memory.
Outputs, gradients and dK/dV messages are tokens-first in memory, as the fused CPU
operators write them, so that results are adopted and added without transposing
copies. Steps are numbered from `step0` (the backward of a forward-and-backward run
starts at N, as in the simulator); spans go to the ring's recorder when it has one,
with work counted as in `sim.layouts.exact_work`.

Packed documents (`packed`, docs/packed.md): shards hold `sim.layouts.packed.rank_tokens`, and
a block is computed per document both ranks hold, as a varlen kernel computes it
(`hw.layouts.doc_pieces`: dense, diagonal or with an explicit mask); blocks whose mask
keeps no pair are skipped, and the work recorded is `sim.layouts.packed.block_tables`'s, each
rank's shard its one chunk of the trace. Everything else, the travel of K/V and of the
dK/dV accumulators included, is the same.
"""

from __future__ import annotations

from typing import Callable

import torch

from hw.blocks import BlockOps
from hw.comm import Ring
from hw.layouts import doc_pieces
from hw.merge import merge_, new_accumulators
from sim.layouts import block_pieces, chunks_of_rank, exact_work
from sim.layouts.base import ALL
from sim.layouts.packed import Packed, block_tables
from sim.layouts.packed import chunks_of_rank as packed_chunks
from sim.scenario.config import Workload
from sim.scenario.quantities import BWD_FLOPS_FACTOR

StepHook = Callable[[int], None]


def _pair_flops(q: torch.Tensor) -> float:
    """Forward FLOPs of one unmasked (query, key) pair over all heads and batch items."""
    b, _, h, d = q.shape
    return Workload(batch=b, seq=1, heads=h, kv_heads=1, head_dim=d).fwd_flops(1)


def heads_first_memory(x: torch.Tensor) -> torch.Tensor:
    """x (batch, tokens, heads, d), same values, laid out (batch, heads, tokens, d) in memory."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def _heads_first(x: torch.Tensor) -> torch.Tensor:
    """(batch, tokens, heads, d) -> the (batch, heads, tokens, d) view the operators take."""
    return x.transpose(1, 2)


def _kv_buffers(k: torch.Tensor, v: torch.Tensor, n: int) -> Callable[[int], tuple[torch.Tensor, ...]]:
    """The K/V block a rank holds at each step: its own, then two receive buffers in turn.

    Blocks travel as K and V heads-first and contiguous: the own block is a view of k
    and v when they lie so in memory (a copy otherwise) and is only ever sent, never
    received into.
    """
    own = (_heads_first(k).contiguous(), _heads_first(v).contiguous())
    recv = [tuple(torch.empty_like(x) for x in own) for _ in range(min(n - 1, 2))]
    return lambda step: own if step == 0 else recv[(step - 1) % 2]


def _covers_all_rows(pieces) -> bool:
    return len(pieces) == 1 and pieces[0].q == ALL


def _blocks(layout: str, n: int, c: int, causal: bool, packed: Packed | None, device):
    """What the ring computes on n ranks of c tokens: each rank's chunks (the trace's),
    each block's unmasked pairs, and the pieces of rank r's queries against the block of
    rank `owner` (a function of (r, owner)): the layout's (sim.layouts) for one
    document, per document for packed ones."""
    if packed is None:
        return (chunks_of_rank(layout, n), exact_work(layout, c * n, n, causal),
                lambda r, owner: block_pieces(layout, r, owner, n, c, causal))
    return packed_chunks(n), block_tables(packed).work, lambda r, owner: doc_pieces(packed, r, owner, device)


def _mask(piece):
    """The explicit mask a piece of packed documents may carry (hw.layouts.DocPiece)."""
    return getattr(piece, "mask", None)


def ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, ring: Ring, layout: str,
                 causal: bool, ops: BlockOps, step0: int = 0, on_step: StepHook | None = None,
                 packed: Packed | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's attention output (q's dtype, q's shape) and log-sum-exp (fp32, (b, h, t)).

    `packed`: the documents of a packed sequence (its layout is the one sharded by);
    None: one document."""
    n, r = ring.n_gpus, ring.rank
    c = q.shape[1]
    chunks, pairs, pieces_of = _blocks(layout, n, c, causal, packed, q.device)
    work = pairs * _pair_flops(q)
    out = lse = None
    qh = _heads_first(q)
    block_at = _kv_buffers(k, v, n)
    comm = ring.comm("kv")
    for step in range(n):
        if on_step is not None:
            on_step(step0 + step)
        owner = (r - step) % n
        cur = block_at(step)
        if step < n - 1:
            comm.post(cur, block_at(step + 1), step=step0 + step, send_chunks=chunks[owner],
                      recv_chunks=chunks[(owner - 1) % n], holds=(step0 + step, chunks[r], chunks[owner]))
        pieces = pieces_of(r, owner)
        if pieces:
            t0 = ring.clock.mark()
            kh, vh = cur
            for p in pieces:
                b_out, b_lse = ops.forward(qh[:, :, p.q], kh[:, :, p.kv], vh[:, :, p.kv], p.causal, _mask(p))
                if out is None and _covers_all_rows(pieces):
                    # the own block (step 0) covers every query row: its result, in
                    # fp32, is the accumulator (merges work in place on any layout)
                    out, lse = b_out.float(), b_lse
                    continue
                if out is None:
                    out, lse = new_accumulators(q.shape, q.device)
                merge_(out[:, :, p.q], lse[:, :, p.q], b_out, b_lse)
            if ring.recorder is not None:
                ring.recorder.compute("fwd", step0 + step, t0, ring.clock.mark(),
                                      float(work[r, owner]), chunks[r], chunks[owner])
        if step < n - 1:
            comm.wait(step=step0 + step + 1, q_chunks=chunks[r], kv_chunks=chunks[(owner - 1) % n])
    if out is None:  # every block fully masked: only possible with zero tokens
        out, lse = new_accumulators(q.shape, q.device)
    return out.transpose(1, 2).to(q.dtype), lse


def _add_(acc: torch.Tensor | None, part: torch.Tensor, rows: slice, like: torch.Tensor) -> torch.Tensor:
    """acc[:, :, rows] += part in fp32, starting from `part` itself when it covers every row."""
    if acc is None:
        if rows == ALL and part.dtype == torch.float32:
            return part
        acc = torch.zeros(like.shape, dtype=torch.float32, device=like.device)
    acc[:, :, rows] += part
    return acc


def ring_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, *, ring: Ring, layout: str, causal: bool,
                  ops: BlockOps, step0: int = 0, on_step: StepHook | None = None,
                  packed: Packed | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of this rank's shard (input dtype), given the forward's out and lse."""
    n, r = ring.n_gpus, ring.rank
    c = q.shape[1]
    chunks, pairs, pieces_of = _blocks(layout, n, c, causal, packed, q.device)
    work = pairs * (BWD_FLOPS_FACTOR * _pair_flops(q))
    qh, outh, douth = _heads_first(q), _heads_first(out), _heads_first(dout)
    dq = None   # fp32, heads-first view; from the first piece that covers every row
    block_at = _kv_buffers(k, v, n)
    kv_shape = block_at(0)[0].shape
    # dK/dV accumulators arriving from r - 1 (fp32, K and V as two tensors), two in turn
    dkv_in = [(_tokens_first_fp32(kv_shape, q.device), _tokens_first_fp32(kv_shape, q.device))
              for _ in range(2 if n > 1 else 0)]
    kv_comm, dkv_comm = ring.comm("kv"), ring.comm("dkv")
    acc: tuple[torch.Tensor, torch.Tensor] | None = None
    for step in range(n):
        if on_step is not None:
            on_step(step0 + step)
        owner = (r - step) % n
        cur = block_at(step)
        if step < n - 1:
            kv_comm.post(cur, block_at(step + 1), step=step0 + step, send_chunks=chunks[owner],
                         recv_chunks=chunks[(owner - 1) % n], holds=(step0 + step, chunks[r], chunks[owner]))
        pieces = pieces_of(r, owner)
        shares = []
        if pieces:
            t0 = ring.clock.mark()
            kh, vh = cur
            for p in pieces:
                g_q, g_k, g_v = ops.backward(douth[:, :, p.q], qh[:, :, p.q], kh[:, :, p.kv],
                                             vh[:, :, p.kv], outh[:, :, p.q], lse[:, :, p.q],
                                             p.causal, _mask(p))
                dq = _add_(dq, g_q, p.q, qh)
                shares.append((p.kv, g_k, g_v))
            if ring.recorder is not None:
                ring.recorder.compute("bwd", step0 + step, t0, ring.clock.mark(),
                                      float(work[r, owner]), chunks[r], chunks[owner])
        if step == 0:   # the own block's accumulator starts from this rank's share
            acc = _first_dkv(shares, kv_shape, q.device)
        else:           # the accumulator of this block, from rank r - 1
            dkv_comm.wait(step=step0 + step, q_chunks=chunks[r], kv_chunks=chunks[owner])
            acc = dkv_in[(step - 1) % 2]
            for sl, g_k, g_v in shares:
                acc[0][:, :, sl] += g_k
                acc[1][:, :, sl] += g_v
        if n > 1:  # tokens-first messages: contiguous views of the accumulators
            # posted on its own, before the next step's compute (held by it on gloo)
            nxt = (step0 + step + 1, chunks[r], chunks[(owner - 1) % n]) if step < n - 1 else None
            dkv_comm.post([_heads_first(x) for x in acc], [_heads_first(x) for x in dkv_in[step % 2]],
                          step=step0 + step, send_chunks=chunks[owner],
                          recv_chunks=chunks[(owner - 1) % n], holds=nxt)
        if step < n - 1:
            kv_comm.wait(step=step0 + step + 1, q_chunks=chunks[r], kv_chunks=chunks[(owner - 1) % n])
    if n > 1:  # our own block's accumulator, home after N hops
        dkv_comm.wait(step=step0 + n - 1, q_chunks=chunks[r], kv_chunks=chunks[r])
        acc = dkv_in[(n - 1) % 2]
    if dq is None:
        dq = torch.zeros(qh.shape, dtype=torch.float32, device=q.device)
    return (_heads_first(dq).to(q.dtype), _heads_first(acc[0]).to(k.dtype),
            _heads_first(acc[1]).to(v.dtype))


def _tokens_first_fp32(shape, device) -> torch.Tensor:
    """An empty fp32 (batch, heads, tokens, d) tensor laid out tokens-first in memory."""
    b, h, t, d = shape
    return torch.empty(b, t, h, d, dtype=torch.float32, device=device).transpose(1, 2)


def _first_dkv(shares, kv_shape, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The own block's dK/dV accumulator: fp32, tokens-first in memory (as the fused CPU
    operator returns gradients, and as dK/dV travel). The share itself when one piece
    covers every key and lies so, else a copy of it or the shares added to zeros."""
    if len(shares) == 1 and shares[0][0] == ALL:
        acc = []
        for g in shares[0][1:]:
            if g.dtype != torch.float32 or not _heads_first(g).is_contiguous():
                g = _tokens_first_fp32(kv_shape, device).copy_(g)
            acc.append(g)
        return acc[0], acc[1]
    acc = tuple(_tokens_first_fp32(kv_shape, device).zero_() for _ in range(2))
    for sl, g_k, g_v in shares:
        acc[0][:, :, sl] += g_k
        acc[1][:, :, sl] += g_v
    return acc
