"""Measure the linear layers' products on one GPU and set the GEMM model (sim.hardware.gemm) beside them.

For each model (llama3-8b, -70b, -405b), tensor-parallel degree and token count: the four
products of a layer (QKV, output, gate and up, down) forward, and each one's input and
weight gradient, `torch.mm` on random bf16 matrices (and FP8 e4m3 through
`torch._scaled_mm` where the GPU and torch have it), timed with CUDA events over repeated
calls after a warm-up (the median of the repeats, each the mean of `--inner` queued
calls), and the model's time of the same product queued (`gemm_time(..., alone=False)`).
Writes every product with both times; prints the median and largest |error| per dtype.

    python bench/gpu/gemm_grid.py OUT.json [--models llama3-8b,...] [--tp 1,2,4,8] [--tokens 2048,...] [--force]

Needs a CUDA build of torch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import ints, keep_results, save_json  # noqa: E402
from sim.hardware.gemm import Linear, gemm_time, linear_products  # noqa: E402
from sim.scenario.models import model_preset  # noqa: E402
from sim.training.step import layer_linears  # noqa: E402


def products(model: str, tp: int, tokens: int) -> list[tuple[str, int, int, int]]:
    out = []
    for name, (k_in, n_out) in layer_linears(model_preset(model), tp).items():
        for which, (m, n, k) in linear_products(tokens, Linear(name, k_in=k_in, n_out=n_out)).items():
            out.append((f"{name} {which}", m, n, k))
    return out


def measure(torch, m: int, n: int, k: int, fp8: bool, repeats: int, inner: int) -> float:
    dev = "cuda"
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=dev, dtype=torch.bfloat16).t()       # column-major B, as linear layers hold it
    if fp8:
        a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev)

        def run():
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        def run():
            return torch.mm(a, b)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--models", default="llama3-8b,llama3-70b,llama3-405b")
    p.add_argument("--tp", type=ints, default=[1, 2, 4, 8])
    p.add_argument("--tokens", type=ints, default=[2048, 4096, 8192, 16384, 32768])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--inner", type=int, default=5)
    p.add_argument("--no-fp8", action="store_true")
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    out = Path(a.out)
    keep_results("gemm_grid", out, force=a.force)
    import torch

    if not torch.cuda.is_available():
        p.error("no CUDA device visible to torch")
    gpu = torch.cuda.get_device_name()
    preset = "H200" if "H200" in gpu else "H100-SXM" if "H100" in gpu else "A100-SXM-80GB" if "A100" in gpu else None
    if preset is None:
        p.error(f"no GPU preset for {gpu}")
    fp8s = [False] + ([] if a.no_fp8 or not hasattr(torch, "_scaled_mm") or
                      torch.cuda.get_device_capability() < (8, 9) else [True])
    rows = []
    for model in a.models.split(","):
        for tp in a.tp:
            for tokens in a.tokens:
                for name, m, n, k in products(model, tp, tokens):
                    for fp8 in fp8s:
                        got = measure(torch, m, n, k, fp8, a.repeats, a.inner)
                        want = gemm_time(m, n, k, preset, fp8=fp8, alone=False).time_s
                        rows.append({"model": model, "tp": tp, "tokens": tokens, "product": name, "m": m, "n": n,
                                     "k": k, "dtype": "fp8" if fp8 else "bf16", "measured_s": got, "model_s": want,
                                     "error": want / got - 1})
    save_json(out, {"gpu": gpu, "preset": preset, "torch": torch.__version__, "rows": rows}, force=a.force, indent=1)
    for dtype in ("bf16", "fp8"):
        errs = [abs(r["error"]) for r in rows if r["dtype"] == dtype]
        if errs:
            within = sum(e <= 0.25 for e in errs)
            print(f"{dtype}: {len(errs)} products, median |error| {statistics.median(errs):.1%}, "
                  f"largest {max(errs):.1%}, within 25% {within}/{len(errs)}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
