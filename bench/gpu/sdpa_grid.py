"""Isolated calls of torch's scaled_dot_product_attention, by backend, as a bench file that
`ringsim calibrate` fits a GPU profile to and bench/gpu/vs_preset.py checks the block model
against.

Each call is timed alone: a synchronize, a CUDA event, the call, a CUDA event (forward:
F.scaled_dot_product_attention; backward: torch.autograd.grad of a forward kept for it).
The grid: head counts with and without GQA, 512 to 32k tokens, causal and full, forward
and backward, on every backend torch offers here (flash, cuDNN). On a CPU the same
harness runs with wall-clock timing (for its tests), backend 'flash' only.

    python bench/gpu/sdpa_grid.py OUT.json [--heads 8,16,32,64] [--kv-heads 8] [--tokens 512,...,32768]
        [--backends flash,cudnn] [--samples 7] [--device cuda] [--force]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import ints  # noqa: E402
from sim.errors import RingsimError  # noqa: E402
from sim.files import kept_file, write_json

IMPL = {"flash": "cuda-flash", "cudnn": "cuda-cudnn"}


def measure(torch, device, backend: str, kind: str, causal: bool, heads: int, kv_heads: int, tokens: int,
            head_dim: int, samples: int, warmup: int) -> list[float]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    dtype = torch.bfloat16
    q = torch.randn(1, heads, tokens, head_dim, device=device, dtype=dtype, requires_grad=kind == "bwd")
    k = torch.randn(1, kv_heads, tokens, head_dim, device=device, dtype=dtype, requires_grad=kind == "bwd")
    v = torch.randn(1, kv_heads, tokens, head_dim, device=device, dtype=dtype, requires_grad=kind == "bwd")
    gqa = dict(enable_gqa=True) if kv_heads != heads else {}
    with sdpa_kernel([which]):
        if kind == "fwd":
            def call():
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
            dout = torch.randn_like(out)

            def call():
                return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        cuda = device.type == "cuda"
        times = []
        for i in range(warmup + samples):
            if cuda:
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                end.synchronize()
                t = start.elapsed_time(end) / 1e3
            else:
                t0 = time.perf_counter()
                call()
                t = time.perf_counter() - t0
            if i >= warmup:
                times.append(t)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="bench file to write (ringsim-hw-bench format, compute entries)")
    p.add_argument("--heads", type=ints, default=[8, 16, 32, 64])
    p.add_argument("--kv-heads", type=lambda t: ints(t, 0), default=[0],
                   help="K/V heads (0: as many as the query heads); a list")
    p.add_argument("--tokens", type=ints, default=[512, 1024, 2048, 4096, 8192, 16384, 32768])
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--backends", default="flash,cudnn")
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cuda")
    p.add_argument("--force", action="store_true", help="overwrite OUT")
    a = p.parse_args(argv)
    try:
        why = kept_file(a.out, a.force)
        if why:
            raise RingsimError(why)
        backends = [b for b in a.backends.split(",") if b]
        unknown = [b for b in backends if b not in IMPL]
        if unknown:
            raise RingsimError(f"unknown backend {unknown[0]!r}; choose from {', '.join(IMPL)}")
        import torch

        device = torch.device(a.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RingsimError(f"no CUDA device visible to torch {torch.__version__}")
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        doc = {"format": "ringsim-hw-bench", "version": 1, "complete": False,
               "device": {"kind": device.type, "name": name, "torch": torch.__version__,
                          "harness": "bench/gpu/sdpa_grid.py: F.scaled_dot_product_attention, isolated calls"},
               "settings": {"samples": a.samples, "warmup": a.warmup}, "compute": []}
        for backend in backends:
            for heads in a.heads:
                for kvh in a.kv_heads:
                    kv_heads = kvh or heads
                    if heads % kv_heads:
                        continue
                    for tokens in a.tokens:
                        for causal in (False, True):
                            for kind in ("fwd", "bwd"):
                                try:
                                    times = measure(torch, device, backend, kind, causal, heads, kv_heads, tokens,
                                                    a.head_dim, a.samples, a.warmup)
                                except RuntimeError as e:     # a backend that does not take this shape here
                                    print(f"skipped {backend} {kind} {heads}/{kv_heads} x {tokens}: "
                                          f"{str(e).splitlines()[0][:120]}", file=sys.stderr)
                                    continue
                                pairs = tokens * (tokens + 1) // 2 if causal else tokens * tokens
                                med = statistics.median(times)
                                doc["compute"].append({
                                    "kind": kind, "dtype": "bf16", "batch": 1, "heads": heads, "kv_heads": kv_heads,
                                    "head_dim": a.head_dim, "q_tokens": tokens, "kv_tokens": tokens,
                                    "mask": "diagonal" if causal else "full", "impl": IMPL[backend],
                                    "flops": (2.5 if kind == "bwd" else 1.0) * 4 * a.head_dim * pairs * heads,
                                    "time_s": times, "median_s": med})
                                print(f"{backend:5} {kind} {'causal' if causal else 'full':6} {heads:3}/{kv_heads:<3} "
                                      f"x {tokens:6}: {med * 1e3:8.3f} ms", flush=True)
                                write_json(a.out, doc, overwrite=True)
        doc["complete"] = True
        write_json(a.out, doc, overwrite=True)
    except RingsimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
