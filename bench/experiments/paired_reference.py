"""How much a compute entry's time moves from one measurement to the next on a shared
CPU host, three ways: its plain median (the samples alone), its median over the median
of the reference block timed just before it (as `hw bench` did up to run 36), and its
samples each over the references timed just before and after it
(hw.bench.measure_compute_paired, what `hw bench` does now). Each way measures every
block again and again for `--seconds`, interleaved; the spread of the estimates
(standard deviation over mean) is what a calibration inherits from one measurement.
The two normalised ways are brought to ms by the median of every reference sample.
Prints a table, writes JSON.

    .venv/bin/python bench/experiments/paired_reference.py --seconds 150 \
        --out bench/results/experiments/cpu-2core/paired-reference.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hw.bench.measure import block_flops, measure_compute, measure_compute_paired  # noqa: E402
from hw.bench.parts import full_forward_block  # noqa: E402
from hw.blocks import select_block_ops  # noqa: E402
from sim.files import write_json

HEADS, HEAD_DIM = 8, 64
WAYS = ("plain", "reference before", "reference around each sample")


def block(mask: str, tokens: int) -> dict:
    e = full_forward_block("fp32", 1, HEADS, HEADS, HEAD_DIM, tokens)
    if mask == "diagonal":
        e = {**e, "mask": "diagonal", "flops": block_flops("fwd", 1, HEADS, HEAD_DIM, tokens, tokens, "diagonal")}
    return e


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=150.0, help="how long to keep measuring (default 150)")
    p.add_argument("--blocks", default="diagonal:768,diagonal:1536,full:2048",
                   help="mask:tokens, comma list (forward, fp32, 8 heads x 64)")
    p.add_argument("--samples", type=int, default=5, help="samples per measurement (default 5, as hw bench)")
    p.add_argument("--out", default=None, help="JSON of every estimate")
    p.add_argument("--force", action="store_true", help="overwrite --out")
    a = p.parse_args()
    if a.out and os.path.exists(a.out) and not a.force:
        print(f"paired_reference: {a.out} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    try:
        blocks = [(m, int(n)) for m, n in (x.split(":") for x in a.blocks.split(","))]
    except ValueError:
        print(f"paired_reference: --blocks wants mask:tokens pairs, got {a.blocks!r}", file=sys.stderr)
        return 2
    if a.samples < 1 or any(m not in ("full", "diagonal") or n < 1 for m, n in blocks):
        print("paired_reference: --samples and the tokens must be positive, masks full or diagonal", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    ops = select_block_ops("cpu", "fp32", HEAD_DIM, "auto")
    reference = block("full", 1024)
    entries = {f"{m} {n}": block(m, n) for m, n in blocks}
    est = {name: {w: [] for w in WAYS} for name in entries}
    refs: list[float] = []
    started = time.time()
    while time.time() - started < a.seconds:
        for name, e in entries.items():
            before = measure_compute(reference, ops, cpu, a.samples, 1)["time_s"]
            x = measure_compute(e, ops, cpu, a.samples, 1)["median_s"]
            est[name]["plain"].append(x)
            est[name]["reference before"].append(x / statistics.median(before))
            paired = measure_compute_paired(e, ops, reference, ops, a.samples, 1)
            est[name]["reference around each sample"].append(statistics.median(paired["speed_ratios"]))
            refs += before + paired["reference_s"]
    r = statistics.median(refs)
    rows = []
    print(f"{len(est[next(iter(est))]['plain'])} measurements of each block over {a.seconds:.0f} s; "
          f"reference block median {r * 1e3:.1f} ms")
    print(f"{'block':15}  {'way':29}  {'mean':>9}  {'sd/mean':>7}  {'range':>15}")
    for name in entries:
        for w in WAYS:
            v = [x * (1.0 if w == "plain" else r) for x in est[name][w]]
            m = statistics.mean(v)
            rows.append({"block": name, "way": w, "n": len(v), "mean_s": m,
                         "sd_over_mean": statistics.pstdev(v) / m, "min_s": min(v), "max_s": max(v)})
            print(f"{name:15}  {w:29}  {m * 1e3:6.2f} ms  {rows[-1]['sd_over_mean']:7.1%}  "
                  f"{min(v) * 1e3:6.1f}-{max(v) * 1e3:6.1f} ms")
    if a.out:
        write_json(a.out, {"seconds": a.seconds, "samples": a.samples, "reference_median_s": r,
                           "cpu_count": os.cpu_count(), "rows": rows}, overwrite=a.force)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
