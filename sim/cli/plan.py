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

from sim.cli.options import add_model_args, model_from_args
from sim.errors import RingsimError
from sim.hardware.pcie import P2P_MODES, SOCKET_LINKS
from sim.hardware.presets import cluster_preset
from sim.implementations import LIBRARIES as IMPL_LIBRARIES
from sim.invariants import check_rows, check_step
from sim.scenario.config import PASSES
from sim.scenario.documents import read_file_spec
from sim.units import fmt_bytes, fmt_s, parse_count, table, tokens


def register(sub) -> None:
    p = sub.add_parser("plan", help="rank every scheme, degree and layout for a model, sequence and cluster, "
                                    "with memory per GPU")
    add_model_args(p)
    w = p.add_argument_group("workload")
    w.add_argument("--seq", required=True, help="tokens per sequence: 131072, 128k, 1M (= 2^20)")
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
    o.add_argument("--top", type=int, default=5, help="candidates shown (default 5; 0: all)")
    o.add_argument("--json", action="store_true",
                   help='print {"candidates": [...]}, best first, each with its `ringsim simulate` command')
    o.add_argument("--workers", type=int, default=None,
                   help="simulate on a local Dask cluster of N workers (default: this process up to "
                        f"{AUTO_WORKERS_ABOVE} GPUs; above, one worker per core, at most {AUTO_WORKERS_MAX})")
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


def progress_line(stream):
    """On a terminal, a line that counts the candidates simulated (rewritten in place, gone
    at the end); elsewhere (a pipe, a file, CI) nothing."""
    if not stream.isatty():
        return None
    start = time.monotonic()

    def show(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        stream.write(f"\r{done} of {total} candidates simulated, {time.monotonic() - start:.0f} s" + end)
        stream.flush()
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
    if a.global_batch is not None and not a.attention_only:
        if a.docs is not None or a.window is not None:
            raise RingsimError("the whole-step plan takes one document per sequence; plan packed documents "
                               "with --attention-only")
        return _plan_steps(a)
    req = request_from_args(a)
    result = plan(req, Runner(workers=plan_workers(a.workers, req.n_gpus)), progress_line(sys.stderr))
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
    from sim.training.plan import label, plan_steps, request_hardware

    req = request_from_args(a)
    hardware, hardware_argv = request_hardware(req)
    seq = parse_count(a.seq, "seq")
    batch = parse_count(a.global_batch, "global-batch")
    result = plan_steps(req.model, seq, batch, hardware, req.n_gpus, hardware_argv=hardware_argv, fp8=a.fp8,
                        on_progress=progress_line(sys.stderr))
    top = result.candidates[: a.top or len(result.candidates)]
    for c in top:
        check_step(c, {"model": req.model.name, "seq": seq, "global_batch": batch, "split": c.get("command")})
    if a.json:
        json.dump({"gpus": result.gpus, "considered": result.considered, "refused": result.refused,
                   "skipped": result.skipped, "seconds": result.seconds, "candidates": top}, sys.stdout, indent=2)
        print()
        return 0
    fitting = sum(c["fits"] for c in result.candidates)
    print(f"{req.model.name} at {seq:,} tokens a sequence, {batch:,} tokens a step; {result.gpus:,} x "
          f"{hardware.gpu.name} ({req.nodes} node{'s' if req.nodes > 1 else ''} of {req.gpus_per_node})")
    skipped = (f", {result.skipped:,} interleaved not tried (their plain 1F1B does not fit or is not possible)"
               if result.skipped else "")
    print(f"{result.considered:,} splits considered, {result.refused:,} not possible{skipped}, "
          f"{len(result.candidates):,} timed, {fitting:,} fit in {hardware.gpu.memory_gb:g} GB; "
          f"{result.seconds:.1f} s")
    rows = [[c["rank"], label(c), fmt_s(c["step_s"]), f"{c['tokens_per_s_per_gpu']:,.0f}",
             f"{c['tflops_per_gpu']:.0f}", f"{c['mfu']:.1%}", fmt_bytes(c["memory_bytes_per_gpu"]),
             "yes" if c["fits"] else "no"] for c in top]
    print("\n" + table(["#", "split", "step", "tokens/s/GPU", "TFLOP/s", "MFU", "memory/GPU", "fits"], rows))
    print()
    for c in top:
        print(f"{c['rank']}. {label(c)}: {c['why']}")
        print(f"   {c['command']}")
    return 0
