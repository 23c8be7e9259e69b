"""The predicted gap between the implementations of each scheme on H100s (docs/implementations.md).

Every scheme (ring, all-gather, Ulysses, hybrid) as each library runs it (sim.implementations:
`--impl ideal|te|rfa|torch|usp`), on DGX H100 nodes (8 GPUs on NVLink 4, NDR InfiniBand
between nodes: `--cluster dgx-h100`), 8192 tokens per GPU, CP 8, 16, 32 and 64, batch 1,
Llama-3-8B attention (32 query heads, 8 K/V heads, head dim 128), bf16, full and causal,
forward and backward alone. The ring and the hybrid run the zigzag layout under a causal
mask and the contiguous one under a full mask (what every library runs for each). A cell is
TFLOP/s per GPU (the run's FLOPs, a causal mask counting its unmasked pairs, over the
makespan and the GPUs) and its gap to the ideal implementation's, %; '-' where the library
lacks the scheme or the configuration refuses it (a Ulysses degree beyond the heads).
Nothing is fitted: this is the model's prediction, to be set against measurements.

    .venv/bin/python bench/accuracy/implementations_h100.py   # prints the table, writes
                                                            # bench/results/accuracy/implementations-h100.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import RESULTS, add_force, keep_results, save_json  # noqa: E402
from sim import implementations  # noqa: E402
from sim.engine.play import simulate  # noqa: E402
from sim.errors import RingsimError  # noqa: E402
from sim.scenario.resolve import scenario_of  # noqa: E402
from sim.schemes import names as scheme_names  # noqa: E402
from sim.trace.metrics import compute_metrics  # noqa: E402

TOKENS_PER_GPU = 8192
CP = (8, 16, 32, 64)
LIBRARIES = tuple(implementations.LIBRARIES)
BASE = {"cluster": "dgx-h100", "batch": 1, "heads": 32, "kv-heads": 8, "head-dim": 128, "dtype": "bf16"}


def tflops_per_gpu(scheme: str, impl: str, n: int, causal: bool, pass_: str) -> float | None:
    values = dict(BASE, gpus=n, seq=n * TOKENS_PER_GPU, causal=causal, scheme=scheme, impl=impl,
                  layout="zigzag" if causal else "contiguous")
    values["pass"] = pass_
    try:
        sc = scenario_of(values)
    except RingsimError:
        return None
    m = compute_metrics(simulate(sc, player="recurrence"))
    return m.total_flops / m.makespan_s / n / 1e12


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the implementations of each scheme side by side on H100s")
    p.add_argument("--json", default=str(RESULTS / "accuracy" / "implementations-h100.json"),
                   help="where to write the results")
    add_force(p)
    a = p.parse_args(argv)
    keep_results("implementations_h100", a.json, force=a.force, make_folders=True)
    rows = []
    for scheme in scheme_names():
        offered = [i.library for i in implementations.of_scheme(scheme)]
        for causal in (False, True):
            for pass_ in ("fwd", "bwd"):
                for n in CP:
                    cells = {lib: tflops_per_gpu(scheme, lib, n, causal, pass_) if lib in offered else None
                             for lib in LIBRARIES}
                    ideal = cells["ideal"]
                    gaps = {lib: None if v is None or not ideal else 100.0 * (v / ideal - 1.0)
                            for lib, v in cells.items()}
                    rows.append({"scheme": scheme, "mask": "causal" if causal else "full", "pass": pass_, "cp": n,
                                 "tflops_per_gpu": cells, "gap_to_ideal_pct": gaps})
    head = ["scheme", "mask", "pass", "CP"] + [f"{lib}" for lib in LIBRARIES]
    table = [head]
    for r in rows:
        out = [r["scheme"], r["mask"], r["pass"], str(r["cp"])]
        for lib in LIBRARIES:
            v, g = r["tflops_per_gpu"][lib], r["gap_to_ideal_pct"][lib]
            out.append("-" if v is None else f"{v:.0f}" if lib == "ideal" else f"{v:.0f} ({g:+.1f}%)")
        table.append(out)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for j, row in enumerate(table):
        print("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if j == 0:
            print("  ".join("-" * w for w in widths))
    print("\nTFLOP/s per GPU (gap to the ideal implementation); 8192 tokens per GPU, DGX H100, 32/8 heads x 128, "
          "bf16, batch 1; zigzag layout when causal, contiguous when full")
    save_json(a.json, {
        "config": dict(BASE, tokens_per_gpu=TOKENS_PER_GPU, cp=list(CP), layouts={"causal": "zigzag",
                                                                                    "full": "contiguous"}),
        "implementations": {s: [i.describe() for i in implementations.of_scheme(s)] for s in scheme_names()},
        "rows": rows}, force=a.force, indent=1)
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
