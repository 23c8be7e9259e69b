"""The `ringsim hw` commands: `run` the real ring kernel, `bench` its building blocks.

`ringsim hw run --gpus N ...` starts N local ranks itself; `torchrun
--nproc-per-node N -m hw.main ...` takes the same options (but --gpus) for runs
torchrun places, on one node or many. Either prints the measured makespan of every
repeat with its spread and the per-rank metrics of the median repeat (`sim.trace.metrics`),
and with --trace saves one trace per repeat. `ringsim hw bench` is documented in
`hw.bench`, `ringsim hw infer` (an inference layer: prefill or decode) in hw.inference_run.
The `ringsim` CLI imports this module on every start to register its commands, so
torch (an optional dependency) and the modules that only a run needs are imported when
a command runs, not here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from hw.bench.options import add_bench_args
from hw.inference_run import add_infer_args
from hw.reporting import check_outputs, spread, trace_paths
from sim.errors import RingsimError
from sim.files import write_json
from sim.scenario.config import LAYOUTS, PASSES, Workload
from sim.scenario.documents import describe, read_file_spec
from sim.scenario.resolve import WORKLOAD_FLAGS, flags_for
from sim.trace.format import to_chrome_trace
from sim.trace.metrics import compute_metrics
from sim.units import fmt_s, table, tokens


def add_run_args(p: argparse.ArgumentParser, *, gpus: bool = True) -> None:
    """The options of a measured run, shared by `ringsim hw run` and `hw.main`."""
    g = p.add_argument_group("run")
    if gpus:
        g.add_argument("--gpus", type=int, default=2, metavar="N",
                       help="GPUs in the group, one process each; on CPU, ranks (default 2)")
    g.add_argument("--seq", type=tokens, default=4096,
                   help="tokens per sequence: a number or a size such as 4k (default 4096)")
    g.add_argument("--batch", type=int, default=1, help="sequences (default 1)")
    g.add_argument("--heads", type=int, default=8, help="query heads (default 8)")
    g.add_argument("--kv-heads", type=int, default=None,
                   help="key/value heads, fewer than --heads for GQA/MQA (default: --heads)")
    g.add_argument("--head-dim", type=int, default=64, help="(default 64)")
    g.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32", help="(default fp32)")
    g.add_argument("--layout", choices=LAYOUTS, default="zigzag",
                   help="(default zigzag; doc-contiguous and balanced are layouts of packed documents, "
                        "one document without --docs)")
    g.add_argument("--scheme", choices=["ring", "allgather", "ulysses"], default="ring",
                   help="ring, allgather (zigzag layout; packed documents: contiguous or zigzag) or ulysses "
                        "(degree dividing the heads; one document) (default ring)")
    g.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                   help="causal mask (default on)")
    g.add_argument("--docs", default=None, metavar="SPEC",
                   help="packed documents: lengths repeated to fill the sequence (256,7392,544), or drawn "
                        "with --seed from lognormal:median=4k,sigma=1.2 or file:lengths.txt (default: one)")
    g.add_argument("--window", type=tokens, default=None,
                   help="sliding-window attention: a query sees itself and window-1 keys before it")
    g.add_argument("--pass", dest="pass_", choices=PASSES, default="fwd", help="(default fwd)")
    g.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    g.add_argument("--repeats", type=int, default=3, help="measured iterations, one trace each (default 3)")
    g.add_argument("--seed", type=int, default=0,
                   help="seed of the random inputs and of drawn documents (default 0)")
    g.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="(default: cuda when available, else cpu)")
    g.add_argument("--backend", choices=["gloo", "nccl"], default=None,
                   help="(default: gloo on cpu, nccl on cuda)")
    g.add_argument("--threads", type=int, default=None,
                   help="CPU threads per rank (default: the cores shared among local ranks)")
    g.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a rank waits on a peer before giving up (default 120)")
    g.add_argument("--block-impl", choices=["auto", "fused", "matmul"], default="auto",
                   help="per-block attention: fused operator, plain matmul, or auto (default)")
    g.add_argument("--measure-rate", action="store_true",
                   help="also time the whole attention on rank 0 alone: FLOP/s for the ideal time")
    o = p.add_argument_group("output")
    o.add_argument("--trace", metavar="FILE",
                   help="save the traces: FILE for one repeat; with several, {i} in FILE is the "
                        "repeat, else -rI goes before the extension")
    o.add_argument("--chrome-trace", metavar="FILE", help="save the last repeat as a Chrome trace (Perfetto)")
    o.add_argument("--force", action="store_true", help="overwrite existing output files")
    o.add_argument("--json", action="store_true", help="print one JSON object")


def config_from_args(a: argparse.Namespace, *, n_gpus: int):
    # torch and the run's modules load when a command runs (module docstring)
    import torch

    from hw.config import RunConfig

    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RingsimError(f"--device cuda: torch {torch.__version__} sees no CUDA device")
    with flags_for(**WORKLOAD_FLAGS):
        workload = Workload(batch=a.batch, seq=a.seq, heads=a.heads,
                            kv_heads=a.kv_heads if a.kv_heads is not None else a.heads,
                            head_dim=a.head_dim, dtype=a.dtype, causal=a.causal, pass_=a.pass_,
                            docs=None if a.docs is None else read_file_spec(a.docs), seed=a.seed,
                            window=a.window)
    with flags_for(n_gpus="--gpus", timeout_s="--timeout", threads_per_rank="--threads", warmup="--warmup",
                   repeats="--repeats", seed="--seed", docs="--docs", window="--window"):
        return RunConfig(workload=workload, n_gpus=n_gpus, layout=a.layout,
                         scheme=getattr(a, "scheme", "ring"), device=device,
                         backend=a.backend, warmup=a.warmup, repeats=a.repeats, seed=a.seed,
                         timeout_s=a.timeout, threads_per_rank=a.threads, block_impl=a.block_impl,
                         measure_rate=a.measure_rate)


def report(a: argparse.Namespace, cfg, traces: list) -> int:
    """Save what was asked for and print the summary of a measured run."""
    paths = trace_paths(a.trace, len(traces)) if a.trace else []
    for t, path in zip(traces, paths):
        t.save(path, overwrite=a.force)
    if a.chrome_trace:
        write_json(a.chrome_trace, to_chrome_trace(traces[-1]), overwrite=a.force)
    metrics = [compute_metrics(t) for t in traces]
    makespans = [m.makespan_s for m in metrics]
    mid = sorted(range(len(traces)), key=lambda i: makespans[i])[len(traces) // 2]
    hw = traces[0].hardware
    if a.json:
        print(json.dumps({"config": traces[0].config, "hardware": hw,
                          "makespan_s": spread(makespans), "median_repeat": mid,
                          "repeats": [m.to_dict() for m in metrics], "trace_files": paths},
                         indent=2))
        return 0
    w = cfg.workload
    print(f"{cfg.n_gpus} ranks ({cfg.resolved_backend}, {hw['device']}, "
          f"{hw['threads_per_rank'] or '-'} threads/rank, {hw['block_impl']}), {cfg.scheme}, {cfg.layout} layout, "
          f"{w.seq} tokens ({cfg.tokens_per_rank} per rank), {w.heads}/{w.kv_heads} heads x "
          f"{w.head_dim}, {w.dtype}, {'causal' if w.causal else 'full'}, {w.pass_}")
    if cfg.packed is not None:
        print(f"packed: {describe(w.docs, w.seq, w.seed)}" + (f", window {w.window:,} tokens" if w.window else ""))
    s = spread(makespans)
    print(f"makespan over {s['n']} repeats: median {fmt_s(s['median'])}, min {fmt_s(s['min'])}, "
          f"max {fmt_s(s['max'])}, cv {s['cv']:.1%}")
    m = metrics[mid]
    if m.ideal_s is not None:
        print(f"ideal (one rank's time / {cfg.n_gpus}) {fmt_s(m.ideal_s)}, "
              f"efficiency {m.efficiency:.1%}")
    print(f"median repeat {mid}: load imbalance {m.load_imbalance:.3f}, overlap efficiency "
          f"{m.overlap_efficiency:.1%}\n")
    rows = [[r.rank, fmt_s(r.compute_s), fmt_s(r.comm_s), fmt_s(r.exposed_comm_s),
             fmt_s(r.idle_s), f"{r.flops / 1e9:.2f}",
             f"{r.flops / r.compute_s / 1e9:.1f}" if r.compute_s > 0 else "-"] for r in m.ranks]
    print(table(["rank", "compute", "comm", "exposed comm", "idle", "GFLOP", "GFLOP/s"], rows))
    for path in paths:
        print(f"trace: {path}")
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    import torch

    from hw.launch import run_config

    check_outputs(a, a.repeats)
    cfg = config_from_args(a, n_gpus=a.gpus)
    if cfg.device == "cuda" and cfg.n_gpus > torch.cuda.device_count():
        raise RingsimError(f"--gpus {cfg.n_gpus} needs as many GPUs; this host has "
                           f"{torch.cuda.device_count()} (use torchrun across nodes)")
    if a.profile_dir:
        from hw.profiled import record_ring

        traces = record_ring(cfg, a.profile_dir, overwrite=a.force)
        code = report(a, cfg, traces)
        if not a.json:
            print(f"profiler traces: {a.profile_dir} (one per rank; `ringsim validate --trace {a.profile_dir}`)")
        return code
    _results, traces = run_config(cfg)
    return report(a, cfg, traces)


def cmd_torch_cp(a: argparse.Namespace) -> int:
    """Record torch's own context_parallel attention under torch.profiler (hw.profiled)."""
    import statistics as st

    from hw.profiled import TorchCP, record_torch_cp

    run = TorchCP(n_gpus=a.gpus, seq=a.seq, batch=a.batch, heads=a.heads, head_dim=a.head_dim, causal=a.causal,
                  rotation=a.rotation, warmup=a.warmup, iterations=a.repeats, threads_per_rank=a.threads,
                  seed=a.seed, timeout_s=a.timeout)
    ranks = record_torch_cp(run, a.profile_dir, overwrite=a.force)
    slowest = [max(r["times_s"][i] for r in ranks) for i in range(run.iterations)]
    if a.json:
        print(json.dumps({"run": dataclasses.asdict(run), "slowest_rank_s": slowest, "ranks": ranks,
                          "profile_dir": a.profile_dir}, indent=2))
        return 0
    print(f"torch context_parallel, {run.n_gpus} ranks (gloo), {run.rotation} rotation, {run.seq} tokens, "
          f"{run.heads} heads x {run.head_dim}, {'causal' if run.causal else 'full'}: slowest rank median "
          f"{fmt_s(st.median(slowest))} over {run.iterations} iterations (min {fmt_s(min(slowest))}, "
          f"max {fmt_s(max(slowest))})")
    print(f"profiler traces: {a.profile_dir} (one per rank; `ringsim validate --trace {a.profile_dir}`)")
    return 0


def cmd_infer(a: argparse.Namespace) -> int:
    from hw.inference_run import cmd_infer as run_infer

    return run_infer(a)


def cmd_bench(a: argparse.Namespace) -> int:
    from hw.bench.command import run_bench

    return run_bench(a)


def _help(parser: argparse.ArgumentParser):
    def show(_a: argparse.Namespace) -> int:
        parser.print_help()
        return 2
    return show


def register(subparsers: Any) -> None:
    """Add `hw run` and `hw bench` to the `ringsim` command line."""
    hp = subparsers.add_parser("hw", help="the real ring kernel: run it or benchmark its parts")
    hp.set_defaults(func=_help(hp))
    sub = hp.add_subparsers(dest="hw_command", metavar="HW_COMMAND", parser_class=type(hp))
    rp = sub.add_parser("run", help="run the ring on local processes and report measured timings")
    add_run_args(rp)
    rp.add_argument("--profile-dir", metavar="DIR", default=None,
                    help="also record the run under torch.profiler (CPU ops with shapes, one ProfilerStep per "
                         "iteration after the warm-up): one trace per rank, DIR/rank{r}.json.gz (hw.profiled)")
    rp.set_defaults(func=cmd_run)
    cp = sub.add_parser("torch-cp", help="record torch's own context_parallel attention under torch.profiler (gloo)")
    cp.add_argument("--profile-dir", metavar="DIR", required=True, help="where each rank writes rank{r}.json.gz")
    cp.add_argument("--gpus", type=int, default=2, metavar="N", help="ranks (default 2)")
    cp.add_argument("--seq", type=tokens, default=2048, help="tokens of the sequence (default 2048)")
    cp.add_argument("--batch", type=int, default=1)
    cp.add_argument("--heads", type=int, default=8)
    cp.add_argument("--head-dim", type=int, default=64)
    cp.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                    help="causal mask, with torch's head-tail balancing (default on)")
    cp.add_argument("--rotation", choices=["alltoall", "allgather"], default="alltoall",
                    help="how torch moves K/V (set_rotate_method; default alltoall)")
    cp.add_argument("--warmup", type=int, default=1, help="iterations before the recorded ones (default 1)")
    cp.add_argument("--repeats", type=int, default=3, help="recorded iterations (default 3)")
    cp.add_argument("--threads", type=int, default=1, help="CPU threads per rank (default 1)")
    cp.add_argument("--seed", type=int, default=0)
    cp.add_argument("--timeout", type=float, default=120.0)
    cp.add_argument("--force", action="store_true", help="overwrite existing traces")
    cp.add_argument("--json", action="store_true")
    cp.set_defaults(func=cmd_torch_cp)
    ip = sub.add_parser("infer", help="run one attention layer of context-parallel inference (prefill over a cached "
                                      "prefix, or a decode step) on local processes and report measured timings")
    add_infer_args(ip)
    ip.set_defaults(func=cmd_infer)
    bp = sub.add_parser("bench", help="microbenchmarks for calibration: block compute, transfers, interference")
    add_bench_args(bp)
    bp.set_defaults(func=cmd_bench)
