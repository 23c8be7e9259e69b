"""Ulysses x ring splits against published measurements, on PCIe and NVLink servers.

The published tables (feifeibear/long-context-attention, the README's "Benchmark"
section, the images of commit 4514bcf, 2024-05-08, unchanged since): throughput
(iterations/s) of its LongContextAttention forward, causal, for each Ulysses degree u
with ring degree 8/u (4/u on the 4-GPU server), the zigzag ring, Q, K and V not packed:
- media/pcie_machine.jpg: 8 x L20 on PCIe, and 4 x A100-SXM4-80GB on PCIe;
- media/benchmark_results.png: 8 x A100-SXM4-80GB on NVLink.
Its benchmark (benchmark/benchmark_longctx.py at that commit) runs bf16, `seqlen`
tokens, `nheads` query heads of `head_size`, nheads / group_num K/V heads, batch `bs`,
Ulysses groups on consecutive ranks (use_ulysses_lowdim); its ring is ring-flash-attention's
code, merging each block with `_update_out_and_lse`'s chain of elementwise kernels
(yunchang/ring/utils.py): `--merge unfused`. The tables' seqlen is taken as
the whole sequence: read as tokens per GPU, the 8 x L20's 128K rows would need 6 PFLOP/s
per GPU.

Each row is simulated from the command line (`ringsim simulate --scheme hybrid
--ulysses-degree u --ring-degree r --layout zigzag ...` on the cluster preset named),
nothing fitted to the tables: the GPUs from datasheets and FlashAttention's published
kernel tables, the PCIe fabric from sim.hardware.pcie's sources. Printed per row: each split's
time, published and simulated, the best split and the order of both, and the slowest
split over the best, published and simulated, with their quotient (the goal: within
1.5x either way).

    .venv/bin/python bench/accuracy/pcie_splits.py   # prints the table, writes
                                                     # bench/results/accuracy/ulysses-ring-splits-l20-a100.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import RESULTS, add_force, keep_results, save_json  # noqa: E402
from sim.cli.options import simulate_parser, values_from_args  # noqa: E402
from sim.engine.play import simulate  # noqa: E402
from sim.scenario.resolve import scenario_of  # noqa: E402
from sim.trace.metrics import compute_metrics  # noqa: E402
from sim.units import table  # noqa: E402

SOURCE = ("feifeibear/long-context-attention README 'Benchmark', media/pcie_machine.jpg and "
          "media/benchmark_results.png (commit 4514bcf); benchmark/benchmark_longctx.py")

# machine -> (cluster flags, [(heads, head dim, K/V heads, batch, seq, {u: iterations/s})])
PUBLISHED = {
    "8 x L20 PCIe": (["--cluster", "pcie-l20"], [
        (32, 128, 8, 1, 8192, {8: 57.098, 4: 152.189, 2: 454.93, 1: 361.969}),
        (32, 128, 8, 1, 32768, {8: 14.262, 4: 32.818, 2: 62.754, 1: 58.377}),
        (32, 128, 8, 1, 131072, {8: 2.586, 4: 4.235, 2: 5.476, 1: 5.186}),
        (32, 32, 32, 2, 131072, {8: 3.947, 4: 6.667, 2: 8.471, 1: 7.408}),
    ]),
    "4 x A100 PCIe": (["--cluster", "pcie-a100", "--gpus-per-node", "4"], [
        (32, 32, 32, 2, 4096, {4: 227.163, 2: 177.013, 1: 123.142}),
        (32, 32, 32, 2, 16384, {4: 41.443, 2: 30.166, 1: 24.176}),
        (32, 32, 32, 2, 65536, {4: 8.483, 2: 8.292, 1: 9.738}),
    ]),
    "8 x A100 NVLink": (["--cluster", "dgx-a100"], [
        (32, 32, 32, 2, 8192, {8: 306.44, 4: 314.089, 2: 278.718, 1: 202.015}),
        (32, 32, 32, 2, 32768, {8: 76.908, 4: 81.58, 2: 76.818, 1: 46.605}),
        (32, 32, 32, 2, 131072, {8: 15.829, 4: 15.699, 2: 15.244, 1: 12.445}),
        (8, 32, 8, 2, 131072, {8: 57.9, 4: 57.362, 2: 57.404, 1: 50.126}),
        (64, 32, 8, 2, 131072, {8: 8.37, 4: 8.054, 2: 8.038, 1: 7.819}),
        (8, 128, 8, 2, 131072, {8: 21.002, 4: 21.464, 2: 21.201, 1: 17.778}),
    ]),
}
RATIO_GOAL = 1.5


def argv(cluster: list[str], gpus: int, heads: int, head_dim: int, kv_heads: int, batch: int, seq: int,
         u: int) -> list[str]:
    return [*cluster, "--gpus", str(gpus), "--seq", str(seq), "--batch", str(batch), "--heads", str(heads),
            "--kv-heads", str(kv_heads), "--head-dim", str(head_dim), "--dtype", "bf16", "--pass", "fwd",
            "--scheme", "hybrid", "--ulysses-degree", str(u), "--ring-degree", str(gpus // u),
            "--placement", "ulysses-inner", "--layout", "zigzag", "--merge", "unfused"]


def order(times: dict[int, float]) -> list[int]:
    return sorted(times, key=times.get)


def run(machines: list[str]) -> list[dict]:
    rows = []
    for machine in machines:
        cluster, cases = PUBLISHED[machine]
        for heads, head_dim, kv_heads, batch, seq, published in cases:
            gpus = max(published)
            published_s = {u: 1.0 / v for u, v in published.items()}
            simulated_s = {}
            for u in published:
                args = argv(cluster, gpus, heads, head_dim, kv_heads, batch, seq, u)
                values = values_from_args(simulate_parser().parse_args(args))
                trace = simulate(scenario_of(values), player="recurrence")
                simulated_s[u] = compute_metrics(trace).makespan_s
            pub_order, sim_order = order(published_s), order(simulated_s)
            pub_ratio = published_s[pub_order[-1]] / published_s[pub_order[0]]
            sim_ratio = simulated_s[sim_order[-1]] / simulated_s[sim_order[0]]
            rows.append({"machine": machine, "heads": heads, "head_dim": head_dim, "kv_heads": kv_heads,
                         "batch": batch, "seq": seq, "published_s": published_s, "simulated_s": simulated_s,
                         "published_order": pub_order, "simulated_order": sim_order,
                         "same_best": pub_order[0] == sim_order[0], "same_order": pub_order == sim_order,
                         "published_ratio": pub_ratio, "simulated_ratio": sim_ratio,
                         "ratio_quotient": sim_ratio / pub_ratio,
                         "ratio_within": 1 / RATIO_GOAL <= sim_ratio / pub_ratio <= RATIO_GOAL,
                         "command": "ringsim simulate " + " ".join(argv(cluster, gpus, heads, head_dim, kv_heads,
                                                                         batch, seq, pub_order[0]))})
    return rows


def splits(order_: list[int], gpus: int) -> str:
    return " > ".join(f"{u}x{gpus // u}" for u in order_)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--machines", default=",".join(PUBLISHED), help="comma-separated, of: " + ", ".join(PUBLISHED))
    p.add_argument("--out", default=str(RESULTS / "accuracy" / "ulysses-ring-splits-l20-a100.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("pcie_splits", a.out, force=a.force)
    machines = [m.strip() for m in a.machines.split(",") if m.strip()]
    unknown = [m for m in machines if m not in PUBLISHED]
    if unknown:
        p.error(f"unknown machine {unknown[0]!r}; choose from {', '.join(PUBLISHED)}")
    rows = run(machines)
    out = []
    for r in rows:
        gpus = max(r["published_s"])
        out.append([r["machine"], f"{r['heads']}x{r['head_dim']}/{r['kv_heads']} b{r['batch']}",
                    f"{r['seq'] // 1024}K", splits(r["published_order"], gpus), splits(r["simulated_order"], gpus),
                    "yes" if r["same_best"] else "no", "yes" if r["same_order"] else "no",
                    f"{r['published_ratio']:.2f}", f"{r['simulated_ratio']:.2f}", f"{r['ratio_quotient']:.2f}"])
    print(f"Ulysses x ring splits, fastest first (u x r), published against simulated; source: {SOURCE}\n")
    print(table(["machine", "heads/kv, batch", "seq", "published order", "simulated order", "best", "order",
                 "slowest/best pub", "sim", "sim/pub"], out))
    n = len(rows)
    print(f"\nsame best split {sum(r['same_best'] for r in rows)}/{n}; same order {sum(r['same_order'] for r in rows)}"
          f"/{n}; slowest/best within {RATIO_GOAL}x of the published {sum(r['ratio_within'] for r in rows)}/{n}")
    save_json(a.out, {"source": SOURCE, "ratio_goal": RATIO_GOAL, "rows": rows}, force=a.force, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
