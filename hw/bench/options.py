"""The plan of a bench run from its flags: what `ringsim hw bench` measures (hw.bench)."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from sim.errors import RingsimError
from sim.scenario.quantities import DTYPE_BYTES

FORMAT = "ringsim-hw-bench"
VERSION = 1
PARTS = ("compute", "transfer", "interference", "concurrency", "ring_conditions", "collective")
COLLECTIVES = ("allgather", "reducescatter", "alltoall")

QUICK = dict(dtypes="fp32", heads="4", head_dims="64", blocks="128,256,512", masks="full,diagonal",
             kinds="fwd", sizes="64K,1M", interference_blocks="512", interference_sizes="1M",
             concurrency="1,2", ring_processes="2,3", collectives="allgather,reducescatter,alltoall",
             collective_gpus="2,3", collective_sizes="64K,1M", samples=3, warmup=1, compute_passes=1,
             host_passes=1)
FULL = dict(dtypes="fp32,bf16", heads="8", head_dims="64", blocks="256,512,1024,2048,4096",
            masks="full,diagonal", kinds="fwd,bwd", sizes="64K,256K,1M,4M,16M,64M",
            interference_blocks="1024,2048", interference_sizes="kv,8M", concurrency="1,2,3,4",
            ring_processes="2,3,4", collectives="allgather,reducescatter,alltoall", collective_gpus="2,3,4",
            collective_sizes="64K,256K,1M,4M", samples=5, warmup=2, compute_passes=2, host_passes=3)


CONCURRENCY_ROUNDS = 3
"""Rounds of (alone, shared) a concurrency entry alternates: see _concurrency_worker."""

HOST_PASSES = ("start", "middle", "end")
"""Where the host parts' passes run, in time order, with --host-passes 3: before the
compute part, after the transfer and interference parts (the one place of a single pass)
and after the collectives; two passes take the last two places."""


def add_bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="JSON results, written as they complete")
    p.add_argument("--force", action="store_true", help="overwrite FILE and start over")
    p.add_argument("--resume", action="store_true", help="keep FILE's results and measure the rest")
    p.add_argument("--quick", action="store_true", help="a small grid (seconds, for a smoke test)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {','.join(PARTS)} (default all)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="(default: cuda when available)")
    p.add_argument("--dtypes", default=None, help=f"comma list (default {FULL['dtypes']})")
    p.add_argument("--heads", default=None, help=f"query head counts, comma list (default {FULL['heads']})")
    p.add_argument("--kv-heads", type=int, default=None, help="K/V heads of every entry (default: = heads)")
    p.add_argument("--head-dims", default=None, help=f"comma list (default {FULL['head_dims']})")
    p.add_argument("--batch", type=int, default=1, help="(default 1)")
    p.add_argument("--blocks", default=None, help=f"block sizes in tokens, comma list (default {FULL['blocks']})")
    p.add_argument("--masks", default=None, help="comma list of full,diagonal (default both)")
    p.add_argument("--kinds", default=None, help=f"comma list of fwd,bwd (default {FULL['kinds']})")
    p.add_argument("--sizes", default=None,
                   help=f"transfer sizes in bytes (K/M/G suffixes), comma list (default {FULL['sizes']})")
    p.add_argument("--interference-blocks", default=None,
                   help=f"block sizes for the interference part (default {FULL['interference_blocks']})")
    p.add_argument("--interference-sizes", default=None,
                   help="bytes each way during the compute; 'kv' is the block's K/V "
                        f"(default {FULL['interference_sizes']})")
    p.add_argument("--concurrency", default=None,
                   help=f"process counts computing at once, comma list (default {FULL['concurrency']}; CPU only): "
                        "the interference part's first block forward, and backward where --kinds holds bwd, "
                        f"in {CONCURRENCY_ROUNDS} rounds alternating alone and shared")
    p.add_argument("--collectives", default=None,
                   help=f"collectives of the collective part, comma list (default {FULL['collectives']})")
    p.add_argument("--collective-gpus", default=None,
                   help=f"GPU counts of the collective part, comma list (default {FULL['collective_gpus']})")
    p.add_argument("--collective-sizes", default=None,
                   help=f"shard sizes of the collective part, bytes (default {FULL['collective_sizes']})")
    p.add_argument("--ring-processes", default=None,
                   help="ranks of the ring-conditions part, comma list "
                        f"(default {FULL['ring_processes']}; CPU only)")
    p.add_argument("--samples", type=int, default=None, help=f"timed calls per entry (default {FULL['samples']})")
    p.add_argument("--compute-passes", type=int, default=None,
                   help="times the compute grid is measured, the second pass in reverse order; each entry "
                        f"keeps every pass, calibration their mean (default {FULL['compute_passes']}, 1 with --quick)")
    p.add_argument("--host-passes", type=int, default=None,
                   help="times the concurrency and ring-conditions parts are measured, minutes apart (1 to 3: "
                        "before the compute part, after the interference part, at the end); calibration takes "
                        "each count's median over the passes, so that a spell of the host's cores serving "
                        f"something else weighs on one pass only (default {FULL['host_passes']}, 1 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help=f"untimed calls first (default {FULL['warmup']})")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads of the compute part, as a rank of a 2-rank run has (default: cores / 2)")
    p.add_argument("--block-impl", choices=["auto", "fused", "matmul"], default="auto")
    p.add_argument("--timeout", type=float, default=120.0, help="process-group timeout, s (default 120)")


# ---- parsing --------------------------------------------------------------------------

def _list(text: str, what: str, conv: Callable[[str], Any] = str) -> list:
    try:
        items = [conv(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise RingsimError(f"--{what}: cannot read {text!r}") from None
    if not items:
        raise RingsimError(f"--{what}: empty list")
    return items


def parse_bytes(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in "KMG" else t
    value = int(float(digits) * scale)
    if value <= 0:
        raise ValueError(text)
    return value


def _positive(v: int) -> int:
    if v <= 0:
        raise ValueError(v)
    return v


def _at_least_2(v: int) -> int:
    if v < 2:
        raise ValueError(v)
    return v


def plan_from_args(a: argparse.Namespace) -> dict[str, Any]:
    base = QUICK if a.quick else FULL

    def pick(name: str) -> Any:
        v = getattr(a, name)
        return base[name] if v is None else v

    plan = {
        "parts": _list(a.parts, "parts"),
        "dtypes": _list(pick("dtypes"), "dtypes"),
        "heads": _list(pick("heads"), "heads", lambda x: _positive(int(x))),
        "head_dims": _list(pick("head_dims"), "head-dims", lambda x: _positive(int(x))),
        "blocks": _list(pick("blocks"), "blocks", lambda x: _positive(int(x))),
        "masks": _list(pick("masks"), "masks"),
        "kinds": _list(pick("kinds"), "kinds"),
        "sizes": _list(pick("sizes"), "sizes", parse_bytes),
        "interference_blocks": _list(pick("interference_blocks"), "interference-blocks",
                                     lambda x: _positive(int(x))),
        "interference_sizes": _list(pick("interference_sizes"), "interference-sizes",
                                    lambda x: "kv" if x.lower() == "kv" else parse_bytes(x)),
        "concurrency": _list(pick("concurrency"), "concurrency", lambda x: _positive(int(x))),
        "collectives": _list(pick("collectives"), "collectives"),
        "collective_gpus": _list(pick("collective_gpus"), "collective-gpus", lambda x: _positive(int(x))),
        "collective_sizes": _list(pick("collective_sizes"), "collective-sizes", parse_bytes),
        "ring_processes": _list(pick("ring_processes"), "ring-processes", lambda x: _at_least_2(int(x))),
        "samples": pick("samples"), "warmup": pick("warmup"), "compute_passes": pick("compute_passes"),
        "host_passes": pick("host_passes"),
        "batch": a.batch,
        "kv_heads": a.kv_heads, "quick": a.quick,
    }
    for name, allowed in (("parts", PARTS), ("dtypes", tuple(DTYPE_BYTES)), ("masks", ("full", "diagonal")),
                          ("kinds", ("fwd", "bwd")), ("collectives", COLLECTIVES)):
        bad = [x for x in plan[name] if x not in allowed]
        if bad:
            raise RingsimError(f"--{name}: {', '.join(map(str, bad))} not among {', '.join(allowed)}")
    if getattr(a, "force", False) and getattr(a, "resume", False):
        raise RingsimError("--force starts FILE over and --resume continues it: give one of them")
    if "collective" in plan["parts"] and min(plan["collective_gpus"]) < 2:
        raise RingsimError("--collective-gpus: a collective needs two ranks or more")
    if plan["samples"] <= 0 or plan["warmup"] < 0 or a.batch <= 0 or plan["compute_passes"] <= 0:
        raise RingsimError("--samples, --compute-passes and --batch must be positive, --warmup non-negative")
    if not 1 <= plan["host_passes"] <= len(HOST_PASSES):
        raise RingsimError(f"--host-passes must be 1 to {len(HOST_PASSES)}, got {plan['host_passes']}")
    for h in plan["heads"]:
        if plan["kv_heads"] is not None and (plan["kv_heads"] <= 0 or h % plan["kv_heads"]):
            raise RingsimError(f"--kv-heads {plan['kv_heads']} must divide every head count (got {h})")
    return plan
