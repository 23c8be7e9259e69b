"""What the ring's merge adds to a forward block, which a calibrated profile does not price.

A rank of the real kernel (hw.ring) folds each block's (out, lse) into its accumulators
(hw.merge) inside the block's compute span, every block but the first; the compute part
of `ringsim hw bench` times the block alone. Times, at each token count (fp32, head dim
64, one thread, as a ring rank runs it), the full forward block and the merge of its
result into accumulators laid out as the ring lays them out, and prints the merge as a
share of the block.

    .venv/bin/python bench/experiments/merge_cost.py [--tokens 512 768 1024 1536 2048] [--heads 8]
        [--samples 7] [--json out.json [--force]]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.files import kept_file, write_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[512, 768, 1024, 1536, 2048])
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--samples", type=int, default=7, help="timed calls of each, after one untimed (default 7)")
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    ap.add_argument("--force", action="store_true", help="overwrite the --json file")
    a = ap.parse_args(argv)
    if a.samples < 1 or min(a.tokens) < 1 or a.heads < 1:
        print("merge_cost: --samples, --tokens and --heads must be positive", file=sys.stderr)
        return 2
    why = kept_file(a.json, a.force)
    if why:
        print(f"merge_cost: {why}", file=sys.stderr)
        return 2
    import torch

    from bench.common import timed
    from hw.bench.measure import make_block
    from hw.blocks import select_block_ops
    from hw.merge import merge_, new_accumulators

    torch.set_num_threads(1)
    ops = select_block_ops("cpu", "fp32", 64, "auto")
    rows = []
    print(f"{'tokens':>6}  {'block (ms)':>10}  {'merge (ms)':>10}  {'merge / block':>13}")
    for tokens in a.tokens:
        q, k, v, _ = make_block(torch.device("cpu"), "fp32", 1, a.heads, a.heads, 64, tokens, seed=0)
        block_out, block_lse = ops.forward(q, k, v, False)
        out, lse = new_accumulators(torch.Size((1, tokens, a.heads, 64)), q.device)
        merge_(out, lse, block_out, block_lse)
        block = statistics.median(timed(lambda: ops.forward(q, k, v, False), a.samples))
        merge = statistics.median(timed(lambda: merge_(out, lse, block_out, block_lse), a.samples))
        rows.append({"tokens": tokens, "heads": a.heads, "block_s": block, "merge_s": merge,
                     "merge_share": merge / block})
        print(f"{tokens:>6}  {block * 1e3:10.2f}  {merge * 1e3:10.3f}  {merge / block:13.1%}", flush=True)
    if a.json:
        write_json(a.json, {"samples": a.samples, "rows": rows}, overwrite=a.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
