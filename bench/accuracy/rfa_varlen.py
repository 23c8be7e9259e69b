"""The simulator against ring-flash-attention's published varlen table.

zhuzilin/ring-flash-attention README, 'Performance Summary', varlen api (commit 8996282):
8 x H800 and 8 x A100, forward and forward+backward, ring_attn / zigzag_ring / llama3_attn
as a percentage of the "theoretic flash_attn" (flash_attn_varlen_func on one GPU's tokens,
its iterations per second / 8). Its benchmark (benchmark/benchmark_varlen_kvpacked_func.py):
every GPU holds 8192 tokens, Llama-3-8B attention (32 query heads, 8 K/V heads, head dim
128), bf16, causal, and the iterations cycle through four packings, given as each GPU's
cu_seqlens:

    [0, 8192]   [0, 256, 7648, 8192]   [0, 4096, 8192]   [0, 3104, 6304, 7904, 8064, 8192]

ring_flash_attn_varlen_func and zigzag_ring_flash_attn_varlen_func take those as the
local cu_seqlens: each document of the whole sequence is 8 times as long and is cut into
8 consecutive pieces (ring: the doc-contiguous layout here) or 16 chunks, rank r holding
chunks r and 15 - r (zigzag). llama3_flash_attn_varlen_func takes cu_seqlens x 8 as the
global documents of the packed sequence cut into 8 consecutive shards (the contiguous
layout), all-gathers K/V in head groups of heads_k_stride = 4 K/V heads (2 groups) and
attends in one varlen call per group (the allgather scheme with --head-groups 2). The
reference is flash_attn_varlen_func on the local tokens with the local cu_seqlens, one
varlen call per pass (a piece per document) in a loop. Each cell is (8 x mean reference
time) / mean ring time over the four packings, the same mean the benchmark's 100
iterations take.

Nothing is fitted to the table: the rates come from FlashAttention's published kernel
tables, the links from datasheets (sim.hardware.presets), and each function's step from
ring-flash-attention's code: the implementation `--impl rfa` of the ring
(sim.implementations.ring.rfa: the unfused merge at the streaming bandwidth measured on
each GPU, the host-side operations per step, the sends queued behind the compute) and of
the all-gather scheme (sim.implementations.allgather.rfa: llama3_flash_attn_varlen_func,
its outputs concatenated). Before implementations the table was read with the ideal
implementation and `--merge unfused` for all three: both are printed.

    .venv/bin/python bench/accuracy/rfa_varlen.py   # prints the table, writes
                                                    # bench/results/accuracy/rfa-varlen-h800-a100.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.accuracy.compare_rfa import MACHINES, hardware, order, workload  # noqa: E402
from bench.common import RESULTS, add_force, keep_results, save_json  # noqa: E402
from sim.cli.main import one_gpu_s  # noqa: E402
from sim.engine.play import simulate  # noqa: E402
from sim.hardware.cluster import Hardware  # noqa: E402
from sim.scenario.config import Scenario  # noqa: E402
from sim.scenario.resolve import settings_of  # noqa: E402
from sim.trace.metrics import compute_metrics  # noqa: E402

SOURCE = ("zhuzilin/ring-flash-attention README 'Performance Summary' (varlen api), commit 8996282; "
          "benchmark/benchmark_varlen_kvpacked_func.py")
TOKENS_PER_GPU = 8192
N_GPUS = 8
LOCAL_CU_SEQLENS = ([0, 8192], [0, 256, 7648, 8192], [0, 4096, 8192], [0, 3104, 6304, 7904, 8064, 8192])
SCHEMES = {"ring_attn": ("ring", "doc-contiguous", 1), "zigzag_ring": ("ring", "zigzag", 1),
           "llama3_attn": ("allgather", "contiguous", 2)}
# (GPU, pass) -> published theoretic flash_attn iter/s (before the / 8) and the cells, %.
PUBLISHED = {
    ("8xH800", "fwd"): (852.4, {"ring_attn": 49.1, "zigzag_ring": 70.2, "llama3_attn": 57.0}),
    ("8xH800", "fwdbwd"): (225.4, {"ring_attn": 51.1, "zigzag_ring": 75.9, "llama3_attn": 58.1}),
    ("8xA100", "fwd"): (532.3, {"ring_attn": 49.8, "zigzag_ring": 72.0, "llama3_attn": 51.6}),
    ("8xA100", "fwdbwd"): (133.8, {"ring_attn": 52.1, "zigzag_ring": 80.2, "llama3_attn": 58.0}),
}
TOLERANCE_POINTS = 5.0


def docs_spec(local: list[int]) -> str:
    """The whole sequence's documents: each local piece times the GPUs."""
    return ",".join(str(N_GPUS * (b - a)) for a, b in zip(local[:-1], local[1:]))


def flash_varlen_s(hw: Hardware, pass_: str, local: list[int]) -> float:
    """One flash_attn_varlen_func call per pass on one GPU's 8192 tokens with the local
    cu_seqlens (a causal piece per document), called in a loop: queued, nothing to merge
    (sim.cli.main.one_gpu_s of the whole sequence's documents, each cut 8 ways)."""
    w = replace(workload(pass_, N_GPUS * TOKENS_PER_GPU), docs=docs_spec(local))
    return one_gpu_s(Scenario(workload=w, hardware=hw, n_gpus=N_GPUS, layout="doc-contiguous"), hw)


def scheme_s(hw: Hardware, pass_: str, scheme: str, layout: str, groups: int, local: list[int],
             impl: str = "rfa") -> float:
    w = replace(workload(pass_, N_GPUS * TOKENS_PER_GPU), docs=docs_spec(local))
    settings = settings_of(scheme, {"head-groups": groups} if groups > 1 else {})
    sc = Scenario(workload=w, hardware=hw, n_gpus=N_GPUS, scheme=scheme, layout=layout, settings=settings,
                  impl=impl)
    return compute_metrics(simulate(sc, player="recurrence")).makespan_s


RUNS = {"before": ("ideal", "unfused"), "rfa": ("rfa", "fused")}
"""(implementation, --merge): the setting this table was read with before implementations, and `--impl rfa`."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the simulator against ring-flash-attention's published varlen table")
    p.add_argument("--json", default=str(RESULTS / "accuracy" / "rfa-varlen-h800-a100.json"),
                   help="where to write the results")
    add_force(p)
    a = p.parse_args(argv)
    keep_results("rfa_varlen", a.json, force=a.force, make_folders=True)
    rows, checks = [], []
    for (machine, pass_), (fa_iters, published) in PUBLISHED.items():
        ref = float(np.mean([flash_varlen_s(hardware(machine), pass_, local) for local in LOCAL_CU_SEQLENS]))
        model: dict[str, dict[str, float]] = {}
        per_packing = {}
        for column, (impl, merge) in RUNS.items():
            hw = hardware(machine, merge)
            model[column] = {}
            for name, (scheme, layout, groups) in SCHEMES.items():
                times = [scheme_s(hw, pass_, scheme, layout, groups, local, impl) for local in LOCAL_CU_SEQLENS]
                model[column][name] = 100.0 * N_GPUS * ref / float(np.mean(times))
                if column == "rfa":
                    per_packing[name] = [t * 1e3 for t in times]
        same = order(published) == order(model["rfa"])
        checks.append({"gpu": machine, "pass": pass_, "published_order": order(published),
                       "simulated_order": order(model["rfa"]), "same": same,
                       "flash_attn_iter_s": {"published": fa_iters, "model": 1.0 / ref}})
        for name in SCHEMES:
            rows.append({"gpu": machine, "pass": pass_, "scheme": name, "published": published[name],
                         "before": round(model["before"][name], 1),
                         "before_diff": round(model["before"][name] - published[name], 1),
                         "simulated": round(model["rfa"][name], 1),
                         "diff": round(model["rfa"][name] - published[name], 1),
                         "ring_ms_per_packing": [round(x, 3) for x in per_packing[name]]})
    print(f"{'GPU':8} {'pass':7} {'scheme':12} {'published %':>11} {'before %':>9} {'diff':>6} "
          f"{'--impl rfa %':>12} {'diff':>6}")
    for r in rows:
        print(f"{r['gpu']:8} {r['pass']:7} {r['scheme']:12} {r['published']:11.1f} {r['before']:9.1f} "
              f"{r['before_diff']:+6.1f} {r['simulated']:12.1f} {r['diff']:+6.1f}")
    print("before: --impl ideal --merge unfused (this table's setting before implementations); --impl rfa: "
          "ring-flash-attention's step")
    within = sum(abs(r["diff"]) <= TOLERANCE_POINTS for r in rows)
    before = sum(abs(r["before_diff"]) <= TOLERANCE_POINTS for r in rows)
    print(f"\n--impl rfa: cells within {TOLERANCE_POINTS:g} points: {within} of {len(rows)} (before: {before}); "
          f"order right: {sum(c['same'] for c in checks)} of {len(checks)}")
    for c in checks:
        print(f"  {c['gpu']} {c['pass']}: published {' < '.join(c['published_order'])}; "
              f"simulated {' < '.join(c['simulated_order'])}; flash_attn iter/s published "
              f"{c['flash_attn_iter_s']['published']:.1f}, model {c['flash_attn_iter_s']['model']:.1f}")
    save_json(a.json, {"source": SOURCE, "machines": MACHINES, "cells": rows, "orders": checks,
                       "within_points": TOLERANCE_POINTS, "cells_within": within, "before_cells_within": before,
                       "impl": "rfa", "before": {"impl": "ideal", "merge": "unfused"}}, force=a.force, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
