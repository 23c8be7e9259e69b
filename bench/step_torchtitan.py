"""The training step against torchtitan's published Llama 3.1 benchmarks on H100.

pytorch/torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (added in commit 820504e;
runs of torch 1963fc8, torchao eab345c and torchtitan 9dec370, December 2024): Llama 3.1
8B, 70B and 405B on Grand Teton hosts of 8 H100s on NVLink, 400 Gb/s RDMA per GPU, tokens
per second per GPU read at the 90th iteration, and the peak memory of any GPU. Their H100
is the 96 GB HBM2e part at a 500 W limit, "between SXM and NVL" in peak FLOP/s (its exact
peak unknown, the page says).

Each published row becomes a `ringsim step` on the dgx-h100 preset (H100-SXM: 700 W,
80 GB HBM3, 989 TFLOP/s BF16): FSDP as ZeRO-3, torchtitan's activation checkpointing
("selective" for its op-level policy, "full"), Float8 linears as `--fp8`, AsyncTP as
`--tp-overlap`, context parallelism as the all-gather scheme (torchtitan's default
`context_parallel_rotate_method`), every sequence length 8,192 where the page gives none
(the train configs' `seq_len` at 9dec370), one micro-batch per step without pipeline
parallelism and, with it, torchtitan's default of one micro-batch per stage (8).
torch.compile is not modelled: ringsim's elementwise work is already the fused minimum,
so a compiled row and its eager twin get the same time. The interleaved 1F1B row is left
out (its stages per GPU are not given).

A second page, benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (torchtitan e7c0cae,
June 2025; Trainy on WhiteFiber), ran Llama 3.1 8B with FSDP, torch.compile and Float8 on
4 and 8 hosts of 8 H200s (400 Gb/s per GPU), local batch 2, the 8B train config's
8,192-token sequences and op-level selective checkpointing. Its GPU is the standard H200,
the preset's own, so those two rows ("table H200") check the model without the GPU
mismatch.

Nothing is fitted. The GPU here is faster than theirs (power, memory bandwidth), so the
simulated rates are expected above the published ones; the table shows by how much, and
whether each table's rows keep their order.

    .venv/bin/python bench/step_torchtitan.py     # prints the table, writes bench/results/step_torchtitan.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.step_llama3 import run_step  # noqa: E402
from sim.options import table  # noqa: E402

SOURCE = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (commit 820504e; torch 1963fc8, "
          "torchao eab345c, torchtitan 9dec370) and benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md "
          "(torchtitan e7c0cae)")
GPU = {"H200": "H200"}
"""Tables run on another GPU than the dgx-h100 preset's H100-SXM."""
GiB = 2 ** 30

# table, label, model, GPUs, TP, CP, PP, DP, seq, sequences per step, micro-batches,
# recompute, fp8, AsyncTP, compiled, published tokens/s per GPU, published GiB
ROWS = [
    ("1", "FSDP", "llama3-8b", 8, 1, 1, 1, 8, 8192, 16, 1, "selective", False, False, False, 5762, 82.4),
    ("1", "FSDP + compile", "llama3-8b", 8, 1, 1, 1, 8, 8192, 16, 1, "selective", False, False, True, 6667, 77.0),
    ("1", "FSDP + compile + Float8", "llama3-8b", 8, 1, 1, 1, 8, 8192, 16, 1, "selective", True, False, True,
     8532, 76.8),
    ("2", "FSDP 8, CP 1", "llama3-8b", 8, 1, 1, 1, 8, 32768, 8, 1, "full", True, False, True, 3890, 83.9),
    ("2", "FSDP 4, CP 2", "llama3-8b", 8, 1, 2, 1, 4, 65536, 4, 1, "full", True, False, True, 2540, 84.2),
    ("2", "FSDP 2, CP 4", "llama3-8b", 8, 1, 4, 1, 2, 131072, 2, 1, "full", True, False, True, 1071, 84.0),
    ("2", "FSDP 1, CP 8", "llama3-8b", 8, 1, 8, 1, 1, 262144, 1, 1, "full", True, False, True, 548, 84.5),
    ("3", "FSDP", "llama3-8b", 128, 1, 1, 1, 128, 8192, 256, 1, "selective", False, False, False, 5605, 67.0),
    ("3", "FSDP + compile", "llama3-8b", 128, 1, 1, 1, 128, 8192, 256, 1, "selective", False, False, True,
     6514, 62.0),
    ("3", "FSDP + compile + Float8", "llama3-8b", 128, 1, 1, 1, 128, 8192, 256, 1, "selective", True, False, True,
     8380, 61.8),
    ("4", "2D", "llama3-70b", 256, 8, 1, 1, 32, 8192, 512, 1, "full", True, False, True, 829, 71.9),
    ("4", "2D + AsyncTP", "llama3-70b", 256, 8, 1, 1, 32, 8192, 512, 1, "full", True, True, True, 876, 67.6),
    ("5", "1F1B", "llama3-405b", 512, 8, 1, 8, 8, 8192, 256, 8, "full", True, True, True, 100, 82.5),
    ("6", "FSDP 8, CP 1", "llama3-405b", 512, 8, 1, 8, 8, 32768, 64, 8, "full", True, True, True, 76, 75.3),
    ("6", "FSDP 4, CP 2", "llama3-405b", 512, 8, 2, 8, 4, 65536, 32, 8, "full", True, True, True, 47, 75.9),
    ("6", "FSDP 2, CP 4", "llama3-405b", 512, 8, 4, 8, 2, 131072, 16, 8, "full", True, True, True, 31, 77.1),
    ("6", "FSDP 1, CP 8", "llama3-405b", 512, 8, 8, 8, 1, 262144, 8, 8, "full", True, True, True, 16, 84.9),
    ("H200", "4 hosts", "llama3-8b", 32, 1, 1, 1, 32, 8192, 64, 1, "selective", True, False, True, 10938, 47.96),
    ("H200", "8 hosts", "llama3-8b", 64, 1, 1, 1, 64, 8192, 128, 1, "selective", True, False, True, 10753, 46.97),
]


def command(row) -> list[str]:
    (_t, _label, model, _gpus, tp, cp, pp, dp, seq, seqs, mb, recompute, fp8, async_tp, _compiled,
     _pub, _mem) = row
    args = ["step", "--model", model, "--seq", str(seq), "--global-batch", str(seqs * seq),
            "--microbatches", str(mb), "--tp", str(tp), "--cp", str(cp), "--pp", str(pp), "--dp", str(dp),
            "--zero", "3", "--recompute", recompute, "--cluster", "dgx-h100"]
    if _t in GPU:
        args += ["--gpu", GPU[_t]]
    if cp > 1:
        args += ["--scheme", "allgather"]
    if fp8:
        args.append("--fp8")
    if async_tp:
        args.append("--tp-overlap")
    return args + ["--json"]


def order_kept(rows: list[dict], key: str) -> bool:
    """Whether the simulated rates fall in the published order (rows the model tells apart)."""
    pub = sorted(range(len(rows)), key=lambda i: -rows[i]["published"])
    sim = sorted(range(len(rows)), key=lambda i: -rows[i][key])
    return pub == sim


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "step_torchtitan.json"))
    a = p.parse_args()
    rows, out = [], []
    for row in ROWS:
        t, label, model, gpus, tp, cp, pp, dp, seq, seqs, mb, recompute, fp8, async_tp, compiled, pub, mem = row
        d = run_step(command(row))
        sim = d["tokens_per_s_per_gpu"]
        rows.append({"table": t, "label": label, "model": model, "gpus": gpus, "tp": tp, "cp": cp, "pp": pp,
                     "dp": dp, "seq": seq, "sequences": seqs, "microbatches": mb, "recompute": recompute,
                     "fp8": fp8, "async_tp": async_tp, "compiled": compiled, "published": pub,
                     "published_gib": mem, "simulated": sim, "ratio": sim / pub, "mfu": d["mfu"],
                     "simulated_gib": d["memory_bytes_per_gpu"] / GiB, "breakdown": d["breakdown"],
                     "command": "ringsim " + " ".join(command(row))})
        out.append([t, label, model.removeprefix("llama3-"), f"{gpus}", f"{tp}/{cp}/{pp}/{dp}", f"{seq:,}",
                    f"{pub:,}", f"{sim:,.0f}", f"{sim / pub:.2f}", f"{mem:.1f}", f"{d['memory_bytes_per_gpu'] / GiB:.1f}"])
    print(f"Llama 3.1 training steps, tokens/s per GPU; source: {SOURCE}\n"
          "tables 1-6: simulated on H100-SXM (700 W, 80 GB HBM3), published on H100 96 GB HBM2e at 500 W; "
          "table H200: H200 both\n")
    print(table(["table", "run", "model", "GPUs", "TP/CP/PP/DP", "seq", "published", "simulated", "sim/pub",
                 "GiB pub", "GiB sim"], out))
    orders = {}
    for t in sorted({r["table"] for r in rows}):
        mine = [r for r in rows if r["table"] == t]
        # compiled and eager twins get one time here: compare the rows the model tells apart
        told = [r for r in mine if r["compiled"] or not any(s["compiled"] and s["fp8"] == r["fp8"]
                                                            and s["async_tp"] == r["async_tp"] for s in mine)]
        if len(told) > 1:
            orders[t] = order_kept(told, "simulated")
    h100 = [r for r in rows if r["table"] not in GPU]
    ratios = [r["ratio"] for r in h100]
    eager = [r["ratio"] for r in h100 if not r["compiled"]]
    compiled = [r["ratio"] for r in h100 if r["compiled"]]
    same_gpu = [r["ratio"] for r in rows if r["table"] in GPU]
    print(f"\nsim/pub on their H100s: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-"
          f"{max(ratios):.2f} over {len(h100)} rows (eager rows median {statistics.median(eager):.2f}, compiled "
          f"{statistics.median(compiled):.2f}); on the H200, the preset's own GPU: "
          + ", ".join(f"{x:.2f}" for x in same_gpu))
    print("published order kept within a table: "
          + ", ".join(f"table {t} {'yes' if ok else 'no'}" for t, ok in orders.items()))
    Path(a.out).write_text(json.dumps({"source": SOURCE, "rows": rows, "order_kept": orders,
                                       "median_ratio_h100": statistics.median(ratios),
                                       "ratios_same_gpu": same_gpu}, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
