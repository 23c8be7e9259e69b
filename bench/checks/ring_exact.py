"""Is the ring kernel exact on this device? Its numbers against torch's attention in fp64.

Plays the ring (`hw.ring`, forward and backward) on 2 to 8 ranks as threads of one
process on one device (`hw.inprocess`: a single GPU cannot hold an NCCL ring of several
ranks), on the device's own block operators (on CUDA: FlashAttention-2 for bf16/fp16,
memory-efficient attention for fp32), for each layout, causal and full, MHA and GQA, and
compares output, dQ, dK and dV with full attention computed in float64 by torch's SDPA
and autograd. The yardstick for a low-precision dtype is torch's own fused attention in
that dtype against the same reference: the ring passes where its error is at most twice
torch's (or under a floor of a few units of the dtype's rounding).

    python bench/checks/ring_exact.py [--device auto|cpu|cuda] [--seq 8192] [--heads 8]
        [--kv-heads 8 2] [--head-dim 128] [--gpus 2 4 8] [--dtypes bf16 fp16 fp32]
        [--block-impl auto|fused|matmul] [--json out.json [--force]]

Exit status 1 when a case fails, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.errors import RingsimError  # noqa: E402
from sim.files import kept_file, write_json

LAYOUTS = ("contiguous", "striped", "zigzag")
FLOOR = {"fp32": 2e-5, "bf16": 1.6e-2, "fp16": 2e-3}
"""An error this small (relative to max(1, the reference's largest magnitude)) passes
whatever torch's own is: a few units of the dtype's rounding of a result near 1."""
NAMES = ("out", "dq", "dk", "dv")


def _attention(q, k, v, dout, causal: bool, dtype=None):
    """Output, dq, dk, dv of full attention by torch's SDPA and autograd, on q's device, in
    `dtype` (None: the inputs' own, torch's fused kernel where it has one)."""
    import torch.nn.functional as F

    qq, kk, vv = (x.detach().to(dtype or x.dtype).transpose(1, 2).requires_grad_() for x in (q, k, v))
    out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, enable_gqa=qq.shape[1] != kk.shape[1])
    out.backward(dout.to(dtype or dout.dtype).transpose(1, 2))
    return (out.detach().transpose(1, 2), *(x.grad.transpose(1, 2) for x in (qq, kk, vv)))


def _errors(got, ref) -> list[float]:
    """Largest |got - ref| of each tensor, relative to max(1, the reference's largest |value|)."""
    return [(g.double() - r).abs().max().item() / max(1.0, r.abs().max().item()) for g, r in zip(got, ref)]


def run(device: str, *, seq: int, batch: int, heads: int, kv_heads: list[int], head_dim: int,
        gpu_counts: list[int], dtypes: list[str], layouts: tuple[str, ...] = LAYOUTS,
        block_impl: str = "auto", seed: int = 0, log=print) -> dict:
    """Every case's errors, torch's, and whether it passed."""
    import torch

    from hw.blocks import TORCH_DTYPES, select_block_ops
    from hw.inprocess import play_ring

    dev = torch.device(device)
    rows = []
    for causal, kvh, dtype in itertools.product((True, False), kv_heads, dtypes):
        gen = torch.Generator().manual_seed(seed + 1000 * kvh + (1 if causal else 0))
        dt = TORCH_DTYPES[dtype]
        q, dout = (torch.randn(batch, seq, heads, head_dim, generator=gen).to(dev, dt) for _ in range(2))
        k, v = (torch.randn(batch, seq, kvh, head_dim, generator=gen).to(dev, dt) for _ in range(2))
        ref = _attention(q, k, v, dout, causal, torch.float64)
        own = _errors(_attention(q, k, v, dout, causal), ref)
        ops = select_block_ops(dev.type, dtype, head_dim, block_impl)
        for n_gpus, layout in itertools.product(gpu_counts, layouts):
            t0 = time.perf_counter()
            got = play_ring(q, k, v, dout, n_gpus=n_gpus, layout=layout, causal=causal, ops=ops)
            errs = _errors(got, ref)
            bound = [max(2 * o, FLOOR[dtype]) for o in own]
            ok = all(e <= b for e, b in zip(errs, bound))
            rows.append({"n_gpus": n_gpus, "layout": layout, "causal": causal, "kv_heads": kvh, "dtype": dtype,
                         "ops": ops.describe(), "errors": dict(zip(NAMES, errs)), "torch": dict(zip(NAMES, own)),
                         "ok": ok, "seconds": time.perf_counter() - t0})
            log(f"{n_gpus:>5}  {layout:<10}  {'causal' if causal else 'full':<6}  {kvh:>3}  {dtype:<4}  "
                f"{ops.describe():<14}  " + "  ".join(f"{e:.1e}/{o:.1e}" for e, o in zip(errs, own))
                + f"  {'ok' if ok else 'FAIL'}")
    return {"device": _describe(dev), "torch": torch.__version__, "seq": seq, "batch": batch, "heads": heads,
            "head_dim": head_dim, "cases": rows, "failed": sum(not r["ok"] for r in rows)}


def _describe(dev) -> str:
    import torch

    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    from sim.hardware.host import this_host

    return this_host()["device"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="(default: cuda when available)")
    ap.add_argument("--seq", type=int, default=8192, help="tokens (default 8192)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, nargs="+", default=[8, 2], help="(default 8 2: MHA and GQA)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--gpus", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--dtypes", nargs="+", choices=["fp32", "bf16", "fp16"], default=["bf16", "fp16", "fp32"])
    ap.add_argument("--block-impl", choices=["auto", "fused", "matmul"], default="auto")
    ap.add_argument("--json", metavar="OUT", help="also write the cases to OUT")
    ap.add_argument("--force", action="store_true", help="overwrite OUT")
    a = ap.parse_args(argv)
    try:
        import torch

        device = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        if device == "cuda" and not torch.cuda.is_available():
            raise RingsimError(f"--device cuda: torch {torch.__version__} sees no CUDA device")
        for w in a.gpus:
            chunks = 2 * w
            if w < 1 or a.seq % chunks:
                raise RingsimError(f"--seq {a.seq} must divide into 2 x {w} chunks (zigzag on {w} ranks)")
        for kvh in a.kv_heads:
            if kvh < 1 or a.heads % kvh:
                raise RingsimError(f"--kv-heads {kvh} must divide --heads {a.heads}")
        why = kept_file(a.json, a.force)
        if why:
            raise RingsimError(why)
        print(f"ring against fp64 attention on {device}: {a.batch} x {a.seq} tokens, {a.heads} heads x "
              f"{a.head_dim}; error of ring / of torch's own attention in the dtype (relative)")
        print(f"{'ranks':>5}  {'layout':<10}  {'mask':<6}  {'kvh':>3}  {'type':<4}  {'ops':<14}  "
              + "  ".join(f"{n:<15}" for n in NAMES))
        result = run(device, seq=a.seq, batch=a.batch, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
                     gpu_counts=a.gpus, dtypes=a.dtypes, block_impl=a.block_impl)
        print(f"{len(result['cases']) - result['failed']} of {len(result['cases'])} cases exact "
              f"within twice torch's own error or the dtype's floor ({result['device']}, torch {result['torch']})")
        if a.json:
            write_json(a.json, result, overwrite=a.force)
    except RingsimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
