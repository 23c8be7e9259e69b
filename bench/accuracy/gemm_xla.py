"""The GEMM model (sim.hardware.gemm) against OpenXLA's measured matmul table for Hopper.

OpenXLA ships a table of measured matrix products per GPU for its cost model:
xla/service/gpu/model/default_matmul_perf_table.txtpb (upstream commit ad6eaee1b2,
2026-07-10; its sm_90 entries were last updated in b2766086ec and 71feeddf7c, 2025). For
sm_90 it holds 375 batched products, b in {1, 2, 4} and m, n, k in {256, ..., 4096}, each
with the FLOP/s of its kernel (the median of five profiled runs, kernel time alone) in
BF16 and in FP8 (e4m3 x e4m3 -> bf16). bench/accuracy/data/xla_sm90_matmul.csv holds them.

Each product is set beside the model's kernel time on the H100-SXM preset (sm_90; the
table does not name the H100 variant): max(math, memory) of `gemm_time(..., batch=b)`,
without the host floor or the gap between kernels, which a profiled kernel time leaves
out. Nothing is fitted: the model's rate is the published MAMF. Printed: the error
(model / measured - 1) over all products and by size, its median, the share within 10%
and 25%, and the products the model misses most.

The FP8 entries are shown but not judged: 29 of them exceed the H100's dense FP8 peak
(1,979 TFLOP/s, NVIDIA's datasheet), up to 2,593, which no dense e4m3 product can, so
that column does not measure what its name says.

    .venv/bin/python bench/accuracy/gemm_xla.py   # prints the tables, writes bench/results/accuracy/gemm-xla-h100.json
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import RESULTS, add_force, keep_results, save_json  # noqa: E402
from sim.hardware.gemm import gemm_time  # noqa: E402
from sim.units import table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data" / "xla_sm90_matmul.csv"
GPU = "H100-SXM"
FP8_PEAK = 1979e12
"""The H100 SXM's dense FP8 tensor-core peak, FLOP/s (NVIDIA H100 datasheet)."""
SIZES = (("small: under 1 GFLOP", 0, 1e9), ("medium: 1-10 GFLOP", 1e9, 1e10), ("large: 10 GFLOP and more", 1e10, 1e99))


def read_table(path: Path = DATA) -> list[dict]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return [{k: int(v) for k, v in r.items()} for r in rows]


def compare(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        flop = 2.0 * r["b"] * r["m"] * r["n"] * r["k"]
        for dtype, key in (("bf16", "bf16_flops"), ("fp8", "fp8_e4m3_flops")):
            g = gemm_time(r["m"], r["n"], r["k"], GPU, fp8=dtype == "fp8", alone=False, batch=r["b"])
            model = max(g.math_s, g.memory_s)
            measured = flop / r[key]
            out.append({**{k: r[k] for k in "bmnk"}, "dtype": dtype, "gflop": flop / 1e9, "measured_s": measured,
                        "model_s": model, "error": model / measured - 1, "bound": g.bound, "split_k": g.split_k})
    return out


def summary(rows: list[dict]) -> dict:
    errs = [abs(r["error"]) for r in rows]
    signed = [r["error"] for r in rows]
    return {"products": len(rows), "median_abs_error": statistics.median(errs), "median_error": statistics.median(signed),
            "within_10": sum(e <= 0.10 for e in errs) / len(errs), "within_25": sum(e <= 0.25 for e in errs) / len(errs),
            "worst_abs_error": max(errs)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(RESULTS / "accuracy" / "gemm-xla-h100.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("gemm_xla", a.out, force=a.force)
    measured = read_table()
    rows = compare(measured)
    print(f"GEMM model ({GPU}) against OpenXLA's measured sm_90 matmuls; error = model / measured - 1\n")
    lines, out = [], {}
    for dtype in ("bf16", "fp8"):
        for name, lo, hi in (("all", 0, 1e99), *SIZES):
            mine = [r for r in rows if r["dtype"] == dtype and lo <= r["gflop"] * 1e9 < hi]
            s = summary(mine)
            out[f"{dtype} {name}"] = s
            lines.append([dtype, name, f"{s['products']}", f"{s['median_error']:+.1%}", f"{s['median_abs_error']:.1%}",
                          f"{s['within_10']:.0%}", f"{s['within_25']:.0%}", f"{s['worst_abs_error']:.0%}"])
    print(table(["dtype", "products", "n", "median error", "median |error|", "within 10%", "within 25%", "worst"],
                lines))
    over = sum(r["fp8_e4m3_flops"] > FP8_PEAK for r in measured)
    print(f"\nFP8: {over} of {len(rows) // 2} entries run above the dense FP8 peak ({FP8_PEAK / 1e12:,.0f} TFLOP/s): "
          "not judged")
    worst = sorted((r for r in rows if r["dtype"] == "bf16"), key=lambda r: -abs(r["error"]))[:8]
    print("\nthe largest BF16 misses")
    print(table(["dtype", "b", "m", "n", "k", "GFLOP", "measured", "model", "error", "bound", "split-K"],
                [[r["dtype"], f"{r['b']}", f"{r['m']}", f"{r['n']}", f"{r['k']}", f"{r['gflop']:.2f}",
                  f"{r['measured_s'] * 1e6:.1f} us", f"{r['model_s'] * 1e6:.1f} us", f"{r['error']:+.0%}", r["bound"],
                  f"{r['split_k']}"] for r in worst]))
    save_json(a.out, {"source": str(DATA.relative_to(ROOT)), "gpu": GPU, "summary": out, "fp8_above_peak": over,
                      "products": rows}, force=a.force, indent=1)
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
