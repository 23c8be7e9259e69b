"""The `ringsim` command line.

Subcommands: simulate, compare (this module), sweep (sim.sweep_cli), plan
(sim.plan_cli), and those other packages register through the `ringsim.commands`
entry point group (pyproject.toml): hw, calibrate and validate (beside the real kernel:
hw.cli, hw.calibrate_cli, hw.validate_cli), dashboard (the browser app). The simulator
imports neither package. A user's mistake is a `RingsimError`: printed as one line on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from importlib.metadata import entry_points
from typing import Any, Sequence

from sim.config import LAYOUTS, PASSES, PLACEMENTS, Gpu, Hardware, Link, Scenario, Workload
from sim.errors import RingsimError
from sim.presets import CLUSTER_PRESETS, GPU_PRESETS, LINK_PRESETS, cluster_preset, gpu_preset
from sim.schemes import names as scheme_names
from sim.spec import tokens
from sim.units import fmt_bytes, fmt_s

COMMAND_GROUP = "ringsim.commands"
"""Entry points `name = "module:register"`; register(subparsers) adds the commands. The
modules import torch or dash only when a command runs."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's usage dump is more than one line
        raise RingsimError(message)


def add_scenario_args(p: argparse.ArgumentParser, *, with_layout: bool = True) -> None:
    """The workload, hardware and schedule flags shared by simulate, compare and others."""
    d = Workload()
    g = p.add_argument_group("workload")
    g.add_argument("--gpus", type=int, default=8, help="ranks in the ring (default 8)")
    g.add_argument("--seq", type=tokens, default=d.seq,
                   help=f"tokens per sequence: a number or a size such as 64k or 1M (default {d.seq})")
    g.add_argument("--batch", type=int, default=d.batch, help="sequences (default 1)")
    g.add_argument("--heads", type=int, default=d.heads, help=f"query heads (default {d.heads})")
    g.add_argument("--kv-heads", type=int, default=d.kv_heads,
                   help=f"key/value heads, fewer than --heads for GQA/MQA (default {d.kv_heads})")
    g.add_argument("--head-dim", type=int, default=d.head_dim, help=f"(default {d.head_dim})")
    g.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default=d.dtype)
    g.add_argument("--causal", action=argparse.BooleanOptionalAction, default=d.causal,
                   help="causal mask (default on)")
    g.add_argument("--pass", dest="pass_", choices=PASSES, default=d.pass_,
                   help="fwd, bwd or fwdbwd (default fwd)")
    h = p.add_argument_group("hardware")
    h.add_argument("--cluster", default=None,
                   help=f"cluster preset, the defaults of the next five flags: {', '.join(CLUSTER_PRESETS)}")
    h.add_argument("--gpu", default=None, help=f"GPU preset: {', '.join(GPU_PRESETS)} (default H100-SXM)")
    h.add_argument("--link", default=None,
                   help=f"link preset inside a node: {', '.join(LINK_PRESETS)} (default nvlink4)")
    h.add_argument("--inter-link", default=None,
                   help="link preset of a NIC, between nodes (default: --link everywhere)")
    h.add_argument("--gpus-per-node", type=int, default=None, help="(default 8)")
    h.add_argument("--nics-per-node", type=int, default=None,
                   help="NICs per node, each shared by its share of the node's GPUs (default one per GPU)")
    h.add_argument("--nic-gbps", type=float, default=None,
                   help="GB/s per direction of a NIC, replacing the inter-link's (default: the preset's)")
    h.add_argument("--kernel", default="default",
                   help="attention kernel whose published throughput and structure time each block (the block "
                        "model): fa2, fa3, cudnn (where the preset has its table; default: the preset's first) or "
                        "flat (every block at peak x efficiency)")
    h.add_argument("--merge", choices=["fused", "unfused"], default="fused",
                   help="how each block's partial result is merged: one fused kernel (default) or the chain of "
                        "elementwise kernels ring-flash-attention and torch's context_parallel run")
    h.add_argument("--tflops", type=float, default=None,
                   help="achieved TFLOP/s per GPU for every block (flat model)")
    h.add_argument("--efficiency", type=float, default=None,
                   help="fraction of the preset's peak achieved by every block (flat model; default 0.5)")
    h.add_argument("--overhead-us", type=float, default=None,
                   help="flat model: per-block launch overhead; block model: the host-side floor of a call, µs")
    h.add_argument("--link-gbps", type=float, default=None, help="link GB/s per direction")
    h.add_argument("--link-latency-us", type=float, default=None, help="link latency, µs")
    h.add_argument("--profile", default=None,
                   help="calibrated hardware profile (from `ringsim calibrate`), replacing presets; a GPU profile "
                        "(from one GPU's compute grid) replaces the GPU alone and keeps the link flags")
    s = p.add_argument_group("schedule")
    s.add_argument("--scheme", choices=scheme_names(), default="ring",
                   help="sequence-parallel scheme (default ring)")
    s.add_argument("--ulysses-degree", type=int, default=None,
                   help="ulysses, hybrid: GPUs per all-to-all group (ulysses: all of them; hybrid default: "
                        "the largest that fits the heads and a node, leaving rings of two or more)")
    s.add_argument("--ring-degree", type=int, default=None,
                   help="hybrid: GPUs per ring (ulysses degree x ring degree = --gpus)")
    s.add_argument("--placement", choices=PLACEMENTS, default="ulysses-inner",
                   help="hybrid: all-to-all groups on consecutive ranks, inside a node (ulysses-inner, "
                        "default, as TransformerEngine's a2a+p2p) or the rings (ring-inner)")
    s.add_argument("--head-groups", type=int, default=1,
                   help="allgather: gather and attend K/V head group by head group, each gather behind "
                        "the previous group's compute (default 1: one gather, exposed)")
    if with_layout:
        s.add_argument("--layout", choices=LAYOUTS, default="zigzag", help="(default zigzag)")
        s.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True,
                       help="double-buffered K/V transfers behind compute (default on)")
    s.add_argument("--sync", choices=["step", "buffered"], default="step",
                   help="with overlap: post and wait once per step as ring kernels do (default), "
                        "or forward each block as soon as a buffer is free")
    s.add_argument("--granularity", choices=["exact", "tile"], default="exact",
                   help="count exact unmasked pairs or whole tiles (default exact)")
    s.add_argument("--tile", type=int, default=128, help="tile edge in tokens (default 128)")


def hardware_from_args(a: argparse.Namespace) -> Hardware:
    gpu_over: dict[str, Any] = {}
    if a.tflops is not None:
        gpu_over["achieved_tflops"] = a.tflops
    if a.efficiency is not None:
        gpu_over["efficiency"] = a.efficiency
    if a.overhead_us is not None:
        gpu_over["launch_overhead_us"] = a.overhead_us
    gpu_over["merge"] = getattr(a, "merge", "fused")
    link_over: dict[str, Any] = {}
    if a.link_gbps is not None:
        link_over["bandwidth_gbps"] = a.link_gbps
    if a.link_latency_us is not None:
        link_over["latency_us"] = a.link_latency_us
    c = cluster_preset(a.cluster) if getattr(a, "cluster", None) else None

    def pick(value, of_cluster, default):
        return value if value is not None else (of_cluster if c is not None else default)

    link_name = pick(a.link, c and c.link, "nvlink4")
    inter = pick(a.inter_link, c and c.inter_link, None)
    nic_gbps = getattr(a, "nic_gbps", None)
    if nic_gbps is not None:
        inter = inter or link_name
    gpu_profile = _gpu_profile(a)
    if gpu_profile is not None:
        if a.gpu is not None and gpu_preset(a.gpu).name != gpu_profile.gpu:
            raise RingsimError(f"--gpu {a.gpu} and the GPU profile {a.profile} ({gpu_profile.gpu}) disagree")
        gpu = gpu_profile.gpu_for(a.kernel, gpu_over.pop("merge"))
        gpu = replace(gpu, **gpu_over) if gpu_over else gpu
    else:
        gpu = Gpu.preset(pick(a.gpu, c and c.gpu, "H100-SXM"), kernel=a.kernel, **gpu_over)
    if a.overhead_us is not None and gpu.kernel is not None:
        gpu = replace(gpu, floors=replace(gpu.floors, fwd_host_us=a.overhead_us, bwd_host_us=a.overhead_us))
    return Hardware(
        gpu=gpu,
        link=Link.preset(link_name, **link_over),
        inter_link=(Link.preset(inter, **({} if nic_gbps is None else {"bandwidth_gbps": nic_gbps}))
                    if inter else None),
        gpus_per_node=pick(a.gpus_per_node, c and c.gpus_per_node, 8),
        nics_per_node=pick(getattr(a, "nics_per_node", None), c and c.nics_per_node, None),
    )


def scenario_from_args(a: argparse.Namespace, **changes: Any) -> Scenario:
    workload = Workload(batch=a.batch, seq=a.seq, heads=a.heads, kv_heads=a.kv_heads,
                        head_dim=a.head_dim, dtype=a.dtype, causal=a.causal, pass_=a.pass_)
    fields = dict(workload=workload, hardware=hardware_from_args(a), n_gpus=a.gpus,
                  scheme=a.scheme, granularity=a.granularity, tile=a.tile, sync=a.sync,
                  ulysses_degree=a.ulysses_degree, ring_degree=a.ring_degree, placement=a.placement,
                  head_groups=a.head_groups)
    if hasattr(a, "layout"):
        fields.update(layout=a.layout, overlap=a.overlap)
    fields.update(changes)
    return Scenario(**fields)


def _gpu_profile(a: argparse.Namespace):
    """The GPU profile --profile names, or None (no profile, or a whole-hardware one)."""
    if not getattr(a, "profile", None):
        return None
    from sim.gpu_profile import gpu_profile_from_dict, is_gpu_profile
    from sim.trace import read_json

    d = read_json(a.profile, what="profile", max_bytes=16 * 1024 * 1024)
    return gpu_profile_from_dict(d, a.profile) if is_gpu_profile(d) else None


def profile_from_args(a: argparse.Namespace):
    """The calibrated profile named by --profile, or None for the presets (and for a GPU
    profile, which hardware_from_args applies to the GPU)."""
    if not getattr(a, "profile", None) or _gpu_profile(a) is not None:
        return None
    from sim.host import mismatch_line, this_host
    from sim.profile import load_profile

    profile = load_profile(a.profile)
    if profile.measured_on.get("kind", "cpu") == "cpu":
        # a CPU profile predicts a host like the one it was measured on: most often this one
        line = mismatch_line(profile.measured_on, this_host(), a.profile)
        if line:
            print(line, file=sys.stderr)
    return profile


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table, columns right-aligned but the first."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for j, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _summary(scenario: Scenario, metrics) -> dict[str, Any]:
    return {"scheme": scenario.scheme, "layout": scenario.layout, "overlap": scenario.overlap,
            **metrics.to_dict()}


def one_gpu_s(scenario: Scenario, hardware: Any) -> float:
    """One GPU's attention on its own share of the tokens (seq / GPUs, one causal or full
    call per pass, called in a loop as a benchmark does: queued, nothing to merge). The
    ratio ring-flash-attention's table reports is GPUs x this / the makespan: the GPUs do
    the work of one sequence of seq tokens, each would do 1 / GPUs^2 of it alone."""
    from sim.players import head_geometry

    w = scenario.workload
    c = w.seq // scenario.n_gpus
    pairs = c * (c + 1) // 2 if w.causal else c * c
    more = dict(head_geometry(hardware, w))
    if getattr(hardware, "takes_call_order", False):
        more |= {"alone": True, "isolated": False}
    kinds = {"fwd": ("fwd",), "bwd": ("bwd",), "fwdbwd": ("fwd", "bwd")}[w.pass_]
    return sum(hardware.compute_time_s((2.5 if k == "bwd" else 1.0) * w.fwd_flops(pairs), dtype=w.dtype, kind=k,
                                       mask="diagonal" if w.causal else "full", q_tokens=c, kv_tokens=c, **more)
               for k in kinds)


def cmd_simulate(a: argparse.Namespace) -> int:
    from sim.engine import simulate
    from sim.metrics import compute_metrics
    from sim.trace import to_chrome_trace, write_json

    scenario = scenario_from_args(a)
    profile = profile_from_args(a)
    trace = simulate(scenario, profile)
    m = compute_metrics(trace)
    alone_s = one_gpu_s(scenario, profile or scenario.hardware)
    vs_one = scenario.n_gpus * alone_s / m.makespan_s if m.makespan_s > 0 else None
    if a.trace:
        trace.save(a.trace, overwrite=a.force)
    if a.chrome_trace:
        write_json(a.chrome_trace, to_chrome_trace(trace), overwrite=a.force)
    if a.json:
        out = {"scenario": scenario.describe(), **_summary(scenario, m), "bytes_sent": m.bytes_sent,
               "one_gpu_s": alone_s, "vs_one_gpu": vs_one}
        print(json.dumps(out, indent=2))
        return 0
    w = scenario.workload
    print(f"{scenario.n_gpus} x {trace.hardware.get('gpu', {}).get('name', trace.hardware.get('name', '?'))}, "
          f"{scheme_variant(scenario)}, "
          f"{w.seq} tokens ({scenario.tokens_per_rank} per rank), {w.heads}/{w.kv_heads} heads x {w.head_dim}, "
          f"{w.dtype}, {'causal' if w.causal else 'full'}, {w.pass_}, work counted {scenario.granularity}"
          + (f" ({scenario.tile}-token tiles)" if scenario.granularity == "tile" else ""))
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
    rows = [[r.rank, fmt_s(r.compute_s), fmt_s(r.comm_s), fmt_s(r.exposed_comm_s),
             fmt_s(r.idle_s), f"{r.flops / 1e12:.3f}", fmt_bytes(r.bytes_sent), fmt_bytes(r.peak_mem_bytes)]
            for r in m.ranks]
    print(table(["rank", "compute", "comm", "exposed comm", "idle", "TFLOP", "sent", "peak mem"], rows))
    return 0


def scheme_variant(scenario: Scenario) -> str:
    """The scheme and what sets it apart, in a few words."""
    settings = {k: v for k, v in scenario.describe().items()
                if k in ("ulysses_degree", "ring_degree", "placement", "head_groups")}
    if scenario.scheme == "ring":
        return f"ring, {scenario.layout} layout, overlap {'on' if scenario.overlap else 'off'}"
    if scenario.scheme == "allgather":
        g = settings["head_groups"]
        return "allgather, " + ("one gather" if g == 1 else f"pipelined over {g} head groups")
    if scenario.scheme == "ulysses":
        return f"ulysses, degree {settings['ulysses_degree']}"
    if scenario.scheme == "hybrid":
        return (f"hybrid, ulysses {settings['ulysses_degree']} x ring {settings['ring_degree']}, "
                f"{settings['placement']}, {scenario.layout} ring")
    return scenario.scheme + "".join(f", {k} {v}" for k, v in settings.items())


def compare_rows(scenario: Scenario, hardware=None) -> list[dict[str, Any]]:
    """Metrics of every layout with overlap on and off, for one workload."""
    from sim.engine import simulate
    from sim.metrics import comparison_row, compute_metrics

    out = []
    for layout in LAYOUTS:
        for overlap in (True, False):
            sc = scenario.with_(layout=layout, overlap=overlap)
            out.append(comparison_row(layout, overlap, compute_metrics(simulate(sc, hardware))))
    return out


def cmd_compare(a: argparse.Namespace) -> int:
    if a.schemes:
        return _compare_schemes(a)
    scenario = scenario_from_args(a, layout="zigzag")
    rows = compare_rows(scenario, profile_from_args(a))
    if a.json:
        print(json.dumps({"scenario": scenario.describe(), "rows": rows}, indent=2))
        return 0
    w = scenario.workload
    print(f"{scenario.n_gpus} GPUs, {w.seq} tokens, {w.heads}/{w.kv_heads} heads x {w.head_dim}, "
          f"{w.dtype}, {'causal' if w.causal else 'full'}, {w.pass_}")
    best = min(r["makespan_s"] for r in rows)
    print(table(
        ["layout", "overlap", "makespan", "vs best", "efficiency", "imbalance", "overlap eff",
         "max exposed comm"],
        [[r["layout"], "on" if r["overlap"] else "off", fmt_s(r["makespan_s"]),
          f"{r['makespan_s'] / best:.2f}x", f"{r['efficiency']:.1%}", f"{r['load_imbalance']:.3f}",
          f"{r['overlap_efficiency']:.1%}", fmt_s(r["exposed_comm_s"])] for r in rows]))
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ringsim")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "(not installed)"


def _compare_schemes(a: argparse.Namespace) -> int:
    wanted = None if a.schemes == "all" else [x.strip() for x in a.schemes.split(",") if x.strip()]
    for name in wanted or []:
        if name not in scheme_names():
            raise RingsimError(f"unknown scheme {name!r} in --schemes; choose all or from {', '.join(scheme_names())}")
    base = scenario_from_args(a, scheme="ring", layout="zigzag", ulysses_degree=None, ring_degree=None,
                              placement="ulysses-inner", head_groups=1)
    from sim.compare import compare_scheme_rows

    rows = compare_scheme_rows(base, profile_from_args(a), wanted)
    ran = [r for r in rows if "refused" not in r]
    best = min(ran, key=lambda r: r["makespan_s"]) if ran else None
    if a.json:
        print(json.dumps({"scenario": base.describe(), "rows": rows,
                          "fastest": None if best is None else [best["scheme"], best["variant"]]}, indent=2))
        return 0
    w, hw = base.workload, base.hardware
    nodes = -(-base.n_gpus // hw.gpus_per_node)
    between = (f", {hw.inter_link.name} between nodes" if hw.inter_link is not None and nodes > 1 else "")
    print(f"{base.n_gpus} x {hw.gpu.name} ({nodes} node{'s' if nodes > 1 else ''} of {hw.gpus_per_node}, "
          f"{hw.link.name} inside{between}), {w.seq} tokens, {w.heads}/{w.kv_heads} heads x {w.head_dim}, "
          f"{w.dtype}, {'causal' if w.causal else 'full'}, {w.pass_}")
    shown = []
    for r in rows:
        if "refused" in r:
            shown.append([r["scheme"], r["variant"], "-", "-", "-", "-", "-", "-", "not possible: " + r["refused"]])
            continue
        shown.append([r["scheme"], r["variant"], fmt_s(r["makespan_s"]), f"{r['makespan_s'] / best['makespan_s']:.2f}x",
                      "-" if r["efficiency"] is None else f"{r['efficiency']:.1%}", fmt_s(r["exposed_comm_s"]),
                      fmt_bytes(r["bytes_sent_per_gpu"]), fmt_bytes(r["peak_mem_bytes"]), r["explanation"]])
    print(table(["scheme", "variant", "makespan", "vs best", "efficiency", "max exposed comm", "sent per GPU",
                 "peak mem per GPU", "what bounds it"], shown))
    if best is not None:
        print(f"\nfastest: {best['scheme']} ({best['variant']}): {best['explanation']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ringsim", description="Simulate, measure and explore Ring Attention.")
    p.add_argument("--version", action="version", version=f"ringsim {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sp = sub.add_parser("simulate", help="simulate one schedule and report its metrics")
    add_scenario_args(sp)
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.add_argument("--trace", metavar="FILE", help="save the trace (versioned JSON)")
    sp.add_argument("--chrome-trace", metavar="FILE", help="save a Chrome trace (Perfetto)")
    sp.add_argument("--force", action="store_true", help="overwrite existing output files")
    sp.set_defaults(func=cmd_simulate)
    cp = sub.add_parser("compare", help="all layouts, overlap on and off, side by side; or with "
                                         "--schemes, the schemes")
    add_scenario_args(cp, with_layout=False)
    cp.add_argument("--schemes", default=None, metavar="all|NAME,...",
                    help="compare schemes instead (every ring layout, allgather, ulysses, hybrid): "
                         "makespan, exposed communication, bytes and memory per GPU, and what bounds each")
    cp.add_argument("--json", action="store_true", help="print one JSON object")
    cp.set_defaults(func=cmd_compare)
    from sim import plan_cli, sweep_cli

    sweep_cli.register(sub)
    plan_cli.register(sub)
    for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        try:
            register = entry.load()
        except ModuleNotFoundError as e:
            if e.name != entry.module:  # the module exists but something it imports is missing
                raise
            continue
        register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
        if not getattr(a, "func", None):
            parser.print_help()
            return 2
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
