"""Attention of one piece of a ring block, forward and backward, returning the log-sum-exp.

The ring needs per-block results it can merge (`hw.merge`) and a backward that takes
the *final* output and log-sum-exp, so that each block's gradient is its exact share
(P = exp(S - lse), D = rowsum(dO·O) are global per query row). torch's fused attention
operators do both where the device has one: `_scaled_dot_product_flash_attention_for_cpu`
on CPU, `_scaled_dot_product_flash_attention` (bf16/fp16) and
`_scaled_dot_product_efficient_attention` (fp32) on CUDA. These are private operators,
so each is checked once per process against the plain matmul path on a small case
before it is trusted (`select_block_ops`); the matmul path is the fallback.

Tensors are (batch, heads, tokens, head_dim) views, K/V with `kv_heads` heads (GQA/MQA:
query head h uses K/V head h // (heads // kv_heads)); lse is (batch, heads, tokens)
fp32. A causal piece is square with the top-left diagonal (see `hw.layouts`), so every
row has at least one visible key. A piece of packed documents may instead carry an
explicit mask (bool (queries, keys), True: the pair is kept) that no fused operator takes
with its log-sum-exp back: it runs on the plain matmul path, where a row that keeps no
key gets output 0 and log-sum-exp -inf (the merge's empty row) and no gradient.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from sim.errors import RingsimError

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
aten = torch.ops.aten


def _expand_kv(k: torch.Tensor, v: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = heads // k.shape[1]
    if g == 1:
        return k, v
    return k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)


def _reduce_groups(dk: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """Sum the gradients of the query heads that share one K/V head."""
    b, h, t, d = dk.shape
    if h == kv_heads:
        return dk
    return dk.reshape(b, kv_heads, h // kv_heads, t, d).sum(dim=2)


class BlockOps:
    """One implementation of per-piece attention; subclasses fill in the two calls."""

    name = "base"
    native_gqa = True
    """False: K/V heads are repeated to the query heads before the call."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(out in q's dtype, lse fp32) of q against k, v; `mask` (bool (queries, keys))
        in place of `causal` for a piece with an explicit mask."""
        if mask is not None:
            return _matmul_forward(q, *_expand_kv(k, v, q.shape[1]), False, mask)
        if not self.native_gqa:
            k, v = _expand_kv(k, v, q.shape[1])
        return self._forward(q, k, v, causal)

    def backward(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 out: torch.Tensor, lse: torch.Tensor, causal: bool,
                 mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """dq, dk, dv of this piece, given the final out and lse of its query rows."""
        kv_heads = k.shape[1]
        if mask is not None:
            dq, dk, dv = _matmul_backward(dout, q, *_expand_kv(k, v, q.shape[1]), out, lse, False, mask)
        else:
            if not self.native_gqa:
                k, v = _expand_kv(k, v, q.shape[1])
            dq, dk, dv = self._backward(dout, q, k, v, out, lse.contiguous(), causal)
        return dq, _reduce_groups(dk, kv_heads), _reduce_groups(dv, kv_heads)

    def _forward(self, q, k, v, causal):  # pragma: no cover - abstract
        raise NotImplementedError

    def _backward(self, dout, q, k, v, out, lse, causal):  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        return self.name if self.native_gqa else f"{self.name}+expand-kv"


def _scores(q, k, causal, mask=None):
    """Scaled scores in fp32, masked pairs at -inf (`mask`: True where kept)."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        lq, lk = s.shape[-2], s.shape[-1]
        mask = torch.ones(lq, lk, dtype=torch.bool, device=s.device).tril()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s


def _probs(s, lse):
    # a row with every key masked has lse -inf: subtract 0 there so exp gives 0, not NaN
    return torch.exp(s - lse.masked_fill(lse == float("-inf"), 0.0).unsqueeze(-1))


def _matmul_forward(q, k, v, causal, mask=None):
    s = _scores(q, k, causal, mask)
    lse = torch.logsumexp(s, dim=-1)
    out = torch.matmul(_probs(s, lse), v.float())
    return out.to(q.dtype), lse


def _matmul_backward(dout, q, k, v, out, lse, causal, mask=None):
    scale = 1.0 / math.sqrt(q.shape[-1])
    p = _probs(_scores(q, k, causal, mask), lse)
    do = dout.float()
    dv = torch.matmul(p.transpose(-1, -2), do)
    dp = torch.matmul(do, v.float().transpose(-1, -2))
    ds = p * (dp - (do * out.float()).sum(-1, keepdim=True))
    dq = torch.matmul(ds, k.float()) * scale
    dk = torch.matmul(ds.transpose(-1, -2), q.float()) * scale
    return dq, dk, dv


class MatmulOps(BlockOps):
    """Scores, mask and softmax as plain tensor operations in fp32: works everywhere."""

    name = "matmul"
    native_gqa = False

    def _forward(self, q, k, v, causal):
        return _matmul_forward(q, k, v, causal)

    def _backward(self, dout, q, k, v, out, lse, causal):
        return _matmul_backward(dout, q, k, v, out, lse, causal)


class CpuFlashOps(BlockOps):
    """torch's fused CPU attention (flash-style tiling), GQA native."""

    name = "cpu-flash"

    def _forward(self, q, k, v, causal):
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        return out, lse

    def _backward(self, dout, q, k, v, out, lse, causal):
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, causal)


class CudaFlashOps(BlockOps):
    """FlashAttention-2 as shipped in torch (bf16/fp16 on CUDA).

    Its backward takes the forward's rng state even without dropout; any forward's
    state serves, so the first forward's is kept (the probe guarantees there is one).
    """

    name = "cuda-flash"

    def __init__(self, native_gqa: bool = True):
        self.native_gqa = native_gqa
        self._rng: tuple[Any, Any] | None = None

    def _forward(self, q, k, v, causal):
        out, lse, _cq, _ck, _mq, _mk, rng, unused, _dbg = aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, causal, False)
        if self._rng is None:
            self._rng = (rng, unused)
        return out, lse

    def _backward(self, dout, q, k, v, out, lse, causal):
        if self._rng is None:
            self._forward(q[:, :, :1], k[:, :, :1], v[:, :, :1], False)
        rng, unused = self._rng
        # cum_seq_q/k are undefined for dense (non-varlen) inputs: None passes that
        dq, dk, dv = aten._scaled_dot_product_flash_attention_backward(
            dout, q, k, v, out, lse, None, None, q.shape[2], k.shape[2], 0.0, causal,
            rng, unused)
        return dq, dk, dv


class CudaEfficientOps(BlockOps):
    """Memory-efficient attention (fp32 on CUDA). Its log-sum-exp is padded to a multiple
    of 32 rows; the merge gets the real rows, the backward the padded layout back."""

    name = "cuda-efficient"
    native_gqa = False
    _ALIGN = 32

    def __init__(self) -> None:
        self._philox: tuple[Any, Any] | None = None

    def _forward(self, q, k, v, causal):
        out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, causal)
        if self._philox is None:
            self._philox = (seed, offset)
        return out, lse[..., : q.shape[2]]

    def _backward(self, dout, q, k, v, out, lse, causal):
        if self._philox is None:
            self._forward(q[:, :, :1], k[:, :, :1], v[:, :, :1], False)
        rows = q.shape[2]
        padded = -(-rows // self._ALIGN) * self._ALIGN
        lse_p = torch.nn.functional.pad(lse, (0, padded - rows)).contiguous()
        seed, offset = self._philox
        dq, dk, dv, _db = aten._scaled_dot_product_efficient_attention_backward(
            dout, q, k, v, None, out, lse_p, seed, offset, 0.0, [True, True, True, False], causal)
        return dq, dk, dv


def _candidates(device: str, dtype: str) -> list[BlockOps]:
    if device == "cpu":
        return [CpuFlashOps()]
    if dtype in ("bf16", "fp16"):
        return [CudaFlashOps(native_gqa=True), CudaFlashOps(native_gqa=False)]
    return [CudaEfficientOps()]


def _agrees(ops: BlockOps, device: str, dtype: str, head_dim: int) -> bool:
    """Does `ops` match the matmul path on a small GQA case, full and causal, fwd and bwd?"""
    gen = torch.Generator().manual_seed(1234)
    dt = TORCH_DTYPES[dtype]

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dt)

    tol = 2e-3 if dtype == "fp32" else 6e-2
    ref = MatmulOps()
    for lq, lk, causal in ((40, 24, False), (40, 40, True)):
        q, k, v = rnd(1, 4, lq, head_dim), rnd(1, 2, lk, head_dim), rnd(1, 2, lk, head_dim)
        dout = rnd(1, 4, lq, head_dim)
        got = ops.forward(q, k, v, causal)
        want = ref.forward(q, k, v, causal)
        grads = ops.backward(dout, q, k, v, want[0], want[1], causal)
        want_g = ref.backward(dout, q, k, v, want[0], want[1], causal)
        for a, b in zip((*got, *grads), (*want, *want_g)):
            if a.shape != b.shape or not torch.isfinite(a.float()).all():
                return False
            if (a.float() - b.float()).abs().max().item() > tol * max(1.0, b.float().abs().max().item()):
                return False
    return True


_CHOSEN: dict[tuple[str, str, int, str], BlockOps] = {}


def select_block_ops(device: str, dtype: str, head_dim: int, want: str = "auto") -> BlockOps:
    """The per-piece implementation for this device and dtype.

    want: 'matmul' (plain path), 'fused' (a fused operator or an error) or 'auto'
    (the first fused operator that passes its check, else matmul).
    """
    key = (device, dtype, head_dim, want)
    if key in _CHOSEN:
        return _CHOSEN[key]
    chosen: BlockOps | None = MatmulOps() if want == "matmul" else None
    if chosen is None:
        for ops in _candidates(device, dtype):
            try:
                ok = _agrees(ops, device, dtype, head_dim)
            except (RuntimeError, NotImplementedError, TypeError):
                ok = False  # the operator is missing or refuses this dtype/shape
            if ok:
                chosen = ops
                break
    if chosen is None:
        if want == "fused":
            raise RingsimError(f"no fused attention operator works for {dtype} on {device} "
                               f"with head dim {head_dim}; use block_impl 'auto' or 'matmul'")
        chosen = MatmulOps()
    _CHOSEN[key] = chosen
    return chosen
