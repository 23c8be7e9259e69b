"""Partial attention results sent to the ranks that merge them: the last step of pass-Q
prefill and of sharded-KV decode.

When queries meet keys held elsewhere (pass-Q: the queries travelled to the keys;
decode: every rank attends its own shard of the cache), each rank ends with a partial
result per query row, its normalized output and the log-sum-exp of its scores over the
keys it holds (docs/design.md, fact 3). The exact result over all keys is their merge
(`hw.merge.merge_`), done where the rows are wanted:

- `to_owners` (all-to-all): rank j receives from every rank the partial results meant
  for it (pass-Q: the rows of its own queries; decode: its share of the heads) and
  merges them;
- `to_everyone` (all-gather): every rank receives every rank's partial results for all
  rows and merges them, so that every rank holds the whole output;
- `gather_outputs` (all-gather): merged outputs, after an all-to-all merge by heads,
  to every rank.

A partial result travels as one flat fp32 message (output, then log-sum-exp): exact,
where sending the output in the model's dtype would round it before the merge. Rows a
rank computed nothing for travel as output 0 and log-sum-exp -inf, which the merge
leaves out exactly. The collective is recorded as hw.collective records one ("a2a" or
"ag"), with the bytes this rank sends to and receives from the others.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from hw.collective import nbytes, run_collective
from hw.comm import Ring
from hw.merge import merge_

Partial = tuple[torch.Tensor, torch.Tensor]
"""(out (..., rows, d) fp32, lse (..., rows) fp32) of some query rows over some keys."""


def empty_partial(out_shape: tuple[int, ...], device) -> Partial:
    """The result over no key: output 0, log-sum-exp -inf (out_shape (..., rows, d))."""
    return (torch.zeros(out_shape, dtype=torch.float32, device=device),
            torch.full(out_shape[:-1], float("-inf"), dtype=torch.float32, device=device))


def _flat(p: Partial) -> torch.Tensor:
    return torch.cat((p[0].float().reshape(-1), p[1].float().reshape(-1)))


def _unflat(buf: torch.Tensor, out_shape: tuple[int, ...]) -> Partial:
    size = 1
    for x in out_shape:
        size *= x
    return buf[:size].view(out_shape), buf[size:].view(out_shape[:-1])


def merged(parts: list[Partial], into: Partial | None = None) -> Partial:
    """The merge of partial results over disjoint keys, in the order given; `into`:
    accumulators (fp32, any memory layout) to merge them into instead of the first."""
    out, lse = into if into is not None else (parts[0][0].clone(), parts[0][1].clone())
    for o, ls in (parts if into is not None else parts[1:]):
        merge_(out, lse, o, ls)
    return out, lse


def to_owners(ring: Ring, parts: list[Partial], *, step: int, chunks: tuple[int, ...] = (),
              all_chunks: tuple[int, ...] = ()) -> list[Partial]:
    """All-to-all: parts[j] goes to rank j (every rank's parts[j] of one shape); returns
    the partial results received, by source rank (this rank's own included, not sent)."""
    n, r = ring.n_gpus, ring.rank
    if n == 1:
        return [parts[0]]
    shapes = [tuple(p[0].shape) for p in parts]
    send = [_flat(p) for p in parts]
    # every slot its own buffer: a collective copying a tensor onto itself is undefined
    recv = [torch.empty_like(send[r]) for _ in range(n)]
    run_collective(ring, "a2a", lambda: dist.all_to_all(recv, send, group=ring.group, async_op=True),
                   step=step, sent=nbytes(*(t for j, t in enumerate(send) if j != r)),
                   received=nbytes(*(t for j, t in enumerate(recv) if j != r)),
                   send_chunks=chunks, recv_chunks=chunks, q_chunks=chunks, kv_chunks=all_chunks)
    return [_unflat(buf, shapes[r]) for buf in recv]


def to_everyone(ring: Ring, part: Partial, *, step: int, chunks: tuple[int, ...] = (),
                all_chunks: tuple[int, ...] = ()) -> list[Partial]:
    """All-gather: every rank's partial result (one shape on all), by source rank."""
    n = ring.n_gpus
    if n == 1:
        return [part]
    shape = tuple(part[0].shape)
    mine = _flat(part)
    recv = [torch.empty_like(mine) for _ in range(n)]
    run_collective(ring, "ag", lambda: dist.all_gather(recv, mine, group=ring.group, async_op=True),
                   step=step, sent=(n - 1) * nbytes(mine), received=(n - 1) * nbytes(mine),
                   send_chunks=chunks, recv_chunks=all_chunks, q_chunks=chunks, kv_chunks=all_chunks)
    return [_unflat(buf, shape) for buf in recv]


def gather_outputs(ring: Ring, mine: torch.Tensor, *, step: int, chunks: tuple[int, ...] = (),
                   all_chunks: tuple[int, ...] = ()) -> list[torch.Tensor]:
    """All-gather of merged outputs (one shape on every rank), by source rank: after an
    all-to-all merge, so that every rank holds the whole output."""
    n = ring.n_gpus
    if n == 1:
        return [mine]
    recv = [torch.empty_like(mine) for _ in range(n)]
    run_collective(ring, "ag", lambda: dist.all_gather(recv, mine, group=ring.group, async_op=True),
                   step=step, sent=(n - 1) * nbytes(mine), received=(n - 1) * nbytes(mine),
                   send_chunks=chunks, recv_chunks=all_chunks, q_chunks=chunks, kv_chunks=all_chunks)
    return recv
