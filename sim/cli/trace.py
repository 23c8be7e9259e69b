"""`ringsim trace import PATH...`: read torch.profiler (Kineto) traces, one file per rank
(sim.profiler.reader), and report each rank's breakdown as HTA defines it
(sim.profiler.breakdown), the kernels found and the names not recognised; `--out` keeps the
normalized table (Parquet) the rest of ringsim reads (docs/traces.md)."""

from __future__ import annotations

import argparse
import json

from sim.files import check_output
from sim.profiler.breakdown import Breakdown, breakdown, has_attention, kernel_counts, pct
from sim.profiler.kernels import COMM_KINDS
from sim.profiler.reader import read_run, write_table
from sim.units import fmt_s, table

UNKNOWN_SHOWN = 10
"""Unknown kernel names printed in the text report (--json lists them all)."""


def register(sub) -> None:
    t = sub.add_parser("trace", help="profiler traces recorded elsewhere: `trace import`")
    tsub = t.add_subparsers(dest="trace_command", metavar="SUBCOMMAND")
    i = tsub.add_parser("import", help="read torch.profiler (Kineto) traces and report each rank's compute, "
                                       "communication, memory and idle time and comm-comp overlap (HTA's "
                                       "definitions)",
                        description="Read torch.profiler (Kineto) Chrome-trace JSON: each PATH a .json or "
                                    ".json.gz file or a folder of one file per rank (docs/traces.md).")
    i.add_argument("paths", nargs="+", metavar="PATH", help="a trace file or a folder of one file per rank")
    i.add_argument("--json", action="store_true",
                   help="a list with one object per rank: rank, iterations, compute_s, comm_s, memory_s, "
                        "other_s, idle_s, span_s, overlap_pct, kernels, attention_found, unknown_kernels, ...")
    i.add_argument("--out", metavar="FILE.parquet", help="write the normalized table of events (Parquet)")
    i.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    i.add_argument("--partial", action="store_true",
                   help="read the ranks given even when others of the run are missing")
    i.add_argument("--per-iteration", action="store_true", help="also one row per ProfilerStep")
    i.set_defaults(func=cmd_import)
    t.set_defaults(func=lambda a: _need_subcommand(t))


def _need_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _row_json(b: Breakdown, run, rank_kernels: dict[str, int]) -> dict:
    d = b.to_dict()
    d["iterations"] = [n for n, _, _ in run.iterations.get(b.rank, [])] if b.iteration < 0 else [b.iteration]
    d["compute_pct"] = pct(b.compute_s, b.span_s)
    d["idle_pct"] = pct(b.idle_s, b.span_s)
    d["non_compute_pct"] = pct(b.non_compute_s, b.span_s)
    d["kernels"] = rank_kernels
    d["attention_kernels"] = sum(rank_kernels.get(k, 0) for k in ("attention_fwd", "attention_bwd"))
    d["gemm_kernels"] = rank_kernels.get("gemm", 0)
    d["comm_kernels"] = sum(rank_kernels.get(k, 0) for k in COMM_KINDS)
    d["device"] = run.devices.get(b.rank, {}).get("name")
    d["clock_offset_s"] = run.clock_offsets_s.get(b.rank, 0.0)
    d["source"] = run.sources.get(b.rank)
    return d


def cmd_import(a: argparse.Namespace) -> int:
    check_output(a.out, a.force)
    run = read_run(a.paths, partial=a.partial)
    rows = breakdown(run, per_iteration=a.per_iteration)
    counts = {r: kernel_counts(run, r) for r in run.ranks}
    attention = has_attention(run)
    if a.out:
        write_table(run, a.out, overwrite=a.force)
    if a.json:
        out = []
        for b in rows:
            d = _row_json(b, run, counts[b.rank])
            d["attention_found"] = attention
            d["unknown_kernels"] = run.unknown_kernels
            d["notes"] = list(run.notes)
            out.append(d)
        print(json.dumps(out, indent=2, allow_nan=False))
        return 0
    devices = sorted({d.get("name", "?") for d in run.devices.values() if d})
    print(f"{len(run.ranks)} rank{'s' if len(run.ranks) != 1 else ''} of {run.world_size}"
          + (f" on {', '.join(devices)}" if devices else " (no GPU: host operators broken down)")
          + f"; {len(run.events)} events; ProfilerSteps "
          + (", ".join(str(n) for n in sorted({n for v in run.iterations.values() for n, _, _ in v})) or "none"))
    for note in run.notes:
        print(note)
    headers = ["rank", "iteration", "span", "compute", "comm (exposed)", "memory", "other", "idle",
               "comm-comp overlap", "events"]
    body = []
    for b in rows:
        body.append([b.rank, "HTA scope" if b.iteration < 0 else b.iteration, fmt_s(b.span_s),
                     _part(b.compute_s, b.span_s), _part(b.comm_s, b.span_s), _part(b.memory_s, b.span_s),
                     _part(b.other_s, b.span_s), _part(b.idle_s, b.span_s),
                     "-" if b.overlap_pct is None else f"{b.overlap_pct:.1f}%", b.events])
    print(table(headers, body))
    total: dict[str, int] = {}
    for c in counts.values():
        for k, n in c.items():
            total[k] = total.get(k, 0) + n
    if total:
        print("GPU kernels: " + ", ".join(f"{k} {n}" for k, n in sorted(total.items(), key=lambda kv: -kv[1])))
    if not attention:
        print("no attention kernels found (FlashAttention, cuDNN, TransformerEngine, memory-efficient, CK/aiter "
              "or SDPA on the CPU); the breakdown above stands without them")
    if run.unknown_kernels:
        n = sum(run.unknown_kernels.values())
        print(f"{len(run.unknown_kernels)} kernel name{'s' if len(run.unknown_kernels) != 1 else ''} not "
              f"recognised ({n} launches; counted as other):")
        for name, k in list(run.unknown_kernels.items())[:UNKNOWN_SHOWN]:
            print(f"  {k:6d}  {name[:160]}")
        if len(run.unknown_kernels) > UNKNOWN_SHOWN:
            print(f"  ... and {len(run.unknown_kernels) - UNKNOWN_SHOWN} more (--json lists them all)")
    if a.out:
        print(f"wrote {a.out}")
    return 0


def _part(x: float, span: float) -> str:
    return f"{fmt_s(x)} ({pct(x, span):.1f}%)"
