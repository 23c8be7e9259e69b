"""A block's time per head, by head count: does a kernel call's rate follow its extent?

Times the kernel's block (hw.blocks, one thread, as a ring rank runs it) at a few token
counts with 2, 4 and 8 heads, forward and backward, causal and full, and prints the time
per head of each, and the time of two calls with equal FLOPs (2 heads over 2t tokens
against 8 heads over t). A calibrated profile prices a block of other heads than it
measured as that many measured blocks of its own extent (sim.hardware.profile); this is what that
rests on.

    .venv/bin/python bench/experiments/heads.py [--tokens 1536 3072] [--heads 2 4 8] [--samples 5]
        [--json out.json [--force]]
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
    ap.add_argument("--tokens", type=int, nargs="+", default=[1536, 3072])
    ap.add_argument("--heads", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--samples", type=int, default=5, help="timed calls per block, after one untimed (default 5)")
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    ap.add_argument("--force", action="store_true", help="overwrite the --json file")
    a = ap.parse_args(argv)
    if a.samples < 1 or min(a.tokens) < 1 or min(a.heads) < 1:
        print("heads: --samples, --tokens and --heads must be positive", file=sys.stderr)
        return 2
    why = kept_file(a.json, a.force)
    if why:
        print(f"heads: {why}", file=sys.stderr)
        return 2
    import torch

    from bench.common import timed
    from hw.bench.measure import make_block
    from hw.blocks import select_block_ops

    torch.set_num_threads(1)
    ops = select_block_ops("cpu", "fp32", 64, "auto")
    rows = []
    print("ms per head (fp32, head dim 64, one thread)")
    print(f"{'pass':<5} {'mask':<7} {'tokens':>6}  " + "  ".join(f"{h:>2} heads" for h in a.heads))
    for kind in ("fwd", "bwd"):
        for causal in (True, False):
            for tokens in a.tokens:
                per_head = {}
                for h in a.heads:
                    q, k, v, dout = make_block(torch.device("cpu"), "fp32", 1, h, h, 64, tokens, seed=0)
                    out, lse = ops.forward(q, k, v, causal)
                    fn = ((lambda: ops.forward(q, k, v, causal)) if kind == "fwd"
                          else (lambda: ops.backward(dout, q, k, v, out, lse, causal)))
                    per_head[h] = statistics.median(timed(fn, a.samples)) / h
                rows.append({"kind": kind, "mask": "diagonal" if causal else "full", "tokens": tokens,
                             "s_per_head": {str(h): t for h, t in per_head.items()}})
                print(f"{kind:<5} {rows[-1]['mask']:<7} {tokens:>6}  "
                      + "  ".join(f"{per_head[h] * 1e3:8.2f}" for h in a.heads), flush=True)
    # equal FLOPs, other extents: h heads over 2t tokens against 4h heads over t
    print("\nequal FLOPs: h heads over 2t tokens against 4h heads over t")
    for r in rows:
        half = next((x for x in rows if (x["kind"], x["mask"]) == (r["kind"], r["mask"])
                     and 2 * x["tokens"] == r["tokens"]), None)
        small = min(a.heads)
        if half is None or str(4 * small) not in half["s_per_head"]:
            continue
        long_call = small * r["s_per_head"][str(small)]
        short_call = 4 * small * half["s_per_head"][str(4 * small)]
        r["equal_flops"] = {"heads": small, "long_s": long_call, "short_s": short_call}
        print(f"{r['kind']:<5} {r['mask']:<7} {small} x {r['tokens']}: {long_call * 1e3:.1f} ms; "
              f"{4 * small} x {half['tokens']}: {short_call * 1e3:.1f} ms ({long_call / short_call - 1:+.1%})")
    if a.json:
        write_json(a.json, {"samples": a.samples, "rows": rows}, overwrite=a.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
