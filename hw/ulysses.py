"""DeepSpeed-Ulysses attention (docs/design.md, "Beyond the ring") over torch.distributed
all-to-all.

Forward: one `all_to_all` takes Q, K and V from token shards (any layout) to head
shards: rank j receives, from every rank, that rank's tokens of its H/N query heads and
of their K/V heads. The rank puts the tokens back in sequence order (a permutation when
the layout is not contiguous), runs one full-sequence call (causal or not) on its heads,
and a second `all_to_all` returns the output to the ranks holding those tokens. The
head-sharded Q, K, V, output and log-sum-exp are kept for the backward (`UlyssesState`,
what the runner hands back as "lse"): one all-to-all of dO in, one call, one all-to-all
of dQ, dK, dV back.

Degrees (as `sim.schemes.hybrid.check_degree`): N must divide the H query heads; with
GQA, N must divide H_kv, or H_kv divide N, in which case each K/V head is replicated
to the N/H_kv ranks whose query heads use it (its bytes counted in the all-to-all) and
their dK/dV are summed when they come back. Anything else is refused (`RingsimError`).

Spans: "a2a" in (step0), one compute (step0), "a2a" out (step0 + 1); each all-to-all's
send/recv carry the bytes this rank sends to / receives from the other N-1 ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from hw.blocks import BlockOps
from hw.collective import nbytes, run_collective
from hw.comm import Ring
from hw.layouts import token_index
from sim.errors import RingsimError
from sim.layouts import chunks_of_rank
from sim.scenario.config import Workload
from sim.scenario.quantities import BWD_FLOPS_FACTOR


def check_degree(heads: int, kv_heads: int, n: int) -> None:
    """RingsimError (one line) unless N ranks can split these heads."""
    if heads % n:
        raise RingsimError(f"ulysses degree {n} does not divide the {heads} query heads")
    if (n <= kv_heads and kv_heads % n) or (n > kv_heads and n % kv_heads):
        raise RingsimError(f"ulysses degree {n} and {kv_heads} K/V heads: one must divide the other "
                           "(K/V heads are replicated when the degree is larger)")


def kv_heads_of(j: int, n: int, kv_heads: int) -> slice:
    """The K/V heads rank j attends with (one replicated head when N > H_kv)."""
    if n <= kv_heads:
        per = kv_heads // n
        return slice(j * per, (j + 1) * per)
    i = j * kv_heads // n
    return slice(i, i + 1)


@dataclass
class UlyssesState:
    """What the backward needs from the forward: this rank's heads over the whole sequence."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor


def _order(layout: str, seq: int, n: int, device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(perm, inverse): position p of the gathered tokens (rank by rank) is token perm[p];
    None when that is already sequence order (contiguous)."""
    perm = token_index(layout, seq, n).reshape(-1)
    if torch.equal(perm, torch.arange(seq)):
        return None
    return perm.to(device), torch.argsort(perm).to(device)


def _hf(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)


def _a2a(ring: Ring, send: list[torch.Tensor], recv: list[torch.Tensor], *, step: int,
         chunks: tuple[int, ...], all_chunks: tuple[int, ...]) -> None:
    r = ring.rank
    out_b = nbytes(*(t for j, t in enumerate(send) if j != r))
    in_b = nbytes(*(t for j, t in enumerate(recv) if j != r))
    run_collective(ring, "a2a", lambda: dist.all_to_all(recv, send, group=ring.group, async_op=True),
                   step=step, sent=out_b, received=in_b, send_chunks=chunks, recv_chunks=chunks,
                   q_chunks=chunks, kv_chunks=all_chunks)


def _exchange(ring: Ring, send: list[list[torch.Tensor]], *, step: int, chunks, all_chunks) -> list[list[torch.Tensor]]:
    """Rank j gets send[j] (a list of tensors, same shapes from every rank), as one message
    per pair; returns, per source rank, its tensors."""
    n = ring.n_gpus
    shapes = [t.shape for t in send[0]]
    flat = [torch.cat([t.reshape(-1) for t in parts]) for parts in send]
    if n == 1:
        got = flat
    else:
        got = [torch.empty_like(flat[0]) for _ in range(n)]
        _a2a(ring, flat, got, step=step, chunks=chunks, all_chunks=all_chunks)
    out = []
    for buf in got:
        parts, at = [], 0
        for s in shapes:
            size = s.numel()
            parts.append(buf[at:at + size].view(s))
            at += size
        out.append(parts)
    return out


def _to_sequence(parts: list[torch.Tensor], order) -> torch.Tensor:
    """Token pieces (b, heads, t, d) from ranks 0..N-1 -> (b, heads, S, d) in sequence order."""
    x = torch.cat(parts, dim=2)
    return x if order is None else x.index_select(2, order[1])


def _from_sequence(x: torch.Tensor, order, n: int) -> list[torch.Tensor]:
    """(b, heads, S, d) in sequence order -> each rank's tokens (b, heads, t, d)."""
    if order is not None:
        x = x.index_select(2, order[0])
    return [p.contiguous() for p in x.chunk(n, dim=2)]


def _flops(b: int, heads: int, d: int, seq: int, causal: bool) -> float:
    pairs = seq * (seq + 1) // 2 if causal else seq * seq
    return Workload(batch=b, seq=1, heads=heads, kv_heads=1, head_dim=d).fwd_flops(pairs)


def ulysses_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, ring: Ring, layout: str,
                    causal: bool, ops: BlockOps, step0: int = 0,
                    on_step=None) -> tuple[torch.Tensor, UlyssesState]:
    """This rank's output (q's dtype and shape) and the state its backward needs."""
    n, r = ring.n_gpus, ring.rank
    b, t, h, d = q.shape
    kvh = k.shape[2]
    check_degree(h, kvh, n)
    hq = h // n
    seq = t * n
    chunks = chunks_of_rank(layout, n)[r]
    every = tuple(sorted(c for cs in chunks_of_rank(layout, n) for c in cs))
    if on_step is not None:
        on_step(step0)
    qh, kh, vh = _hf(q), _hf(k), _hf(v)
    send = [[qh[:, j * hq:(j + 1) * hq], kh[:, kv_heads_of(j, n, kvh)], vh[:, kv_heads_of(j, n, kvh)]]
            for j in range(n)]
    got = _exchange(ring, send, step=step0, chunks=chunks, all_chunks=every)
    order = _order(layout, seq, n, q.device)
    qs, ks, vs = (_to_sequence([g[i] for g in got], order) for i in range(3))
    t0 = ring.clock.mark()
    out_s, lse_s = ops.forward(qs, ks, vs, causal)
    if ring.recorder is not None:
        ring.recorder.compute("fwd", step0, t0, ring.clock.mark(), _flops(b, hq, d, seq, causal), every, every)
    back = _exchange(ring, [[p] for p in _from_sequence(out_s, order, n)], step=step0 + 1,
                     chunks=chunks, all_chunks=every)
    out = torch.cat([g[0] for g in back], dim=1)          # (b, h, t, d): heads of rank 0, 1, ...
    return _hf(out).to(q.dtype), UlyssesState(qs, ks, vs, out_s, lse_s)


def ulysses_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     out: torch.Tensor, lse: UlyssesState, *, ring: Ring, layout: str, causal: bool,
                     ops: BlockOps, step0: int = 0,
                     on_step=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of this rank's shard (input dtype), given the forward's state."""
    n, r = ring.n_gpus, ring.rank
    b, t, h, d = q.shape
    kvh = k.shape[2]
    hq = h // n
    seq = t * n
    st = lse
    chunks = chunks_of_rank(layout, n)[r]
    every = tuple(sorted(c for cs in chunks_of_rank(layout, n) for c in cs))
    if on_step is not None:
        on_step(step0)
    doh = _hf(dout)
    got = _exchange(ring, [[doh[:, j * hq:(j + 1) * hq]] for j in range(n)], step=step0,
                    chunks=chunks, all_chunks=every)
    order = _order(layout, seq, n, q.device)
    dos = _to_sequence([g[0] for g in got], order)
    t0 = ring.clock.mark()
    dqs, dks, dvs = ops.backward(dos, st.q, st.k, st.v, st.out, st.lse, causal)
    if ring.recorder is not None:
        ring.recorder.compute("bwd", step0, t0, ring.clock.mark(),
                              BWD_FLOPS_FACTOR * _flops(b, hq, d, seq, causal), every, every)
    parts = [_from_sequence(x, order, n) for x in (dqs, dks, dvs)]
    back = _exchange(ring, [[parts[0][i], parts[1][i], parts[2][i]] for i in range(n)], step=step0 + 1,
                     chunks=chunks, all_chunks=every)
    dq = torch.cat([g[0] for g in back], dim=1)
    if n <= kvh:
        dk = torch.cat([g[1] for g in back], dim=1)
        dv = torch.cat([g[2] for g in back], dim=1)
    else:   # replicated K/V heads: sum the shares of the ranks that used each
        dk = torch.zeros(b, kvh, t, d, dtype=torch.float32, device=q.device)
        dv = torch.zeros_like(dk)
        for j, g in enumerate(back):
            s = kv_heads_of(j, n, kvh)
            dk[:, s] += g[1]
            dv[:, s] += g[2]
    return _hf(dq).to(q.dtype), _hf(dk).to(k.dtype), _hf(dv).to(v.dtype)
