"""The ring's step as each library launches it: its attention calls and its merge, played by the
ranks of `hw.inprocess` so that a profiler trace shows each library's kernels step by step.

`hw.ring` is the project's own kernel: one fused merge per block (`hw.merge`). A library's ring
(docs/implementations.md) issues the same attention calls on the same blocks but corrects its
partial results its own way, and the simulator's account of it is the ring's
`sim.implementations` record. This module reads that record, so hw and the simulator share one
account: `Implementation.merge` picks the merge below, `Implementation.launches` says how many
attention calls a step issues (checked against the calls made), and `Implementation.layouts`,
`causal_layouts` and `full_layouts` which rings it runs (`runs`).

- `fused` (ideal): `hw.merge.merge_`, the project's merge into fp32 accumulators. The model
  counts it as one fused kernel (MERGE_KERNELS 'fused'); torch has no such kernel, and eagerly
  it runs as about a dozen elementwise kernels (maximum, exp, log, lerp_, ...), so on a GPU its
  measured merge is that chain's, not a fused kernel's.
- `unfused` (ring-flash-attention, and long-context-attention's copy of it):
  `update_out_and_lse` as zhuzilin/ring-flash-attention utils.py writes it (899628238f2f5bb8c
  028579c89b7cd56ea451d2a): out (batch, tokens, heads, d) and lse (batch, tokens, heads, 1) in
  fp32, out - sigmoid(block_lse - lse) * (out - block_out), lse - logsigmoid(lse - block_lse);
  on a slice (zigzag's half-query blocks, stripe's q[:, 1:]) the slice is merged into new
  tensors and copied back. The library runs it as a TorchScript function; here it runs
  eagerly, one kernel per operation, which is how the library's TorchScript runs on a GPU
  without a fuser (sim.hardware.presets.MERGE_KERNELS); `compiled` scripts it as the library
  does, and a GPU's TorchScript executor may then fuse it (whether it does is what a GPU trace
  shows).
- `te` (TransformerEngine p2p, AttnFuncWithCPAndKVP2P, NVIDIA/TransformerEngine d0067d0da6cb0
  1811b8072a7d304f0e00344ce2b context_parallel.py): each step's output and log-sum-exp are kept;
  at step i the statistics of step i-1 are corrected (flash_attn_fwd_softmax_lse_correction:
  max + log1p(exp(min - max)), fp32, on the second half of the rows for a half-query step);
  after the loop the last step's, then the output corrections, one per step
  (flash_attn_fwd_out_correction_init for step 0, flash_attn_fwd_out_correction after:
  out.add_(out_per_step * exp(lse_per_step - lse)), the output in the input's dtype).
  TransformerEngine fuses each correction into one kernel (`jit_fuser`: torch.compile, see
  `_compiled`); `compiled` compiles them so, else they run eagerly, several elementwise kernels
  each. All run on one stream, where TransformerEngine alternates two (consecutive calls may
  overlap there).
- `torch` (torch context_parallel's `_SDPAMerger` with convert_to_f32, torch 2.13.0
  torch/distributed/tensor/experimental/_context_parallel/_attention.py): step 0's output to
  fp32 as it is, later ones ring-flash-attention's two lines on (batch, heads, tokens, d)
  tensors, and a block on the second of the rank's two chunks (`partial`) rebuilt into the
  whole output and statistics by `_partial_update` (torch.cat).

The calls are the layout's blocks (`sim.layouts.block_pieces`): one call per step, skipped when
fully masked, as every one of these libraries issues (zigzag: the whole block under the causal
mask at step 0, q x the first half of K/V at steps <= rank, the second half of q x K/V after;
stripe: q[:, 1:] x k[:, :-1] after). The calls run on `hw.blocks` (torch's SDPA operators):
the libraries call FlashAttention's own kernels (flash_attn_func, TransformerEngine's fused
attention or flash-attn), which take the shapes as these do but are other builds; on one GPU
torch's flash backend is FlashAttention-2 as torch ships it.

The backward is the same for every library: one attention backward per step on the
forward's final output and statistics, dQ added in fp32, the fp32 dK/dV accumulators
travelling one hop behind their block (as `hw.ring.ring_backward`): three adds per step.
TransformerEngine packs dK and dV into one buffer and adds it with one kernel; torch's
operators return them apart, so here it is two.

Every piece of work is annotated for the profiler (`torch.profiler.record_function`) with
`label(library, kind, rank, step, part)` (part 'call' or 'merge'), and runs between two marks of
the ring's clock: with `play_ring(timed=True)` one rank at a time holds the device (hw.inprocess),
so a trace's kernels are found by the annotation around their launch (bench/gpu/impl_rings.py).
"""

from __future__ import annotations

import re
import threading
import warnings
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from hw.blocks import BlockOps
from hw.comm import Ring
from hw.merge import merge_, new_accumulators
from hw.ring import _first_dkv, _heads_first, _kv_buffers, _pair_flops, _tokens_first_fp32
from sim import implementations
from sim.errors import RingsimError
from sim.implementations.base import Implementation
from sim.layouts import block_pieces, chunks_of_rank, exact_work
from sim.layouts.base import ALL
from sim.scenario.quantities import BWD_FLOPS_FACTOR

HW_LAYOUTS = ("contiguous", "zigzag", "striped")
"""The layouts of one document the in-process ring shards by."""

LABEL = re.compile(r"^impl_step/(?P<library>\w+)/(?P<kind>fwd|bwd)/(?P<rank>\d+)/(?P<step>\d+)/(?P<part>call|merge)$")
"""What `label` writes, read back from a trace."""


def label(library: str, kind: str, rank: int, step: int, part: str) -> str:
    """The profiler annotation around one step's calls ('call') or merge kernels ('merge')."""
    return f"impl_step/{library}/{kind}/{rank}/{step}/{part}"


def ring_implementation(library: str) -> Implementation:
    """`library`'s ring (sim.implementations); RingsimError where it has none."""
    return implementations.get("ring", library)


def ring_libraries() -> tuple[str, ...]:
    """Every library with a ring, the ideal first."""
    return tuple(i.library for i in implementations.of_scheme("ring"))


def runs(impl: Implementation, layout: str, causal: bool) -> bool:
    """Whether `impl` runs the ring on `layout` with (or without) a causal mask."""
    if layout not in HW_LAYOUTS or (impl.layouts is not None and layout not in impl.layouts):
        return False
    return not ((layout in impl.causal_layouts and not causal) or (layout in impl.full_layouts and causal))


@contextmanager
def _part(ring: Ring, library: str, kind: str, step: int, part: str):
    with torch.profiler.record_function(label(library, kind, ring.rank, step, part)):
        yield


def _calls(impl: Implementation, kind: str, layout: str, rank: int, owner: int, n: int, c: int, causal: bool,
           pairs: float):
    """The step's attention calls: the layout's block, as many as the implementation launches."""
    pieces = block_pieces(layout, rank, owner, n, c, causal)
    want = impl.launches(kind, pairs=int(pairs), sliced=bool(pieces) and pieces[0].q != ALL).attention_calls
    if len(pieces) != want:
        raise RingsimError(f"{impl.library} launches {want} attention calls at this step, the "
                           f"{layout} block has {len(pieces)} pieces")
    return pieces


# ------------------------------------------------------------------ forward merges

class _Fused:
    """The fused merge (hw.merge): fp32 accumulators, one pass per block."""

    def __init__(self, q: torch.Tensor, tag, compiled: bool = False):
        self.q, self.tag, self.compiled = q, tag, compiled
        self.out = self.lse = None

    def add(self, step, b_out, b_lse, piece):
        with self.tag(step):
            if self.out is None and piece.q == ALL:   # the own block: its result is the accumulator
                self.out, self.lse = b_out.float(), b_lse
                return
            if self.out is None:
                self.out, self.lse = new_accumulators(self.q.shape, self.q.device)
            merge_(self.out[:, :, piece.q], self.lse[:, :, piece.q], b_out, b_lse)

    def finish(self, last_step):
        if self.out is None:
            self.out, self.lse = new_accumulators(self.q.shape, self.q.device)
        return self.out.transpose(1, 2).to(self.q.dtype), self.lse


def _update_out_and_lse(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor,
                        block_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ring-flash-attention's _update_out_and_lse (module docstring): block_out (b, t, h, d) in
    any dtype, block_lse (b, h, t); out (b, t, h, d) and lse (b, t, h, 1) fp32."""
    block_out = block_out.to(torch.float32)
    block_lse = block_lse.transpose(-2, -1).unsqueeze(dim=-1)
    out = out - F.sigmoid(block_lse - lse) * (out - block_out)
    lse = lse - F.logsigmoid(lse - block_lse)
    return out, lse


_COMPILE_LOCK = threading.Lock()
_COMPILED: dict = {}


def _scripted(fn):
    """`fn` through TorchScript, once per process, as ring-flash-attention declares its
    _update_out_and_lse (@torch.jit.script): a GPU's TorchScript executor may fuse it after its
    profiling runs, where the eager function launches one kernel per operation. torch 2.13 calls
    TorchScript deprecated; the library still uses it."""
    with _COMPILE_LOCK:
        if fn not in _COMPILED:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                _COMPILED[fn] = torch.jit.script(fn)
        return _COMPILED[fn]


def _compiled(fn):
    """`fn` through torch.compile, once per process, as TransformerEngine's jit_fuser compiles its
    corrections (transformer_engine/pytorch/jit.py: jit_fuser = lazy_compile, torch.compile on
    first call unless NVTE_TORCH_COMPILE=0; NVIDIA/TransformerEngine
    00e79635bd02e46ed2610575f77ec4ffe88b0db5)."""
    with _COMPILE_LOCK:
        if fn not in _COMPILED:
            _COMPILED[fn] = torch.compile(fn)
        return _COMPILED[fn]


class _Unfused:
    """ring-flash-attention's update_out_and_lse (module docstring); `compiled`: scripted, as the
    library declares it."""

    @property
    def update(self):
        return _scripted(_update_out_and_lse) if self.compiled else _update_out_and_lse

    def __init__(self, q: torch.Tensor, tag, compiled: bool = False):
        self.q, self.tag, self.compiled = q, tag, compiled
        self.out = self.lse = None

    def add(self, step, b_out, b_lse, piece):
        with self.tag(step):
            if self.out is None:
                if piece.q != ALL:
                    raise RingsimError("ring-flash-attention's first block covers every query row")
                self.out = b_out.transpose(1, 2).to(torch.float32)
                self.lse = b_lse.transpose(-2, -1).unsqueeze(dim=-1)
            elif piece.q != ALL:
                sl = (slice(None), piece.q)
                slice_out, slice_lse = self.update(self.out[sl], self.lse[sl], b_out.transpose(1, 2), b_lse)
                self.out[sl], self.lse[sl] = slice_out, slice_lse
            else:
                self.out, self.lse = self.update(self.out, self.lse, b_out.transpose(1, 2), b_lse)

    def finish(self, last_step):
        return self.out.to(self.q.dtype), self.lse.squeeze(dim=-1).transpose(-1, -2)


class _TorchMerger:
    """torch context_parallel's _SDPAMerger(convert_to_f32=True, seq_dim=2) (module docstring)."""

    def __init__(self, q: torch.Tensor, tag, compiled: bool = False):
        self.q, self.tag, self.compiled = q, tag, compiled
        self.out = self.lse = None

    def add(self, step, b_out, b_lse, piece):
        with self.tag(step):
            block_out, block_lse = b_out.to(torch.float32), b_lse.unsqueeze(dim=-1)
            if self.out is None:
                if piece.q != ALL:
                    raise RingsimError("torch's first block covers every query row")
                self.out, self.lse = block_out, block_lse
                return
            half = self.q.shape[1] // 2
            partial = piece.q != ALL
            if partial and piece.q != slice(half, None):
                raise RingsimError("torch's partial blocks are the second of a rank's two chunks")
            out = self.out.chunk(2, dim=2)[1] if partial else self.out
            lse = self.lse.chunk(2, dim=2)[1] if partial else self.lse
            out = out - F.sigmoid(block_lse - lse) * (out - block_out)
            lse = lse - F.logsigmoid(lse - block_lse)
            if partial:   # _partial_update(..., idx=1, add=False)
                self.lse = torch.cat([self.lse.chunk(2, dim=2)[0], lse], dim=2)
                self.out = torch.cat([self.out.chunk(2, dim=2)[0], out], dim=2)
            else:
                self.out, self.lse = out, lse

    def finish(self, last_step):
        return self.out.transpose(1, 2).to(self.q.dtype), self.lse.squeeze(dim=-1)


def _te_lse_correction(lse: torch.Tensor, lse_per_step: torch.Tensor) -> None:
    """flash_attn_fwd_softmax_lse_correction: lse <- log(e^lse + e^lse_per_step), in place."""
    max_scale = torch.max(lse, lse_per_step)
    min_scale = torch.min(lse, lse_per_step)
    lse.copy_(max_scale + torch.log1p(torch.exp(min_scale - max_scale)))


def _te_out_correction_init(out_per_step: torch.Tensor, lse: torch.Tensor,
                            lse_per_step: torch.Tensor) -> torch.Tensor:
    """flash_attn_fwd_out_correction_init: the first step's output, rescaled, in its own dtype;
    (b, h, t, d) and (b, h, t) here."""
    return (out_per_step * torch.exp(lse_per_step - lse).unsqueeze(-1)).to(out_per_step.dtype)


def _te_out_correction(out: torch.Tensor, out_per_step: torch.Tensor, lse: torch.Tensor,
                       lse_per_step: torch.Tensor) -> None:
    """flash_attn_fwd_out_correction: out += out_per_step * e^(lse_per_step - lse), in place."""
    out.add_(out_per_step * torch.exp(lse_per_step - lse).unsqueeze(-1))


class _Te:
    """TransformerEngine p2p's corrections (module docstring)."""

    def __init__(self, q: torch.Tensor, tag, compiled: bool = False):
        self.q, self.tag = q, tag
        fuse = _compiled if compiled else (lambda fn: fn)
        self.lse_correction = fuse(_te_lse_correction)
        self.out_correction = fuse(_te_out_correction)
        self.out_correction_init = fuse(_te_out_correction_init)
        self.steps: list = []      # (step, out_per_step, lse_per_step, rows)
        self.lse = None

    def _correct_lse(self, i):
        step, _, lse_i, rows = self.steps[i]
        with self.tag(step):
            if self.lse is None:
                self.lse = lse_i.clone()
            else:
                self.lse_correction(self.lse[:, :, rows], lse_i)

    def add(self, step, b_out, b_lse, piece):
        self.steps.append((step, b_out, b_lse, piece.q))
        if len(self.steps) > 1:   # the statistics of the step before, after this step's call
            self._correct_lse(len(self.steps) - 2)

    def finish(self, last_step):
        self._correct_lse(len(self.steps) - 1)
        out = None
        for step, out_i, lse_i, rows in self.steps:
            with self.tag(step):
                if out is None:
                    if rows != ALL:
                        raise RingsimError("TransformerEngine's first step covers every query row")
                    out = self.out_correction_init(out_i, self.lse, lse_i)
                else:
                    self.out_correction(out[:, :, rows], out_i, self.lse[:, :, rows], lse_i)
        return out.transpose(1, 2).to(self.q.dtype), self.lse


MERGERS = {"fused": _Fused, "unfused": _Unfused, "te": _Te, "torch": _TorchMerger}
"""The merge each sim.implementations merge key names, as hw runs it."""


def ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, ring: Ring, layout: str, causal: bool,
                 ops: BlockOps, library: str, step0: int = 0,
                 compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's output (q's dtype and shape) and log-sum-exp (fp32, (b, h, t)) of `library`'s
    ring; `compiled`: its merge compiled as the library compiles it (module docstring), else eager."""
    impl = ring_implementation(library)
    key = impl.merge or "fused"
    if key not in MERGERS:
        raise RingsimError(f"no in-process merge {key!r} for {library}")
    n, r, c = ring.n_gpus, ring.rank, q.shape[1]
    chunks, pairs = chunks_of_rank(layout, n), exact_work(layout, c * n, n, causal)
    flops = _pair_flops(q)

    @contextmanager
    def tag(step):
        with _part(ring, library, "fwd", step0 + step, "merge"):
            yield

    merger = MERGERS[key](q, tag, compiled)
    qh = _heads_first(q)
    block_at = _kv_buffers(k, v, n)
    comm = ring.comm("kv")
    for step in range(n):
        owner = (r - step) % n
        cur = block_at(step)
        if step < n - 1:
            comm.post(cur, block_at(step + 1), step=step0 + step, send_chunks=chunks[owner],
                      recv_chunks=chunks[(owner - 1) % n], holds=(step0 + step, chunks[r], chunks[owner]))
        pieces = _calls(impl, "fwd", layout, r, owner, n, c, causal, pairs[r, owner])
        if pieces:
            t0 = ring.clock.mark()
            kh, vh = cur
            for p in pieces:
                with _part(ring, library, "fwd", step0 + step, "call"):
                    b_out, b_lse = ops.forward(qh[:, :, p.q], kh[:, :, p.kv], vh[:, :, p.kv], p.causal)
                merger.add(step, b_out, b_lse, p)
            if ring.recorder is not None:
                ring.recorder.compute("fwd", step0 + step, t0, ring.clock.mark(), float(pairs[r, owner] * flops),
                                      chunks[r], chunks[owner])
            else:
                ring.clock.mark()
        if step < n - 1:
            comm.wait(step=step0 + step + 1, q_chunks=chunks[r], kv_chunks=chunks[(owner - 1) % n])
    ring.clock.mark()       # what is left of the merge (TransformerEngine's corrections), alone too
    result = merger.finish(n - 1)
    ring.clock.mark()
    return result


def ring_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, *, ring: Ring, layout: str, causal: bool, ops: BlockOps, library: str,
                  step0: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of this rank's shard (input dtype) of `library`'s ring (module docstring)."""
    impl = ring_implementation(library)
    n, r, c = ring.n_gpus, ring.rank, q.shape[1]
    chunks, pairs = chunks_of_rank(layout, n), exact_work(layout, c * n, n, causal)
    flops = BWD_FLOPS_FACTOR * _pair_flops(q)
    qh, outh, douth = _heads_first(q), _heads_first(out), _heads_first(dout)
    dq = torch.zeros(qh.shape, dtype=torch.float32, device=q.device)
    block_at = _kv_buffers(k, v, n)
    kv_shape = block_at(0)[0].shape
    dkv_in = [(_tokens_first_fp32(kv_shape, q.device), _tokens_first_fp32(kv_shape, q.device))
              for _ in range(2 if n > 1 else 0)]
    kv_comm, dkv_comm = ring.comm("kv"), ring.comm("dkv")
    acc = None
    for step in range(n):
        owner = (r - step) % n
        cur = block_at(step)
        if step < n - 1:
            kv_comm.post(cur, block_at(step + 1), step=step0 + step, send_chunks=chunks[owner],
                         recv_chunks=chunks[(owner - 1) % n], holds=(step0 + step, chunks[r], chunks[owner]))
        pieces = _calls(impl, "bwd", layout, r, owner, n, c, causal, pairs[r, owner])
        shares = []
        if pieces:
            t0 = ring.clock.mark()
            kh, vh = cur
            for p in pieces:
                with _part(ring, library, "bwd", step0 + step, "call"):
                    g_q, g_k, g_v = ops.backward(douth[:, :, p.q], qh[:, :, p.q], kh[:, :, p.kv], vh[:, :, p.kv],
                                                 outh[:, :, p.q], lse[:, :, p.q], p.causal)
                with _part(ring, library, "bwd", step0 + step, "merge"):
                    dq[:, :, p.q] += g_q
                shares.append((p.kv, g_k, g_v))
            if step == 0:
                with _part(ring, library, "bwd", step0 + step, "merge"):
                    acc = _first_dkv(shares, kv_shape, q.device)
            if ring.recorder is not None:
                ring.recorder.compute("bwd", step0 + step, t0, ring.clock.mark(), float(pairs[r, owner] * flops),
                                      chunks[r], chunks[owner])
            else:
                ring.clock.mark()
        if step == 0 and acc is None:
            acc = _first_dkv(shares, kv_shape, q.device)
        if step > 0:   # the accumulator of this block, from rank r - 1, with this rank's share added
            dkv_comm.wait(step=step0 + step, q_chunks=chunks[r], kv_chunks=chunks[owner])
            acc = dkv_in[(step - 1) % 2]
            if shares:
                ring.clock.mark()
                with _part(ring, library, "bwd", step0 + step, "merge"):
                    for sl, g_k, g_v in shares:
                        acc[0][:, :, sl] += g_k
                        acc[1][:, :, sl] += g_v
                ring.clock.mark()
        if n > 1:
            nxt = (step0 + step + 1, chunks[r], chunks[(owner - 1) % n]) if step < n - 1 else None
            dkv_comm.post([_heads_first(x) for x in acc], [_heads_first(x) for x in dkv_in[step % 2]],
                          step=step0 + step, send_chunks=chunks[owner], recv_chunks=chunks[(owner - 1) % n],
                          holds=nxt)
        if step < n - 1:
            kv_comm.wait(step=step0 + step + 1, q_chunks=chunks[r], kv_chunks=chunks[(owner - 1) % n])
    if n > 1:
        dkv_comm.wait(step=step0 + n - 1, q_chunks=chunks[r], kv_chunks=chunks[r])
        acc = dkv_in[(n - 1) % 2]
    return (_heads_first(dq).to(q.dtype), _heads_first(acc[0]).to(k.dtype), _heads_first(acc[1]).to(v.dtype))
