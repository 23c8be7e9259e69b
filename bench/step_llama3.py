"""The training step against the Llama 3 paper's Table 4 (405B pre-training on H100).

"The Llama 3 Herd of Models" (arXiv 2407.21783), Table 4: Llama 3 405B on H100 80GB
(700 W) nodes of 8 on NVLink, 400 Gb/s per GPU between nodes, BF16, 16M tokens a step:

    GPUs    TP  CP  PP  DP   seq      TFLOP/s per GPU
    8,192    8   1  16  64   8,192    430
    16,384   8   1  16  128  8,192    400
    16,384   8  16  16  8    131,072  380

Each row is `ringsim step` on the dgx-h100 preset (a 400 Gb/s NDR NIC per GPU), the
model preset llama3-405b, ZeRO-1, no recomputation, plain 1F1B (the paper's own schedule
is interleaved; its depth is not given in the table), the CP rows on the all-gather
scheme (Llama 3's context parallelism gathers K and V). Nothing is fitted to the table;
the paper's TFLOP/s convention is not stated, ringsim's is in sim.step (6 x parameters
plus causal attention). Printed: simulated against published TFLOP/s per GPU, their
ratio, the order of the three, and the same with 2 and 4 virtual stages per GPU beside,
to show what the unknown schedule moves.

    .venv/bin/python bench/step_llama3.py     # prints the table, writes bench/results/step_llama3.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.options import table  # noqa: E402

SOURCE = "The Llama 3 Herd of Models (arXiv 2407.21783), Table 4"
ROWS = [  # gpus, tp, cp, pp, dp, seq, published TFLOP/s per GPU
    (8192, 8, 1, 16, 64, 8192, 430.0),
    (16384, 8, 1, 16, 128, 8192, 400.0),
    (16384, 8, 16, 16, 8, 131072, 380.0),
]
GOAL = 0.10


def command(tp: int, cp: int, pp: int, dp: int, seq: int, interleave: int) -> list[str]:
    return ["step", "--model", "llama3-405b", "--seq", str(seq), "--global-batch", "16M", "--tp", str(tp),
            "--cp", str(cp), "--pp", str(pp), "--dp", str(dp), "--cluster", "dgx-h100", "--zero", "1",
            "--interleave", str(interleave), "--scheme", "allgather" if cp > 1 else "ring", "--json"]


def run_step(args: list[str]) -> dict:
    import contextlib
    import io

    from sim.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    if code:
        raise SystemExit(f"ringsim {' '.join(args)} failed")
    return json.loads(out.getvalue())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "step_llama3.json"))
    a = p.parse_args()
    rows, out = [], []
    for gpus, tp, cp, pp, dp, seq, published in ROWS:
        by_v = {}
        for v in (1, 2, 4):
            t0 = time.perf_counter()
            d = run_step(command(tp, cp, pp, dp, seq, v))
            by_v[v] = {"tflops_per_gpu": d["tflops_per_gpu"], "step_s": d["step_s"], "mfu": d["mfu"],
                       "fits": d["fits"], "memory_bytes_per_gpu": d["memory_bytes_per_gpu"],
                       "breakdown": d["breakdown"], "seconds": time.perf_counter() - t0}
        sim = by_v[1]["tflops_per_gpu"]
        rows.append({"gpus": gpus, "tp": tp, "cp": cp, "pp": pp, "dp": dp, "seq": seq, "published": published,
                     "simulated": sim, "ratio": sim / published, "within": abs(sim / published - 1) <= GOAL,
                     "by_interleave": by_v, "command": "ringsim " + " ".join(command(tp, cp, pp, dp, seq, 1))})
        out.append([f"{gpus:,}", f"{tp}/{cp}/{pp}/{dp}", f"{seq:,}", f"{published:.0f}", f"{sim:.0f}",
                    f"{sim / published:.2f}", f"{by_v[2]['tflops_per_gpu']:.0f}", f"{by_v[4]['tflops_per_gpu']:.0f}",
                    "yes" if by_v[1]["fits"] else "no"])
    print(f"Llama 3 405B steps, TFLOP/s per GPU; source: {SOURCE}\n")
    print(table(["GPUs", "TP/CP/PP/DP", "seq", "published", "simulated", "sim/pub", "v=2", "v=4", "fits"], out))
    pub_order = sorted(range(len(rows)), key=lambda i: -rows[i]["published"])
    sim_order = sorted(range(len(rows)), key=lambda i: -rows[i]["simulated"])
    print(f"\nwithin {GOAL:.0%}: {sum(r['within'] for r in rows)}/{len(rows)}; order of the three "
          f"{'the same' if pub_order == sim_order else 'different'} (published {pub_order}, simulated {sim_order})")
    Path(a.out).write_text(json.dumps({"source": SOURCE, "goal": GOAL, "rows": rows,
                                       "same_order": pub_order == sim_order}, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
