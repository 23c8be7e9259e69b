"""The simulator against ring-flash-attention's published ring-layout table.

zhuzilin/ring-flash-attention README, 'Performance Summary', batch api (the table of
commit 556ddaa, 2024-10-30, still in its README): 8 x H800 and 8 x A100, forward and
forward+backward, ring_attn / zigzag_ring / stripe_attn as a percentage of the
"theoretic flash_attn". Its benchmark (benchmark/benchmark_kvpacked_func.py): every GPU
holds 8192 tokens of one sequence (batch 1, so 65536 tokens over 8 GPUs), Llama-3-8B
attention (32 query heads, 8 K/V heads, head dim 128), bf16, causal; flash_attn (the
FlashAttention-2 package) on each GPU's own 8192 tokens is the reference: it does 1/8 of
the ring's work per GPU (8 x 1^2 against 1 x 8^2, as the README says), so the ideal ring
throughput is flash_attn's / 8 and a cell is ring throughput / (flash_attn's / 8).

Here the same ratio comes from the model alone: the ideal is 8 times the time the
kernel model gives one 8192-token causal flash-attention call (forward, or forward and
backward), the ring's time is the simulated makespan. Nothing is fitted to the table:
the rates come from FlashAttention's published kernel tables, the links from datasheets
(sim.hardware.presets), and the ring's step from ring-flash-attention's own code: the
implementation `--impl rfa` (sim.implementations.ring.rfa: its unfused merge at the
streaming bandwidth measured on each GPU, its host-side operations per step, its sends
queued behind the step before's compute). The GPUs run FlashAttention-2 (what
ring-flash-attention calls). Before it, the table was read with the ideal implementation
and `--merge unfused` (the setting this script used then): both columns are printed, with
the ideal one (fused merge) beside them.

    .venv/bin/python bench/accuracy/compare_rfa.py              # prints the table, writes
                                                                # bench/results/accuracy/rfa-layouts-h800-a100-80gb.json
    .venv/bin/python bench/accuracy/compare_rfa.py --a100 40GB  # the same with A100 40GB (...-a100-40gb.json)
    .venv/bin/python bench/accuracy/compare_rfa.py [--a100 80GB|40GB] [--out FILE.json] [--force]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import RESULTS, add_force, keep_results, save_json  # noqa: E402
from sim.engine.play import simulate  # noqa: E402
from sim.hardware.cluster import Gpu, Hardware, Link  # noqa: E402
from sim.scenario.config import Scenario, Workload  # noqa: E402
from sim.trace.metrics import compute_metrics  # noqa: E402

SOURCE = ("zhuzilin/ring-flash-attention README 'Performance Summary' (batch api), commit 556ddaa; "
          "benchmark/benchmark_kvpacked_func.py")
TOKENS_PER_GPU = 8192
N_GPUS = 8
LAYOUTS = {"ring_attn": "contiguous", "zigzag_ring": "zigzag", "stripe_attn": "striped"}

# (GPU, pass) -> published theoretic flash_attn iter/s (before the / 8) and the cells, %.
PUBLISHED = {
    ("8xH800", "fwd"): (591.5, {"ring_attn": 52.1, "zigzag_ring": 85.2, "stripe_attn": 74.4}),
    ("8xH800", "fwdbwd"): (154.7, {"ring_attn": 53.9, "zigzag_ring": 90.2, "stripe_attn": 82.9}),
    ("8xA100", "fwd"): (373.4, {"ring_attn": 51.4, "zigzag_ring": 81.7, "stripe_attn": 69.6}),
    ("8xA100", "fwdbwd"): (94.7, {"ring_attn": 52.5, "zigzag_ring": 89.8, "stripe_attn": 82.6}),
}
# The README says 8xA100 without the memory size; FlashAttention's A100 table is of the
# 80GB SXM4. `--a100 40GB` runs the 40GB one (same compute, 1,555 instead of 2,039 GB/s peak).
MACHINES = {"8xH800": ("H800-SXM", "nvlink-h800"), "8xA100": ("A100-SXM-80GB", "nvlink3")}
RUNS = {"ideal": ("ideal", "fused"), "before": ("ideal", "unfused"), "rfa": ("rfa", "fused")}
"""The columns: (implementation, --merge): the ideal one; the setting this table was read with
before implementations (the ideal one, ring-flash-attention's unfused merge); `--impl rfa`."""


def workload(pass_: str, seq: int) -> Workload:
    return Workload(batch=1, seq=seq, heads=32, kv_heads=8, head_dim=128, dtype="bf16", causal=True,
                    pass_=pass_)


def hardware(machine: str, merge: str = "fused") -> Hardware:
    gpu_name, link_name = MACHINES[machine]
    return Hardware(gpu=Gpu.preset(gpu_name, kernel="fa2", merge=merge), link=Link.preset(link_name))


def flash_attn_s(hw: Hardware, pass_: str) -> float:
    """One causal flash-attention call per pass on one GPU's tokens, as `ringsim simulate`
    reports it (sim.cli.main.one_gpu_s: called in a loop, nothing to merge)."""
    from sim.cli.main import one_gpu_s

    return one_gpu_s(Scenario(workload=workload(pass_, N_GPUS * TOKENS_PER_GPU), hardware=hw, n_gpus=N_GPUS), hw)


def ring_s(hw: Hardware, pass_: str, layout: str, impl: str = "rfa") -> float:
    sc = Scenario(workload=workload(pass_, N_GPUS * TOKENS_PER_GPU), hardware=hw, n_gpus=N_GPUS,
                  layout=layout, overlap=True, sync="step", impl=impl)
    return compute_metrics(simulate(sc, player="recurrence")).makespan_s


def order(cells: dict[str, float]) -> list[str]:
    return sorted(cells, key=cells.get)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the simulator against ring-flash-attention's published table")
    p.add_argument("--a100", choices=["80GB", "40GB"], default="80GB", help="which A100 (default 80GB)")
    p.add_argument("--out", default=None, help="where to write the results (default bench/results/accuracy/"
                                                "rfa-layouts-h800-a100-<80gb|40gb>.json, after --a100)")
    add_force(p)
    a = p.parse_args(argv)
    out = Path(a.out) if a.out else RESULTS / "accuracy" / f"rfa-layouts-h800-a100-{a.a100.lower()}.json"
    keep_results("compare_rfa", out, force=a.force, make_folders=True)
    MACHINES["8xA100"] = (f"A100-SXM-{a.a100}", "nvlink3")
    rows, checks = [], []
    for (machine, pass_), (fa_iters, published) in PUBLISHED.items():
        sim: dict[str, dict[str, float]] = {}
        ideal = N_GPUS * flash_attn_s(hardware(machine), pass_)
        for column, (impl, merge) in RUNS.items():
            hw = hardware(machine, merge)
            sim[column] = {name: 100.0 * ideal / ring_s(hw, pass_, layout, impl) for name, layout in LAYOUTS.items()}
        model = sim["rfa"]
        same_order = order(published) == order(model)
        checks.append({"gpu": machine, "pass": pass_, "published_order": order(published),
                       "simulated_order": order(model), "same": same_order,
                       "flash_attn_iter_s": {"published": fa_iters, "model": N_GPUS / ideal}})
        for name in LAYOUTS:
            rows.append({"gpu": machine, "pass": pass_, "layout": name, "published_pct": published[name],
                         "simulated_pct": model[name], "diff_pts": model[name] - published[name],
                         "within_5": abs(model[name] - published[name]) <= 5.0,
                         "before_pct": sim["before"][name],
                         "before_within_5": abs(sim["before"][name] - published[name]) <= 5.0,
                         "ideal_pct": sim["ideal"][name]})

    head = ("GPU", "pass", "layout", "published", "ideal", "before", "diff", "--impl rfa", "diff", "<=5")
    table = [head] + [(r["gpu"], r["pass"], r["layout"], f"{r['published_pct']:.1f}%", f"{r['ideal_pct']:.1f}%",
                       f"{r['before_pct']:.1f}%", f"{r['before_pct'] - r['published_pct']:+.1f}",
                       f"{r['simulated_pct']:.1f}%", f"{r['diff_pts']:+.1f}", "yes" if r["within_5"] else "no")
                      for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for j, row in enumerate(table):
        print("  ".join(str(c).ljust(w) if i < 3 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if j == 0:
            print("  ".join("-" * w for w in widths))
    print("ideal: --impl ideal (fused merge); before: --impl ideal --merge unfused (this table's setting before "
          "implementations); --impl rfa: ring-flash-attention's step")
    print()
    for c in checks:
        fa = c["flash_attn_iter_s"]
        print(f"{c['gpu']} {c['pass']:6}  order published {' < '.join(c['published_order'])}; simulated "
              f"{' < '.join(c['simulated_order'])}: {'same' if c['same'] else 'DIFFERENT'}   "
              f"flash_attn 8k causal: published {fa['published']:.1f} iter/s, model {fa['model']:.1f} iter/s")
    within = sum(r["within_5"] for r in rows)
    before = sum(r["before_within_5"] for r in rows)
    print(f"\n--impl rfa: {within}/{len(rows)} cells within 5 points (before: {before}/{len(rows)}); order the "
          f"same in {sum(c['same'] for c in checks)}/{len(checks)} rows")

    save_json(out, {
        "source": SOURCE,
        "config": {"gpus": N_GPUS, "tokens_per_gpu": TOKENS_PER_GPU, "seq": N_GPUS * TOKENS_PER_GPU, "batch": 1,
                   "heads": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bf16", "causal": True,
                   "kernel": "fa2", "impl": "rfa", "before": {"impl": "ideal", "merge": "unfused"},
                   "layouts": LAYOUTS, "machines": MACHINES,
                   "overlap": True, "sync": "step", "granularity": "exact"},
        "rows": rows, "order": checks, "cells_within_5": within, "before_cells_within_5": before},
        force=a.force, indent=2)
    print(f"wrote {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
