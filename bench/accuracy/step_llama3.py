"""The training step against the Llama 3 paper's Table 4 (405B pre-training on H100).

"The Llama 3 Herd of Models" (arXiv 2407.21783), Table 4: Llama 3 405B on H100 80GB
(700 W) nodes of 8 on NVLink, 400 Gb/s per GPU between nodes, BF16, 16M tokens a step:

    GPUs    TP  CP  PP  DP   seq      TFLOP/s per GPU
    8,192    8   1  16  64   8,192    430
    16,384   8   1  16  128  8,192    400
    16,384   8  16  16  8    131,072  380

Its TFLOP/s are "BF16 Model FLOPs Utilization (MFU; Chowdhery et al. (2023))" (section
3.3.2): PaLM's count, 6N + 12LHQT per token with the attention unmasked, so they are
compared with `ringsim step`'s `palm_tflops_per_gpu` (ringsim's own count halves the
causal attention, which at 131,072 tokens is 0.71 of PaLM's).

Each row is `ringsim step` on the dgx-h100 preset (a 400 Gb/s NDR NIC per GPU), the
model preset llama3-405b, ZeRO-1, no recomputation ("we could pre-train Llama 3 on
sequences of 8K tokens without activation checkpointing"), the CP rows on the all-gather
scheme (Llama 3's context parallelism gathers K and V), and the paper's pipeline: an
interleaved schedule whose depth V the table does not give, but the text fixes: "we
reduce one Transformer layer each from the first and the last stages ... This means that
the first model chunk on the first stage has only the embedding", which holds only when
a chunk is one layer, so V = (126 + 2) / 16 = 8. The rows at V = 1, 2 and 4 are printed
beside, to show what the depth moves. Nothing is fitted to the table. Printed: simulated
against published TFLOP/s per GPU, their ratio, the ratios between rows, the order of
the three, and whether ringsim's memory model fits each in 80 GB.

    .venv/bin/python bench/accuracy/step_llama3.py   # prints the table, writes
                                                     # bench/results/accuracy/step-llama3-405b-h100.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import RESULTS, add_force, keep_results, save_json  # noqa: E402
from sim.units import table  # noqa: E402

SOURCE = "The Llama 3 Herd of Models (arXiv 2407.21783), Table 4"
ROWS = [  # gpus, tp, cp, pp, dp, seq, published TFLOP/s per GPU
    (8192, 8, 1, 16, 64, 8192, 430.0),
    (16384, 8, 1, 16, 128, 8192, 400.0),
    (16384, 8, 16, 16, 8, 131072, 380.0),
]
GOAL = 0.10
CONVENTION = "PaLM (Chowdhery et al., Appendix B): 6N + 12LHQT per token, attention unmasked"
PAPER_DEPTH = 8
"""Virtual stages per GPU that the paper's text fixes (module docstring)."""
DEPTHS = (1, 2, 4, PAPER_DEPTH)


def command(tp: int, cp: int, pp: int, dp: int, seq: int, interleave: int) -> list[str]:
    return ["step", "--model", "llama3-405b", "--seq", str(seq), "--global-batch", "16M", "--tp", str(tp),
            "--cp", str(cp), "--pp", str(pp), "--dp", str(dp), "--cluster", "dgx-h100", "--zero", "1",
            "--interleave", str(interleave), "--scheme", "allgather" if cp > 1 else "ring", "--json"]


def run_step(args: list[str]) -> dict:
    import contextlib
    import io

    from sim.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    if code:
        raise SystemExit(f"ringsim {' '.join(args)} failed")
    return json.loads(out.getvalue())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(RESULTS / "accuracy" / "step-llama3-405b-h100.json"))
    add_force(p)
    a = p.parse_args()
    keep_results("step_llama3", a.out, force=a.force)
    rows, out = [], []
    for gpus, tp, cp, pp, dp, seq, published in ROWS:
        by_v = {}
        for v in DEPTHS:
            t0 = time.perf_counter()
            d = run_step(command(tp, cp, pp, dp, seq, v))
            by_v[v] = {"palm_tflops_per_gpu": d["palm_tflops_per_gpu"], "tflops_per_gpu": d["tflops_per_gpu"],
                       "step_s": d["step_s"], "palm_mfu": d["palm_mfu"], "fits": d["fits"],
                       "memory_bytes_per_gpu": d["memory_bytes_per_gpu"], "breakdown": d["breakdown"],
                       "seconds": time.perf_counter() - t0}
        sim = by_v[PAPER_DEPTH]["palm_tflops_per_gpu"]
        rows.append({"gpus": gpus, "tp": tp, "cp": cp, "pp": pp, "dp": dp, "seq": seq, "published": published,
                     "interleave": PAPER_DEPTH, "simulated": sim, "ratio": sim / published,
                     "within": abs(sim / published - 1) <= GOAL, "by_interleave": by_v,
                     "command": "ringsim " + " ".join(command(tp, cp, pp, dp, seq, PAPER_DEPTH))})
        out.append([f"{gpus:,}", f"{tp}/{cp}/{pp}/{dp}", f"{seq:,}", f"{published:.0f}", f"{sim:.0f}",
                    f"{sim / published:.2f}", *(f"{by_v[v]['palm_tflops_per_gpu']:.0f}" for v in DEPTHS[:-1]),
                    f"{by_v[PAPER_DEPTH]['memory_bytes_per_gpu'] / 2**30:.1f} GiB",
                    "yes" if by_v[PAPER_DEPTH]["fits"] else "no"])
    print(f"Llama 3 405B steps, TFLOP/s per GPU by PaLM's count; source: {SOURCE}\n")
    print(table(["GPUs", "TP/CP/PP/DP", "seq", "published", f"V={PAPER_DEPTH}", "sim/pub",
                 *(f"V={v}" for v in DEPTHS[:-1]), "memory", "fits"], out))
    pub_order = sorted(range(len(rows)), key=lambda i: -rows[i]["published"])
    sim_order = sorted(range(len(rows)), key=lambda i: -rows[i]["simulated"])
    steps = [(rows[i + 1]["published"] / rows[i]["published"], rows[i + 1]["simulated"] / rows[i]["simulated"])
             for i in range(len(rows) - 1)]
    print(f"\nwithin {GOAL:.0%}: {sum(r['within'] for r in rows)}/{len(rows)}; order of the three "
          f"{'the same' if pub_order == sim_order else 'different'} (published {pub_order}, simulated {sim_order})")
    print("row to row, published against simulated: "
          + "; ".join(f"{i + 2} / {i + 1}: {pub:.3f} against {sim:.3f}" for i, (pub, sim) in enumerate(steps)))
    save_json(a.out, {"source": SOURCE, "convention": CONVENTION, "goal": GOAL, "rows": rows,
                      "row_to_row": [{"published": pub, "simulated": sim} for pub, sim in steps],
                      "same_order": pub_order == sim_order}, force=a.force, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
