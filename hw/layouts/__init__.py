"""Layouts on the kernel side: sharding full tensors by a layout's token order.

Which tokens a rank holds and which pieces of a (query shard, K/V block) pair a causal
kernel computes (each piece one call of a fused attention operator, none with a row
whose keys are all masked) are the layout modules' answers in `sim.layouts`, shared
with the simulator and the figures.

Packed documents (`sim.layouts.packed`, docs/packed.md) shard by `sim.layouts.packed.rank_tokens`, and
a block is computed as a varlen kernel computes it (`doc_pieces`): per document both
sides hold, that document's queries against its keys. The mask keeps key u for query t
when both lie in one document and u <= t (causal), with a window W also t - u < W
(without the causal mask, |t - u| < W). A rank's tokens are ascending and documents
consecutive, so a document's tokens are one run of the shard and a piece is a pair of
slices.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from sim.layouts import rank_tokens
from sim.layouts.base import Piece
from sim.layouts.packed import DOC_LAYOUTS, Packed
from sim.layouts.packed import rank_tokens as packed_rank_tokens

__all__ = ["DocPiece", "doc_pieces", "shard", "token_index", "unshard"]


def token_index(layout: str | Packed, seq: int, n_gpus: int):
    """LongTensor (n_gpus, seq // n_gpus): the global tokens of each rank, ascending.

    `layout` is a layout's name or a packed sequence (whose own length and ranks then
    hold); a documents-only layout named alone is taken as one document.
    """
    if isinstance(layout, str) and layout in DOC_LAYOUTS:
        layout = Packed((0, seq), n_gpus, layout)
    if isinstance(layout, Packed):
        return torch.from_numpy(packed_rank_tokens(layout))
    return torch.from_numpy(rank_tokens(layout, seq, n_gpus))


def shard(x, layout: str | Packed, n_gpus: int, rank: int, *, dim: int = 1):
    """Rank `rank`'s tokens of a full tensor (tokens along `dim`), contiguous."""
    return x.index_select(dim, token_index(layout, x.shape[dim], n_gpus)[rank]).contiguous()


def unshard(shards, layout: str | Packed, *, dim: int = 1):
    """The full tensor, in the original token order, from every rank's shard."""
    n_gpus = len(shards)
    seq = shards[0].shape[dim] * n_gpus
    idx = token_index(layout, seq, n_gpus)
    shape = list(shards[0].shape)
    shape[dim] = seq
    full = shards[0].new_empty(shape)
    for r, s in enumerate(shards):
        full.index_copy_(dim, idx[r], s)
    return full


@dataclass(frozen=True)
class DocPiece(Piece):
    """One document's queries `q` against its keys `kv` (slices of the shard's tokens, or
    of the whole sequence for gathered keys), trimmed to the queries that see a key of
    it and the keys some query sees. Dense (`causal` False, no mask), the top-left
    diagonal (`causal`), or cut by the mask otherwise: `mask`, bool (queries, keys) on
    the kernel's device, True where kept (a row may keep none)."""

    mask: Any = field(default=None, compare=False)
    kept: int = 0
    """The (query, key) pairs the mask keeps, per head and batch item."""

    def pairs(self, tokens: int = 0) -> int:
        return self.kept


def doc_pieces(p: Packed, rank: int, owner: int | None, device: Any = "cpu") -> tuple[DocPiece, ...]:
    """Pieces of rank `rank`'s queries against the K/V block of rank `owner` (None: the
    whole sequence's K/V in token order, as the all-gather scheme holds it); () when the
    mask keeps no pair. Worked out once per block and device (masks included)."""
    return _doc_pieces(p, rank, owner, str(device))


@functools.lru_cache(maxsize=128)
def _doc_pieces(p: Packed, rank: int, owner: int | None, device: str) -> tuple[DocPiece, ...]:
    toks = packed_rank_tokens(p)
    q_all = toks[rank]
    k_all = np.arange(p.seq, dtype=np.int64) if owner is None else toks[owner]
    b = np.asarray(p.bounds)
    q_doc = np.searchsorted(b, q_all, side="right") - 1
    k_doc = np.searchsorted(b, k_all, side="right") - 1
    starts = np.flatnonzero(np.r_[True, q_doc[1:] != q_doc[:-1]])
    ends = np.r_[starts[1:], q_all.size]
    out = []
    for qa, qb in zip(starts.tolist(), ends.tolist()):
        d = q_doc[qa]
        ka, kb = np.searchsorted(k_doc, d, side="left"), np.searchsorted(k_doc, d, side="right")
        if ka == kb:
            continue
        piece = _one_document(p, q_all[qa:qb], k_all[ka:kb])
        if piece is None:
            continue
        (qlo, qhi, klo, khi), causal, mask, kept = piece
        out.append(DocPiece(slice(int(qa + qlo), int(qa + qhi)), slice(int(ka + klo), int(ka + khi)), causal,
                            None if mask is None else torch.from_numpy(mask).to(device), kept))
    return tuple(out)


def _one_document(p: Packed, q: np.ndarray, k: np.ndarray):
    """One document's queries q against its keys k (global tokens, ascending): the
    bounds (qlo, qhi, klo, khi) of the rows that see a key and the keys seen, whether
    the kept pairs are the diagonal, the mask otherwise (None when they are the whole
    rectangle), and the kept pairs; None when none is kept.

    The keys query t sees are those in [t - W + 1, t] (causal; [t - W + 1, t + W - 1]
    without the mask; the whole document without a window), so its kept keys are one
    run of k, first[i]..last[i]."""
    w = p.window
    lo = q - w + 1 if w is not None else np.full_like(q, k[0])
    hi = q if p.causal else (q + w - 1 if w is not None else np.full_like(q, k[-1]))
    first = np.searchsorted(k, lo, side="left")
    last = np.searchsorted(k, hi, side="right")
    seen = np.flatnonzero(last > first)
    if not seen.size:
        return None
    qlo, qhi = int(seen[0]), int(seen[-1]) + 1
    first, last = first[qlo:qhi], last[qlo:qhi]
    klo, khi = int(first[0]), int(last[-1])      # both runs move forward with the query
    kept = int((last - first).sum())
    bounds = (qlo, qhi, klo, khi)
    nq, nk = qhi - qlo, khi - klo
    if kept == nq * nk:
        return bounds, False, None, kept
    if nq == nk and (first == klo).all() and (last - klo == np.arange(1, nq + 1)).all():
        return bounds, True, None, kept
    cols = np.arange(nk)
    mask = (cols >= (first - klo)[:, None]) & (cols < (last - klo)[:, None])
    return bounds, False, mask, kept
