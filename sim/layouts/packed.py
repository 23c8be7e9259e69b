"""Layouts of a packed sequence, and the work of every block under its document mask
(docs/packed.md).

A packed sequence holds documents (sim.scenario.documents: their cumulative lengths, `bounds`);
the mask lets a query see keys of its own document at or before it, and with a window
only the last W of them. Every layout gives each of the N ranks exactly S / N tokens:

- ``contiguous``: the packed sequence cut into N consecutive shards (the all-gather
  scheme's llama3 variant runs on it), blind to documents;
- ``striped``: token t on rank t mod N;
- ``zigzag``: every document cut into 2N chunks, rank r holding chunks r and 2N-1-r of
  each (ring-flash-attention's zigzag_ring_flash_attn_varlen_func);
- ``doc-contiguous``: every document cut into N consecutive pieces, rank r holding the
  r-th of each (ring_flash_attn_varlen_func);
- ``balanced``: long documents cut as zigzag, the others kept whole and dealt to ranks
  to even out the causal work (`_balanced`).

A document whose length the chunk count does not divide is cut into chunks one token
apart in size: the (length mod chunks) longer ones belong to the ranks next in turn, one
cursor running over the whole sequence, so that every rank ends with S / N tokens.

The tables every scheme reads (the same as sim.layouts' for one document) are counted
token by token: a block's work is its (query, key) pairs that the mask keeps, exactly or
in whole tiles as a varlen kernel computes them (each document's piece, trimmed to the
queries that see a key and the keys some query sees, cut into tiles from its own first
token, a tile pair paid in full when it holds one unmasked pair); its
extent is the queries that see some key of the block and the keys some query sees; its
mask is empty, full (every document's part a dense rectangle) or diagonal; and its
kernel call is one varlen call, a piece per document (`BlockCall`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from sim.errors import RingsimError
from sim.reasons import Clause, clause
from sim.scenario.documents import bounds as doc_bounds

LAYOUTS = ("contiguous", "striped", "zigzag", "doc-contiguous", "balanced")
DOC_LAYOUTS = ("doc-contiguous", "balanced")
"""Layouts that exist only for packed sequences (with one document they are the
contiguous and zigzag layouts)."""
SPLIT_SHARE = 0.02
"""`balanced`: a document is cut (zigzag) when its causal work is over this share of a
rank's; whole documents are then each at most 2% of a rank's work, and dealing them
longest first left every rank within 1% of the mean over 64 drawn batches (docs/packed.md)."""


@dataclass(frozen=True)
class Packed:
    """A packed sequence on N ranks: documents (cumulative lengths), window, layout."""

    bounds: tuple[int, ...]
    n: int
    layout: str
    window: int | None = None
    causal: bool = True
    tile: int | None = None
    """`balanced` evens out the work as a kernel counts it in tiles of this edge (None:
    exact pairs)."""

    @property
    def seq(self) -> int:
        return self.bounds[-1]

    @property
    def tokens_per_rank(self) -> int:
        return self.seq // self.n


def packed_of(scenario) -> Packed:
    """The packed sequence of a scenario (its workload's documents, window and layout)."""
    w = scenario.workload
    b = doc_bounds(w.docs, w.seq, w.seed)
    tile = scenario.tile if scenario.granularity == "tile" and scenario.layout == "balanced" else None
    return Packed(tuple(int(x) for x in b), scenario.n_gpus, scenario.layout, w.window, w.causal, tile)


def uses_documents(workload, layout: str) -> bool:
    """Whether a run takes the packed path: documents, a window or a documents-only layout."""
    return workload.docs is not None or workload.window is not None or layout in DOC_LAYOUTS


def check(p: Packed) -> None:
    if p.layout not in LAYOUTS:
        raise RingsimError(f"unknown layout {p.layout!r} for packed documents; choose {', '.join(LAYOUTS)}")
    if p.seq % p.n:
        raise RingsimError(f"sequence length {p.seq} does not divide over {p.n} GPUs")


def rank_tokens(p: Packed) -> np.ndarray:
    """(n, S / N) int64: the global tokens of each rank, ascending."""
    return _rank_tokens(p).copy()


@functools.lru_cache(maxsize=32)
def _rank_tokens(p: Packed) -> np.ndarray:
    check(p)
    n, seq = p.n, p.seq
    if p.layout == "contiguous":
        return np.arange(seq, dtype=np.int64).reshape(n, seq // n)
    if p.layout == "striped":
        return np.arange(seq, dtype=np.int64).reshape(seq // n, n).T.copy()
    owner = np.empty(seq, dtype=np.int64)
    if p.layout == "balanced":
        owner[:] = _balanced(p)
    else:
        chunks = 2 * n if p.layout == "zigzag" else n
        _per_document(owner, np.asarray(p.bounds), n, chunks, range(len(p.bounds) - 1), 0)
    order = np.argsort(owner, kind="stable")
    return order.reshape(n, seq // n)


def _chunk_rank(j: np.ndarray, n: int, chunks: int) -> np.ndarray:
    """The rank of chunk j of a document cut into `chunks` (2N: zigzag; N: consecutive)."""
    return np.where(j < n, j, 2 * n - 1 - j) if chunks == 2 * n else j


def _per_document(owner: np.ndarray, b: np.ndarray, n: int, chunks: int, docs, cursor: int) -> int:
    """Fill `owner` for documents `docs` cut into `chunks` consecutive chunks each, as
    equal as whole tokens allow: the (length mod chunks) tokens over a multiple go one
    each to the ranks from `cursor` on (a rank named twice, zigzag's, takes one in each of
    its chunks), and the cursor moves on past them, so every rank ends with S / N tokens.
    Returns the cursor after them."""
    ranks = _chunk_rank(np.arange(chunks), n, chunks)
    first = np.zeros(chunks, dtype=bool)
    first[np.unique(ranks, return_index=True)[1]] = True      # each rank's first chunk
    for d in docs:
        start, end = int(b[d]), int(b[d + 1])
        size, rest = divmod(end - start, chunks)
        extra = np.bincount((cursor + np.arange(rest)) % n, minlength=n)     # per rank: 0, 1 or 2
        sizes = size + np.where(first, np.minimum(extra[ranks], 1), extra[ranks] - np.minimum(extra[ranks], 1))
        owner[start:end] = np.repeat(ranks, sizes)
        cursor = (cursor + rest) % n
    return cursor


def token_work(p: Packed) -> np.ndarray:
    """(S,) the keys each query sees: its position in its document plus one, at most W."""
    b = np.asarray(p.bounds)
    lengths = np.diff(b)
    pos = np.arange(p.seq, dtype=np.int64) - np.repeat(b[:-1], lengths)
    if not p.causal:
        span = np.repeat(lengths, lengths)
        if p.window is None:
            return span
        # |query - key| < W: up to W - 1 keys on each side, and the query's own
        return np.minimum(pos, p.window - 1) + 1 + np.minimum(span - 1 - pos, p.window - 1)
    seen = pos + 1
    return seen if p.window is None else np.minimum(seen, p.window)


def _balanced(p: Packed) -> np.ndarray:
    """`balanced`: documents whose causal work is over SPLIT_SHARE of a rank's (and any
    longer than a rank's tokens) are cut as zigzag, 2N chunks; the rest, whole, are dealt
    longest first, each to the rank with the least work that has room for it (a document
    that fits nowhere is cut at the free room of the ranks with the least work, in
    turn). Returns (S,) the rank of each token."""
    n, seq = p.n, p.seq
    c = seq // n
    b = np.asarray(p.bounds)
    lengths = np.diff(b)
    per_token = token_work(p)
    work = np.add.reduceat(per_token, b[:-1]) if lengths.size else np.zeros(0, np.int64)
    if p.tile is not None and p.causal and p.window is None:
        # a whole document's work in tiles: ((sum of tile sizes)^2 + sum of their squares) / 2
        full, rest = lengths // p.tile, lengths % p.tile
        work = (lengths * lengths + full * p.tile * p.tile + rest * rest) // 2
    share = SPLIT_SHARE * work.sum() / n
    cut = ((work > share) | (lengths > c)) & (lengths >= 2 * n)
    owner = np.full(seq, -1, dtype=np.int64)
    _per_document(owner, b, n, 2 * n, np.flatnonzero(cut), 0)
    room = c - np.bincount(owner[owner >= 0], minlength=n)
    load = np.bincount(owner[owner >= 0], weights=per_token[owner >= 0], minlength=n).astype(np.float64)
    if p.tile is not None and cut.any():
        # the cut documents' work as the kernel counts it: piece by piece, in tiles
        load[:] = 0.0
        mine = [np.flatnonzero(owner == r) for r in range(n)]
        doc = _doc_of(p)
        spans = [_spans(t, doc) for t in mine]
        for r in range(n):
            for s in range(n):
                load[r] += sum(x[3] for x in _span_pieces(p, mine[r], spans[r], mine[s], spans[s], p.tile))
    whole = np.flatnonzero(~cut)
    for d in whole[np.lexsort((-lengths[whole], -work[whole]))]:
        start, end = int(b[d]), int(b[d + 1])
        fits = np.flatnonzero(room >= end - start)
        if fits.size:
            r = int(fits[np.argmin(load[fits])])
            owner[start:end] = r
            room[r] -= end - start
            load[r] += work[d]
            continue
        at = start
        while at < end:        # no rank has room for all of it: cut it at the free room
            free = np.flatnonzero(room > 0)
            r = int(free[np.argmin(load[free])])
            take = min(int(room[r]), end - at)
            owner[at:at + take] = r
            room[r] -= take
            load[r] += float(per_token[at:at + take].sum())
            at += take
    return owner


# ---------------------------------------------------------------------------------------
# the block tables


@dataclass(frozen=True)
class BlockCall:
    """One varlen kernel call: a piece per document, (mask, query tokens, key tokens)
    with mask 'full' or 'diagonal' (pieces with no unmasked pair left out)."""

    pieces: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class Tables:
    """Every (query rank, K/V rank) block: its work (pairs, exact or in tiles), mask code
    (sim.layouts.MASK_NAMES), extents, and its varlen call (an index into `calls`)."""

    work: np.ndarray
    masks: np.ndarray
    q_tokens: np.ndarray
    kv_tokens: np.ndarray
    call: np.ndarray
    calls: tuple[BlockCall, ...]


def _doc_of(p: Packed) -> np.ndarray:
    b = np.asarray(p.bounds)
    return np.repeat(np.arange(len(b) - 1), np.diff(b))


def block_tables(p: Packed, granularity: str = "exact", tile: int = 128) -> Tables:
    return _block_tables(p, granularity, tile)


@functools.lru_cache(maxsize=8)
def _block_tables(p: Packed, granularity: str, tile: int) -> Tables:
    n, seq = p.n, p.seq
    toks = _rank_tokens(p)
    doc = _doc_of(p)
    b = np.asarray(p.bounds)
    first = b[doc]                                  # each token's document start
    owner = np.empty(seq, dtype=np.int64)
    owner[toks] = np.arange(n)[:, None]
    wide = np.int64
    exact = np.zeros((n, n), dtype=wide)
    for s in range(n):
        # keys of rank s at or before each token, from the start of its document (or window)
        held = np.cumsum(owner == s)
        lo = first.copy() if p.window is None else np.maximum(first, np.arange(seq) - p.window + 1)
        hi = np.arange(seq)
        if not p.causal:
            hi = b[doc + 1] - 1
            if p.window is not None:
                lo = np.maximum(first, np.arange(seq) - p.window + 1)
                hi = np.minimum(hi, np.arange(seq) + p.window - 1)
        seen = held[hi] - np.where(lo > 0, held[np.maximum(lo - 1, 0)], 0)
        exact[:, s] = np.bincount(owner, weights=seen, minlength=n).astype(wide)
    spans = [_spans(toks[r], doc) for r in range(n)]
    q_ext = np.zeros((n, n), dtype=wide)
    kv_ext = np.zeros((n, n), dtype=wide)
    masks = np.zeros((n, n), dtype=np.int8)
    call = np.zeros((n, n), dtype=np.int64)
    tiled = np.zeros((n, n), dtype=wide)
    calls: dict[BlockCall, int] = {}
    for r in range(n):
        for s in range(n):
            pieces = _span_pieces(p, toks[r], spans[r], toks[s], spans[s],
                                  tile if granularity == "tile" else None) if exact[r, s] else []
            tiled[r, s] = sum(x[3] for x in pieces)
            _put_call(pieces, r, s, q_ext, kv_ext, masks, call, calls)
    work = exact if granularity != "tile" else tiled
    return Tables(work, masks, q_ext, kv_ext, call, tuple(calls))


def _spans(toks: np.ndarray, doc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A rank's documents (ascending) and where each one's tokens begin and end in its
    ascending tokens."""
    d = doc[toks]
    starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    return d[starts], starts, np.r_[starts[1:], toks.size]


def _span_pieces(p: Packed, qt: np.ndarray, qspan, kt: np.ndarray, kspan,
                 tile: int | None = None) -> list[tuple[str, int, int, int]]:
    """The varlen call of queries `qt` against keys `kt` (ascending tokens, with their
    `_spans`): per document both hold, the queries that see some key and the keys some
    query sees, whether the kept pairs are that whole rectangle ('full') or cut by the
    mask ('diagonal'), and (given a tile) its pairs in whole tiles. Every document at
    once, by searches over the whole token arrays, which stay inside each document's run
    because documents are runs of consecutive token ids."""
    common, i, j = np.intersect1d(qspan[0], kspan[0], assume_unique=True, return_indices=True)
    if not common.size:
        return []
    qs, qe, ks, ke = qspan[1][i], qspan[2][i], kspan[1][j], kspan[2][j]
    q0, q1, k0, k1 = qt[qs], qt[qe - 1], kt[ks], kt[ke - 1]
    w = p.window
    if p.causal:
        qlo, qhi = np.searchsorted(qt, k0), qe if w is None else np.searchsorted(qt, k1 + w)
        klo, khi = ks if w is None else np.searchsorted(kt, q0 - w + 1), np.searchsorted(kt, q1, side="right")
    elif w is None:
        qlo, qhi, klo, khi = qs, qe, ks, ke
    else:
        qlo, qhi = np.searchsorted(qt, k0 - w + 1), np.searchsorted(qt, k1 + w)
        klo, khi = np.searchsorted(kt, q0 - w + 1), np.searchsorted(kt, q1 + w)
    qlo, qhi = np.clip(qlo, qs, qe), np.clip(qhi, qs, qe)
    klo, khi = np.clip(klo, ks, ke), np.clip(khi, ks, ke)
    live = (qhi > qlo) & (khi > klo)
    qlo, qhi, klo, khi = qlo[live], qhi[live], klo[live], khi[live]
    a, z, b, y = qt[qlo], qt[qhi - 1], kt[klo], kt[khi - 1]       # the pieces' first and last tokens
    dense = np.ones(qlo.size, dtype=bool)
    if p.causal:
        dense &= y <= a
    if w is not None:
        dense &= z - b < w
        if not p.causal:
            dense &= y - a < w
    out = []
    for m, x0, x1, y0, y1 in zip(dense.tolist(), qlo.tolist(), qhi.tolist(), klo.tolist(), khi.tolist()):
        tiles = 0 if tile is None else _piece_tiles(p, qt[x0:x1], kt[y0:y1], tile, m)
        out.append(("full" if m else "diagonal", x1 - x0, y1 - y0, tiles))
    return out


def _piece_tiles(p: Packed, q: np.ndarray, k: np.ndarray, tile: int, dense: bool) -> int:
    """Pairs of one piece in whole tiles, as a varlen kernel called on exactly these
    queries and keys computes them: its queries and keys cut into tiles of `tile` from
    the piece's first, a (query tile, key tile) paid in full when it holds a kept pair
    (exact on runs of consecutive tokens; under a window, when their spans meet it)."""
    if dense:
        return q.size * k.size
    starts_q = np.arange(0, q.size, tile)
    qsz = np.minimum(starts_q + tile, q.size) - starts_q
    qmin, qmax = q[starts_q], q[starts_q + qsz - 1]
    starts_k = np.arange(0, k.size, tile)
    ksz = np.minimum(starts_k + tile, k.size) - starts_k
    kmin, kmax = k[starts_k], k[starts_k + ksz - 1]
    cum = np.r_[0, np.cumsum(ksz)]
    top = np.searchsorted(kmin, qmax if p.causal else qmax + (p.window or p.seq) - 1, side="right")
    bottom = np.zeros_like(top) if p.window is None else np.searchsorted(kmax, qmin - p.window + 1)
    return int((np.maximum(cum[np.maximum(top, bottom)] - cum[bottom], 0) * qsz).sum())


def gathered_tables(p: Packed, granularity: str = "exact", tile: int = 128) -> Tables:
    """The tables of every rank's queries against the whole gathered K/V (the all-gather
    scheme), as (n, 1) tables: one varlen call per rank, a piece per document."""
    return _gathered_tables(p, granularity, tile)


@functools.lru_cache(maxsize=8)
def _gathered_tables(p: Packed, granularity: str, tile: int) -> Tables:
    n = p.n
    toks = _rank_tokens(p)
    doc = _doc_of(p)
    every = np.arange(p.seq, dtype=np.int64)
    whole = _spans(every, doc)
    work = block_tables(p).work.sum(axis=1, keepdims=True)
    calls: dict[BlockCall, int] = {}
    q_ext = np.zeros((n, 1), dtype=np.int64)
    kv_ext = np.zeros((n, 1), dtype=np.int64)
    masks = np.zeros((n, 1), dtype=np.int8)
    call = np.zeros((n, 1), dtype=np.int64)
    for r in range(n):
        pieces = _span_pieces(p, toks[r], _spans(toks[r], doc), every, whole, tile if granularity == "tile" else None)
        if granularity == "tile":
            work[r, 0] = sum(x[3] for x in pieces)
        _put_call(pieces, r, 0, q_ext, kv_ext, masks, call, calls)
    return Tables(work, masks, q_ext, kv_ext, call, tuple(calls))


def _put_call(pieces, r: int, s: int, q_ext, kv_ext, masks, call, calls: dict) -> None:
    """Write block (r, s)'s extents, mask and varlen call from its pieces."""
    q_ext[r, s] = sum(x[1] for x in pieces)
    kv_ext[r, s] = sum(x[2] for x in pieces)
    masks[r, s] = 2 if not pieces else (1 if any(x[0] == "diagonal" for x in pieces) else 0)
    call[r, s] = calls.setdefault(BlockCall(tuple(x[:3] for x in pieces)), len(calls))


def chunks_of_rank(n: int) -> list[tuple[int, ...]]:
    """The trace's chunk sets on a packed layout: a rank's shard is its one chunk."""
    return [(r,) for r in range(n)]


def from_header(config: dict, n: int, layout: str | None = None) -> Packed | None:
    """The packed sequence a trace header describes on n ranks (its layout, or `layout`),
    or None when the run was not packed (one document, no window, a closed-form layout)."""
    w = config["workload"]
    docs, window = w.get("docs"), w.get("window")
    layout = config["layout"] if layout is None else layout
    if docs is None and window is None and layout not in DOC_LAYOUTS:
        return None
    seq = int(w["seq"])
    b = doc_bounds(docs, seq, int(w.get("seed", 0)))
    return Packed(tuple(int(x) for x in b), n, layout, window, bool(w["causal"]))


def block_map_parts(p: Packed) -> tuple[np.ndarray, np.ndarray, int, Clause]:
    """What a block map of a packed run shows: a chunk is a rank's shard (work: the exact
    table), each rank its own chunk's owner, the shard's tokens, the axis's name (a sim.reasons
    clause)."""
    return block_tables(p).work, np.arange(p.n), p.tokens_per_rank, clause("blocks.shard")
