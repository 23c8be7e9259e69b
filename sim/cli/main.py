"""The `ringsim` command line.

Subcommands: simulate, compare (this module), sweep (sim.cli.sweep), plan
(sim.cli.plan), gemm (sim.cli.step), trace import (sim.cli.trace), infer (sim.cli.infer), and those other packages
register through the `ringsim.commands` entry point group (pyproject.toml): hw, calibrate and
validate (beside the real kernel: hw.cli, hw.calibrate_cli, hw.validate_cli), dashboard (the
browser app). The simulator
imports neither package. A user's mistake is a `RingsimError`: printed as one line on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import Any, Sequence

import numpy as np

from sim.cli import infer, plan, step, sweep, trace
from sim.cli.options import Parser, add_scenario_args, resolve_run, save_traces, values_from_args
from sim.engine.players import head_geometry
from sim.errors import RingsimError
from sim.files import check_output
from sim.hardware.model import HardwareModel
from sim.invariants import check_rows, check_run
from sim.layouts.packed import BlockCall, Packed, token_work
from sim.scenario.config import Scenario
from sim.scenario.documents import bounds as doc_bounds
from sim.scenario.documents import describe_packed
from sim.scenario.resolve import without_scheme
from sim.schemes import names as scheme_names
from sim.schemes import run_words
from sim.trace.metrics import compute_metrics
from sim.units import fmt_bytes, fmt_s, table

COMMAND_GROUP = "ringsim.commands"
"""Entry points `name = "module:register"`; register(subparsers) adds the commands. The
modules import torch or dash only when a command runs."""


def _summary(scenario: Scenario, metrics) -> dict[str, Any]:
    return {"scheme": scenario.scheme, "layout": scenario.layout, "overlap": scenario.overlap,
            **metrics.to_dict()}


def one_gpu_s(scenario: Scenario, hardware: HardwareModel) -> float:
    """One GPU's attention on its own share of the tokens (seq / GPUs, one causal or full
    call per pass, called in a loop as a benchmark does: queued, nothing to merge). The
    ratio ring-flash-attention's table reports is GPUs x this / the makespan: the GPUs do
    the work of one sequence of seq tokens, each would do 1 / GPUs^2 of it alone."""
    w = scenario.workload
    c = w.seq // scenario.n_gpus
    pairs = c * (c + 1) // 2 if w.causal else c * c
    more = dict(head_geometry(w))
    if hardware.takes_call_order:
        more |= {"alone": True, "isolated": False}
    kinds = {"fwd": ("fwd",), "bwd": ("bwd",), "fwdbwd": ("fwd", "bwd")}[w.pass_]
    if scenario.packed:
        # packed documents: each document's share, 1 / GPUs of it, in one varlen call (the
        # local cu_seqlens of ring-flash-attention's varlen benchmark); its pairs as the
        # mask keeps them
        share = np.diff(doc_bounds(w.docs, w.seq, w.seed)) // scenario.n_gpus
        share = share[share > 0]
        local = Packed(tuple(int(x) for x in np.r_[0, np.cumsum(share)]), 1, "contiguous", w.window, w.causal)
        pairs = int(token_work(local).sum())
        if hardware.times_varlen(w.dtype):
            call = BlockCall(tuple(("diagonal" if w.causal else "full", int(x), int(x)) for x in share))
            return sum(float(hardware.varlen_times_s([call], np.array([(2.5 if k == "bwd" else 1.0)
                                                                       * w.fwd_flops(pairs)]),
                                                      dtype=w.dtype, kind=np.array([k]), **more)[0])
                       for k in kinds)
    return sum(hardware.compute_time_s((2.5 if k == "bwd" else 1.0) * w.fwd_flops(pairs), dtype=w.dtype, kind=k,
                                       mask="diagonal" if w.causal else "full", q_tokens=c, kv_tokens=c, **more)
               for k in kinds)


NOTE_WIDTH = 120
"""A note under a table wraps at this many characters (the tables are about as wide)."""


def _wrapped(head: str, text: str) -> str:
    """`head` then `text`, wrapped at NOTE_WIDTH, its later lines indented under the text."""
    return textwrap.fill(head + text, width=NOTE_WIDTH, subsequent_indent=" " * len(head),
                         break_long_words=False, break_on_hyphens=False)


def _print_documents(scenario: Scenario) -> None:
    """The line a table's header gains on packed documents (nothing for one document)."""
    w = scenario.workload
    if scenario.packed:
        print(f"packed: {describe_packed(w.docs, w.seq, w.seed, w.window)}")


def cmd_simulate(a: argparse.Namespace) -> int:
    # the engine's player loads when a command plays a scenario, not on every start
    from sim.engine.play import simulate

    for path in (a.trace, a.chrome_trace):
        check_output(path, a.force)
    run = resolve_run(values_from_args(a))
    scenario, profile = run.scenario, run.profile
    trace = simulate(scenario, profile)
    m = compute_metrics(trace)
    # ring-flash-attention's ratio takes the work as growing with the square of the tokens:
    # under a window it grows with the tokens, and the ratio says nothing
    alone_s = None if scenario.workload.window else one_gpu_s(scenario, run.hardware)
    vs_one = scenario.n_gpus * alone_s / m.makespan_s if alone_s is not None and m.makespan_s > 0 else None
    out = {"scenario": scenario.describe(), **_summary(scenario, m), "bytes_sent": m.bytes_sent,
           "one_gpu_s": alone_s, "vs_one_gpu": vs_one}
    check_run(out, out["scenario"])
    save_traces(a, trace)
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    w = scenario.workload
    print(f"{scenario.n_gpus} x {trace.hardware.get('gpu', {}).get('name', trace.hardware.get('name', '?'))}, "
          f"{run_words(scenario.describe())}, "
          f"{w.seq} tokens ({scenario.tokens_per_rank} per rank), {w.heads}/{w.kv_heads} heads x {w.head_dim}, "
          f"{w.dtype}, {'causal' if w.causal else 'full'}, {w.pass_}, work counted {scenario.granularity}"
          + (f" ({scenario.tile}-token tiles)" if scenario.granularity == "tile" else ""))
    _print_documents(scenario)
    print(f"makespan {fmt_s(m.makespan_s)}   ideal {fmt_s(m.ideal_s)}   efficiency "
          f"{m.efficiency:.1%}   load imbalance {m.load_imbalance:.3f}   overlap efficiency "
          f"{m.overlap_efficiency:.1%}")
    if vs_one is not None and scenario.n_gpus > 1:
        print(f"against one GPU: its kernel on {scenario.tokens_per_rank} tokens takes {fmt_s(alone_s)}; "
              f"{scenario.n_gpus} x that / makespan = {vs_one:.1%} (ring-flash-attention's ratio)")
    print(f"total {m.total_flops / 1e12:.2f} TFLOP, {fmt_bytes(m.total_bytes)} sent "
          f"({fmt_bytes(max(m.bytes_sent, default=0.0))} by the busiest GPU)")
    capacity_gb = trace.hardware.get("gpu", {}).get("memory_gb")
    peak = max((r.peak_mem_bytes or 0) for r in m.ranks)
    if capacity_gb:
        verdict = "fits" if peak <= capacity_gb * 1e9 else "DOES NOT FIT"
        print(f"attention memory per rank {fmt_bytes(peak)} of {capacity_gb:g} GB: {verdict}")
    print()
    ranks, note = ranks_to_show(m.ranks, a.all_ranks)
    rows = [[r.rank, fmt_s(r.compute_s), fmt_s(r.comm_s), fmt_s(r.exposed_comm_s),
             fmt_s(r.idle_s), f"{r.flops / 1e12:.3f}", fmt_bytes(r.bytes_sent), fmt_bytes(r.peak_mem_bytes)]
            for r in ranks]
    print(table(["rank", "compute", "comm", "exposed comm", "idle", "TFLOP", "sent", "peak mem"], rows))
    if note:
        print(note)
    return 0


SCREENFUL_RANKS = 32
"""Beyond this many ranks `simulate` shows a summary of them (--all-ranks: every one)."""


def ranks_to_show(ranks: Sequence[Any], every: bool = False) -> tuple[list[Any], str]:
    """The ranks a terminal shows: all of them up to a screenful; beyond, the first and the
    last four and those with the most compute, exposed communication and idle time, with a
    line saying so."""
    if every or len(ranks) <= SCREENFUL_RANKS:
        return list(ranks), ""
    keep = {r.rank for r in list(ranks[:4]) + list(ranks[-4:])}
    for key in ("compute_s", "exposed_comm_s", "idle_s"):
        keep |= {r.rank for r in sorted(ranks, key=lambda r: getattr(r, key), reverse=True)[:3]}
    shown = [r for r in ranks if r.rank in keep]
    return shown, (f"{len(shown)} of {len(ranks)} ranks shown: the first and last four and the three with the most "
                   "compute, exposed communication and idle time (--all-ranks: every one; --json: all of them)")


def cmd_compare(a: argparse.Namespace) -> int:
    # the engine's player (through sim.planning.compare) loads when a command plays a scenario
    from sim.planning.compare import compare_layout_rows

    if a.schemes is not None and a.impls is not None:
        raise RingsimError("give --schemes or --impls, not both")
    for flag, value in (("--schemes", a.schemes), ("--impls", a.impls)):
        if value is not None and not value.replace(",", "").strip():
            raise RingsimError(f"{flag} needs all or a list of names, got {value!r}")
    if a.schemes is not None:
        return _compare_schemes(a)
    if a.impls is not None:
        return _compare_impls(a)
    run = resolve_run(values_from_args(a) | {"layout": "zigzag"})
    scenario = run.scenario
    rows = compare_layout_rows(scenario, run.profile)
    check_rows(rows, scenario.describe())
    if a.json:
        print(json.dumps({"scenario": scenario.describe(), "rows": rows}, indent=2))
        return 0
    w = scenario.workload
    print(f"{scenario.n_gpus} GPUs, {w.seq} tokens, {w.heads}/{w.kv_heads} heads x {w.head_dim}, "
          f"{w.dtype}, {'causal' if w.causal else 'full'}, {w.pass_}")
    _print_documents(scenario)
    best = min(r["makespan_s"] for r in rows)
    print(table(
        ["layout", "overlap", "makespan", "vs best", "efficiency", "imbalance", "overlap eff",
         "max exposed comm"],
        [[r["layout"], "on" if r["overlap"] else "off", fmt_s(r["makespan_s"]),
          f"{r['makespan_s'] / best:.2f}x", f"{r['efficiency']:.1%}", f"{r['load_imbalance']:.3f}",
          f"{r['overlap_efficiency']:.1%}", fmt_s(r["exposed_comm_s"])] for r in rows]))
    return 0


def _version() -> str:
    try:
        return version("ringsim")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "(not installed)"


def _compare_schemes(a: argparse.Namespace) -> int:
    wanted = None if a.schemes.strip() == "all" else [x.strip() for x in a.schemes.split(",") if x.strip()]
    for name in wanted or []:
        if name not in scheme_names():
            raise RingsimError(f"unknown scheme {name!r} in --schemes; choose all or from {', '.join(scheme_names())}")
    # the engine's player (through sim.planning.compare) loads when a command plays a scenario
    from sim.planning.compare import compare_scheme_rows
    from sim.planning.plan import TIE_WITHIN, tied

    # every scheme's variants start from the default scheme, whatever --scheme says
    run = resolve_run(without_scheme(values_from_args(a)) | {"layout": "zigzag"})
    base = run.scenario
    rows = compare_scheme_rows(base, run.profile, wanted)
    check_rows(rows, base.describe())
    ran = [r for r in rows if "refused" not in r]
    best = min(ran, key=lambda r: r["makespan_s"]) if ran else None
    # the runs within the model's own error of the fastest (sim.planning.plan.TIE_WITHIN) tie with it
    ties = [ran[i] for i in tied([r["makespan_s"] for r in ran])]
    if a.json:
        print(json.dumps({"scenario": base.describe(), "rows": rows,
                          "fastest": None if best is None else [best["scheme"], best["variant"]],
                          "tied": [[r["scheme"], r["variant"]] for r in ties] if len(ties) > 1 else []}, indent=2))
        return 0
    w, hw = base.workload, base.hardware
    nodes = -(-base.n_gpus // hw.gpus_per_node)
    between = (f", {hw.inter_link.name} between nodes" if hw.inter_link is not None and nodes > 1 else "")
    inside = hw.pcie.words() if hw.pcie is not None else hw.link.name
    print(f"{base.n_gpus} x {hw.gpu.name} ({nodes} node{'s' if nodes > 1 else ''} of {hw.gpus_per_node}, "
          f"{inside} inside{between}), {w.seq} tokens, {w.heads}/{w.kv_heads} heads x {w.head_dim}, "
          f"{w.dtype}, {'causal' if w.causal else 'full'}, {w.pass_}")
    _print_documents(base)
    shown, notes = [], []
    for i, r in enumerate(rows, 1):
        if "refused" in r:
            shown.append([i, r["scheme"], r["variant"], "-", "-", "-", "-", "-", "-"])
            notes.append(_wrapped(f"{i}. ", f"not possible: {r['refused']}"))
            continue
        shown.append([i, r["scheme"], r["variant"], fmt_s(r["makespan_s"]),
                      f"{r['makespan_s'] / best['makespan_s']:.2f}x",
                      "-" if r["efficiency"] is None else f"{r['efficiency']:.1%}", fmt_s(r["exposed_comm_s"]),
                      fmt_bytes(r["bytes_sent_per_gpu"]), fmt_bytes(r["peak_mem_bytes"])])
        notes.append(_wrapped(f"{i}. ", r["explanation"]))
    print(table(["#", "scheme", "variant", "makespan", "vs best", "efficiency", "max exposed comm", "sent per GPU",
                 "peak mem per GPU"], shown))
    print("\nwhat bounds each:")
    print("\n".join(notes))
    if best is not None:
        print("\n" + _wrapped("fastest: ", f"{best['scheme']} ({best['variant']}): {best['explanation']}"))
    if len(ties) > 1:
        print(f"a tie: within the model's error of {TIE_WITHIN:.0%} of the fastest (docs/gpu-model.md, "
              "docs/calibration.md):")
        print("\n".join(f"  {r['scheme']} ({r['variant']}) {fmt_s(r['makespan_s'])}" for r in ties[1:]))
    return 0


def _compare_impls(a: argparse.Namespace) -> int:
    from sim import implementations
    from sim.planning.compare import compare_impl_rows

    wanted = None if a.impls.strip() == "all" else [x.strip() for x in a.impls.split(",") if x.strip()]
    for name in wanted or []:
        if name not in implementations.LIBRARIES:
            raise RingsimError(f"unknown implementation {name!r} in --impls; choose all or from "
                               f"{', '.join(implementations.LIBRARIES)}")
    values = values_from_args(a)
    run = resolve_run(values | {"layout": values.get("layout", "zigzag"), "impl": implementations.DEFAULT})
    base = run.scenario
    rows = compare_impl_rows(base, run.profile, wanted)
    check_rows(rows, base.describe())
    ran = [r for r in rows if "refused" not in r]
    best = min(ran, key=lambda r: r["makespan_s"]) if ran else None
    if a.json:
        print(json.dumps({"scenario": base.describe(), "rows": rows,
                          "fastest": None if best is None else best["impl"]}, indent=2))
        return 0
    w = base.workload
    print(f"{base.n_gpus} x {base.hardware.gpu.name}, {run_words(base.describe())}, {w.seq} tokens, "
          f"{w.heads}/{w.kv_heads} heads x {w.head_dim}, {w.dtype}, {'causal' if w.causal else 'full'}, {w.pass_}: "
          f"its implementations (docs/implementations.md)")
    _print_documents(base)
    shown, notes = [], []
    for r in rows:
        if "refused" in r:
            shown.append([r["impl"], r["variant"], "-", "-", "-", "-"])
            notes.append(f"{r['impl']}: not possible: {r['refused']}")
            continue
        shown.append([r["impl"], r["variant"], fmt_s(r["makespan_s"]), f"{r['makespan_s'] / best['makespan_s']:.2f}x",
                      "-" if r["efficiency"] is None else f"{r['efficiency']:.1%}", fmt_s(r["exposed_comm_s"])])
    print(table(["impl", "implementation", "makespan", "vs best", "efficiency", "max exposed comm"], shown))
    if notes:
        print("\n".join(notes))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ringsim", description="Simulate, measure and explore Ring Attention.")
    p.add_argument("--version", action="version", version=f"ringsim {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sp = sub.add_parser("simulate", help="simulate one schedule and report its metrics")
    add_scenario_args(sp)
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.add_argument("--trace", metavar="FILE", help="save the trace (versioned JSON)")
    sp.add_argument("--chrome-trace", metavar="FILE", help="save a Chrome trace (Perfetto)")
    sp.add_argument("--force", action="store_true", help="overwrite existing output files")
    sp.add_argument("--all-ranks", action="store_true",
                    help=f"print every rank's row (default: a summary beyond {SCREENFUL_RANKS} ranks)")
    sp.set_defaults(func=cmd_simulate)
    cp = sub.add_parser("compare", help="all layouts, overlap on and off, side by side; or with "
                                         "--schemes, the schemes")
    add_scenario_args(cp, with_layout=False)
    cp.add_argument("--schemes", default=None, metavar="all|NAME,...",
                    help="compare schemes instead (every ring layout, allgather, ulysses, hybrid): "
                         "makespan, exposed communication, bytes and memory per GPU, and what bounds each")
    cp.add_argument("--impls", default=None, metavar="all|NAME,...",
                    help="compare the implementations of --scheme instead (ideal, te, rfa, torch, usp: what each "
                         "library's step launches, docs/implementations.md), on --layout (default zigzag)")
    cp.add_argument("--layout", default=None, help="with --impls: the layout they run (default zigzag)")
    cp.add_argument("--json", action="store_true", help="print one JSON object")
    cp.set_defaults(func=cmd_compare)
    sweep.register(sub)
    plan.register(sub)
    step.register(sub)
    trace.register(sub)
    infer.register(sub)
    for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        try:
            register = entry.load()
        except ModuleNotFoundError as e:
            if e.name != entry.module:  # the module exists but something it imports is missing
                raise
            continue
        register(sub)
    return p


FILE_OPTIONS = ("trace", "chrome_trace", "out", "output", "profile", "profile_out", "markdown", "compare", "check",
                "spec", "paths", "bench", "from_traces", "holdout", "traces_dir")
"""The arguments of every command that name a file, read or written."""


def check_file_names(a: argparse.Namespace) -> None:
    """Refuse an empty file name: `--trace ''` would otherwise be taken as no file at all and
    the command would end with nothing written and exit 0."""
    for name in FILE_OPTIONS:
        value = getattr(a, name, None)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and not v.strip():
                raise RingsimError(f"--{name.replace('_', '-')} needs a file name, got {v!r}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
        if not getattr(a, "func", None):
            parser.print_help()
            return 2
        check_file_names(a)
        return a.func(a) or 0
    except RingsimError as e:
        print(f"ringsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ringsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
