"""`ringsim gemm`: the GEMM model's time of one matrix product (sim.gemm)."""

from __future__ import annotations

import argparse
import json

from sim.presets import GPU_PRESETS


def register(sub) -> None:
    g = sub.add_parser("gemm", help="the GEMM model's time of one product C (M x N) = A (M x K) B (K x N), "
                                    "called alone")
    g.add_argument("--m", type=int, required=True, help="rows of A and C (tokens, for a linear layer's forward)")
    g.add_argument("--n", type=int, required=True, help="columns of B and C")
    g.add_argument("--k", type=int, required=True, help="the reduced dimension")
    g.add_argument("--gpu", default="H100-SXM", help=f"GPU preset: {', '.join(GPU_PRESETS)} (default H100-SXM)")
    g.add_argument("--fp8", action="store_true", help="FP8 (e4m3) inputs, bf16 output (default bf16)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(func=cmd_gemm)


def cmd_gemm(a: argparse.Namespace) -> int:
    from sim.gemm import gemm_time
    from sim.presets import gpu_preset
    from sim.units import fmt_s

    t = gemm_time(a.m, a.n, a.k, a.gpu, fp8=a.fp8)
    flops = 2.0 * a.m * a.n * a.k
    out = {"gpu": gpu_preset(a.gpu).name, "m": a.m, "n": a.n, "k": a.k, "dtype": "fp8" if a.fp8 else "bf16",
           "time_s": t.time_s, "tflops": flops / t.time_s / 1e12, "math_s": t.math_s, "memory_s": t.memory_s,
           "floor_s": t.floor_s, "bound": t.bound, "tiles": t.tiles, "waves": t.waves, "split_k": t.split_k,
           "rate_tflops": t.rate_tflops, "rate_source": t.rate_source}
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{out['gpu']}, {out['dtype']}: {a.m} x {a.n} over {a.k}: {fmt_s(t.time_s)} "
          f"({out['tflops']:.1f} TFLOP/s, {t.bound}-bound)")
    print(f"{t.tiles} tiles in {t.waves} wave{'s' if t.waves > 1 else ''}"
          + (f", K split {t.split_k} ways" if t.split_k > 1 else "")
          + f"; math {fmt_s(t.math_s)}, memory {fmt_s(t.memory_s)}, floor {fmt_s(t.floor_s)}")
    print(f"rate: {t.rate_tflops:g} TFLOP/s, {t.rate_source}")
    return 0
