"""`ringsim plan`: the best sequence-parallel schemes, degrees and layouts for a model, a
sequence length and a cluster, with what each needs in memory (sim.planning.plan).

    ringsim plan --model llama3-70b --seq 1M --nodes 8 --gpus-per-node 8 --gpu H100-SXM \\
        --link nvlink4 --inter-link ib-ndr [--top K] [--json]

`--seq` takes sizes: 128k = 131072, 1M = 2^20 = 1048576 tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from sim.cli.frameworks import add_framework_args, check_framework_args, export_plan, write_export
from sim.cli.options import add_model_args, model_from_args
from sim.errors import RingsimError
from sim.hardware.pcie import P2P_MODES, SOCKET_LINKS
from sim.hardware.presets import cluster_preset
from sim.implementations import LIBRARIES as IMPL_LIBRARIES
from sim.inference.plan import add_plan_arguments, cmd_plan_inference
from sim.invariants import check_rows, check_step
from sim.scenario.config import PASSES
from sim.scenario.documents import read_file_spec
from sim.units import fmt_bytes, fmt_s, parse_count, table, tokens


def register(sub) -> None:
    p = sub.add_parser("plan", help="rank every scheme, degree and layout for a model, sequence and cluster, "
                                    "with memory per GPU")
    add_model_args(p)
    w = p.add_argument_group("workload")
    w.add_argument("--seq", default=None, help="tokens per sequence: 131072, 128k, 1M (= 2^20)")
    w.add_argument("--global-batch", default=None,
                   help="tokens a step over all replicas (16M, 4M): plan the whole training step over TP x CP x "
                        "PP x DP (ringsim step); without it, attention alone")
    w.add_argument("--attention-only", action="store_true",
                   help="with --global-batch: still plan attention alone (schemes, layouts, degrees)")
    w.add_argument("--fp8", action="store_true", help="whole-step plan: GEMMs in FP8")
    w.add_argument("--batch", type=int, default=1, help="sequences (default 1)")
    w.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    w.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True, help="(default on)")
    w.add_argument("--pass", dest="pass_", choices=PASSES, default="fwdbwd",
                   help="fwd, bwd or fwdbwd (default fwdbwd: a training step)")
    w.add_argument("--docs", default=None, metavar="SPEC",
                   help="attention plan on packed documents: lengths repeated to fill the sequence, or drawn "
                        "with --seed from lognormal:median=4k,sigma=1.2 or file:lengths.txt (docs/packed.md)")
    w.add_argument("--seed", type=int, default=0, help="seed of drawn documents (default 0)")
    w.add_argument("--window", type=tokens, default=None, help="sliding-window attention, in tokens")
    h = p.add_argument_group("cluster")
    h.add_argument("--nodes", type=int, default=1, help="(default 1)")
    h.add_argument("--gpus-per-node", type=int, default=None, help="(default: the cluster's, else 8)")
    h.add_argument("--cluster", default=None, help="cluster preset (dgx-h100, ...): defaults of the next flags")
    h.add_argument("--gpu", default=None, help="GPU preset (default: the cluster's, else H100-SXM)")
    h.add_argument("--link", default=None, help="link inside a node (default: the cluster's, else nvlink4)")
    h.add_argument("--inter-link", default=None, help="link of a NIC, between nodes")
    h.add_argument("--nics-per-node", type=int, default=None, help="(default one per GPU)")
    h.add_argument("--pcie-gen", type=int, default=None, help="PCIe node: generation, 3, 4 or 5 (see simulate)")
    h.add_argument("--gpus-per-switch", type=int, default=None, help="PCIe node: GPUs under each switch")
    h.add_argument("--gpus-per-socket", type=int, default=None, help="PCIe node: GPUs on each CPU socket")
    h.add_argument("--p2p", choices=P2P_MODES, default=None,
                   help="PCIe node: pairs that go peer to peer: on, socket, switch or off (see simulate)")
    h.add_argument("--socket-link", choices=list(SOCKET_LINKS), default=None,
                   help="PCIe node: the link between sockets")
    h.add_argument("--staged-gbps", type=float, default=None,
                   help="PCIe node: GB/s of one copy staged through host memory (see simulate)")
    h.add_argument("--kernel", default="default", help="fa2, fa3, cudnn or flat (default: the preset's first)")
    h.add_argument("--merge", choices=["fused", "unfused"], default="fused",
                   help="merge of each block's partial result: one fused kernel (default) or ring-flash-attention's "
                        "chain of elementwise kernels")
    h.add_argument("--impl", choices=tuple(IMPL_LIBRARIES), default="ideal",
                   help="whose implementation of each scheme runs: ideal (default), te, rfa, torch, usp; a scheme or "
                        "layout the library lacks is not possible (docs/implementations.md)")
    h.add_argument("--profile", default=None,
                   help="calibrated profile from `ringsim calibrate` (a GPU profile keeps the link flags)")
    r = p.add_argument_group("memory")
    r.add_argument("--headroom", default=None, help="memory to keep free per GPU: 10%% or 8GB (default none)")
    r.add_argument("--memory-gb", type=float, default=None,
                   help="the GPU's memory, GB (default: the preset's; needed with --profile)")
    r.add_argument("--param-shards", type=int, default=None,
                   help="count parameters and optimizer state, sharded over this many GPUs "
                        "(default: not counted)")
    o = p.add_argument_group("output")
    o.add_argument("--top", type=int, default=5,
                   help="candidates shown (default 5; 0: all). With --global-batch only the first K are sure to be "
                        "timed: a split whose lower bound is above the K-th's step is not (0 times every split)")
    o.add_argument("--progress", action="store_true",
                   help="a progress line with the time left on stderr even where it is not a terminal")
    o.add_argument("--json", action="store_true",
                   help='print {"candidates": [...]}, best first, each with its `ringsim simulate` command')
    add_framework_args(p, plan=True)
    o.add_argument("--workers", type=int, default=None,
                   help="simulate on a local Dask cluster of N workers (default: this process up to "
                        f"{AUTO_WORKERS_ABOVE} GPUs; above, one worker per core, at most {AUTO_WORKERS_MAX})")
    add_plan_arguments(p)
    p.set_defaults(func=cmd_plan)


def request_from_args(a: argparse.Namespace):
    # the planner and the engine's player load when `plan` runs, not on every start
    from sim.planning.plan import request_from

    gpn = a.gpus_per_node
    if gpn is None:
        gpn = cluster_preset(a.cluster).gpus_per_node if a.cluster else 8
    return request_from(model_from_args(a), seq=a.seq, batch=a.batch, nodes=a.nodes, gpus_per_node=gpn,
                        gpu=a.gpu, link=a.link, inter_link=a.inter_link, cluster=a.cluster,
                        nics_per_node=a.nics_per_node, kernel=a.kernel, merge=a.merge, impl=a.impl, profile=a.profile,
                        dtype=a.dtype,
                        causal=a.causal, pass_=a.pass_, headroom=a.headroom, memory_gb=a.memory_gb,
                        param_shards=a.param_shards,
                        docs=None if a.docs is None else read_file_spec(a.docs), seed=a.seed, window=a.window,
                        pcie={k: v for k, v in (("pcie-gen", a.pcie_gen), ("gpus-per-switch", a.gpus_per_switch),
                                                ("gpus-per-socket", a.gpus_per_socket), ("p2p", a.p2p),
                                                ("socket-link", a.socket_link), ("staged-gbps", a.staged_gbps))
                              if v is not None})


PROGRESS_AFTER_S = 1.0
"""A plan shows its progress once it has run this long (a quicker one shows nothing)."""
PROGRESS_EVERY_S = 0.25
"""The progress line is rewritten at most this often."""


def progress_line(stream, always: bool = False):
    """On a terminal (or `always`), a line that counts the candidates settled and the time
    left at the rate so far, rewritten in place at most every PROGRESS_EVERY_S once the
    plan has run PROGRESS_AFTER_S, and gone at the end; elsewhere (a pipe, a file, CI)
    nothing."""
    if not (always or stream.isatty()):
        return None
    start = time.monotonic()
    shown = {"at": 0.0, "width": 0}

    def show(done: int, total: int) -> None:
        now = time.monotonic() - start
        if done >= total:
            if shown["width"]:
                stream.write("\r" + " " * shown["width"] + "\r")
                stream.flush()
            return
        if now < PROGRESS_AFTER_S or now - shown["at"] < PROGRESS_EVERY_S:
            return
        left = now / done * (total - done) if done else float("nan")
        line = f"{done:,} of {total:,} candidates, {now:.0f} s, about {left:.0f} s left"
        stream.write("\r" + line.ljust(shown["width"]))
        stream.flush()
        shown["at"], shown["width"] = now, max(shown["width"], len(line))
    return show


AUTO_WORKERS_ABOVE = 64
"""Plans of more GPUs than this run on every core by default: their largest candidates
take seconds each (a 1,024-GPU plan: 68 s in one process, 43 s on two workers of a
2-core machine), where a smaller plan's candidates take less than a cluster's start."""
AUTO_WORKERS_MAX = 8


def plan_workers(workers: int | None, gpus: int) -> int:
    """--workers, or by default: 1 up to AUTO_WORKERS_ABOVE GPUs, else one per core (at
    most AUTO_WORKERS_MAX) where Dask is installed."""
    if workers is not None:
        return workers
    # the sweep runner and the engine's player load when `plan` runs, not on every start
    from sim.planning.sweep import dask_available

    if gpus <= AUTO_WORKERS_ABOVE or not dask_available():
        return 1
    return max(1, min(AUTO_WORKERS_MAX, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1))


def cmd_plan(a: argparse.Namespace) -> int:
    # the planner and the engine's player load when `plan` runs, not on every start
    from sim.planning.plan import format_plan, plan
    from sim.planning.sweep import Runner

    if a.top < 0:
        raise RingsimError(f"--top must be 0 (all) or more, got {a.top}")
    if a.phase is not None:      # inference (sim.inference.plan)
        return cmd_plan_inference(a)
    if a.seq is None:
        raise RingsimError("the following arguments are required: --seq")
    check_framework_args(a)
    if a.export is not None and (a.global_batch is None or a.attention_only):
        raise RingsimError("--export takes the whole-step plan's split: give --global-batch (without --attention-only)")
    if a.global_batch is not None and not a.attention_only:
        if a.docs is not None or a.window is not None:
            raise RingsimError("the whole-step plan takes one document per sequence; plan packed documents "
                               "with --attention-only")
        return _plan_steps(a)
    req = request_from_args(a)
    result = plan(req, Runner(workers=plan_workers(a.workers, req.n_gpus)), progress_line(sys.stderr, a.progress))
    out = result.to_dict(a.top or None)
    check_rows(out["candidates"], {"model": req.model.name, "seq": a.seq, "gpus": req.n_gpus})
    if a.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(format_plan(result, a.top or len(result.candidates)))
    return 0


def _plan_steps(a: argparse.Namespace) -> int:
    """The whole-step plan (sim.training.plan)."""
    # the step planner and the engine's player load when `plan` runs, not on every start
    from sim.training.plan import label, not_ranked_line, plan_steps, request_hardware

    req = request_from_args(a)
    hardware, hardware_argv = request_hardware(req)
    seq = parse_count(a.seq, "seq")
    batch = parse_count(a.global_batch, "global-batch")
    # the first K are timed (--top; an export's --rank K beyond it widens them to K)
    first = None if not a.top else max(a.top, a.rank or 0) if a.export is not None else a.top
    result = plan_steps(req.model, seq, batch, hardware, req.n_gpus, hardware_argv=hardware_argv, fp8=a.fp8,
                        on_progress=progress_line(sys.stderr, a.progress), top=first)
    top = result.candidates[: a.top or len(result.candidates)]
    for c in top:
        check_step(c, {"model": req.model.name, "seq": seq, "global_batch": batch, "split": c.get("command")})
    exported = None
    if a.export is not None:
        exported = export_plan(a, result.candidates, req.model, seq, batch, hardware)
        if a.out is None:            # the job alone on stdout; which split it is on stderr
            write_export(a, exported[0])
            print(f"exported {exported[1]}", file=sys.stderr)
            return 0
        write_export(a, exported[0])
    if a.json:
        json.dump({"gpus": result.gpus, "considered": result.considered, "refused": result.refused,
                   "skipped": result.skipped, "timed": result.timed, "fit": result.fitting, "seconds": result.seconds,
                   "candidates": top, "not_ranked": result.not_ranked, "bar_s": result.bar_s}, sys.stdout, indent=2)
        print()
        return 0
    fitting = result.fitting
    print(f"{req.model.name} at {seq:,} tokens a sequence, {batch:,} tokens a step; {result.gpus:,} x "
          f"{hardware.gpu.name} ({req.nodes} node{'s' if req.nodes > 1 else ''} of {req.gpus_per_node})")
    skipped = (f", {result.skipped:,} interleaved not tried (their plain 1F1B does not fit or is not possible)"
               if result.skipped else "")
    print(f"{result.considered:,} splits considered, {result.refused:,} not possible{skipped}, "
          f"{result.timed:,} timed, {fitting:,} fit in {hardware.gpu.memory_gb:g} GB; "
          f"{result.seconds:.1f} s")
    if result.not_ranked:
        print(not_ranked_line(result, a.top))
    rows = [[c["rank"], label(c), fmt_s(c["step_s"]), f"{c['tokens_per_s_per_gpu']:,.0f}",
             f"{c['tflops_per_gpu']:.0f}", f"{c['mfu']:.1%}", fmt_bytes(c["memory_bytes_per_gpu"]),
             "yes" if c["fits"] else "no"] for c in top]
    print("\n" + table(["#", "split", "step", "tokens/s/GPU", "TFLOP/s", "MFU", "memory/GPU", "fits"], rows))
    print()
    for c in top:
        print(f"{c['rank']}. {label(c)}: {c['why']}")
        print(f"   {c['command']}")
    if exported is not None:
        print(f"\nwrote {a.out}: {exported[1]}")
    return 0
