"""`ringsim step`: one training step over tensor, context, pipeline and data parallelism
(sim.training.step); `ringsim gemm`: the GEMM model's time of one matrix product (sim.hardware.gemm)."""

from __future__ import annotations

import argparse
import json

from sim.cli.frameworks import add_framework_args, check_framework_args, export_step, hardware_argv, step_from
from sim.cli.options import add_hardware_args, add_model_args, hardware_from_args, model_from_args, save_traces
from sim.errors import RingsimError
from sim.files import check_output
from sim.hardware.gemm import gemm_time
from sim.hardware.presets import GPU_PRESETS, gpu_preset
from sim.implementations import LIBRARIES as IMPL_LIBRARIES
from sim.invariants import check_step
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import names as scheme_names
from sim.trace.format import Trace
from sim.training.step import GRAD_BYTES, RECOMPUTE, ZERO_STAGES, Parallel, StepRequest, check_gpus, simulate_step
from sim.units import fmt_bytes, fmt_s, table, tokens


def register(sub) -> None:
    s = sub.add_parser("step", help="one training step: time, tokens/s and TFLOP/s per GPU, MFU, memory per GPU "
                                    "and what the step is made of, for TP x CP x PP x DP GPUs",
                       description="One training step of a decoder-only transformer on TP x CP x PP x DP GPUs "
                                   "(docs/step.md). Model FLOPs, for TFLOP/s and MFU: 6 x parameters x tokens, plus "
                                   "attention at 3 x 4 x seq x heads x head_dim per token and layer with the causal "
                                   "mask counted as half; recomputation not counted; MFU against the datasheet peak. "
                                   "Also given by PaLM's count (6N + 12LHQT: attention with no mask), which the "
                                   "Llama 3 paper and torchtitan report.")
    add_model_args(s)
    w = s.add_argument_group("batch")
    w.add_argument("--seq", type=tokens, default=None, help="tokens per sequence: 8192, 128k, 1M (= 2^20) (required "
                                                             "unless --from)")
    w.add_argument("--global-batch", type=tokens, default=None,
                   help="tokens per step over all replicas: 16M (= 16 x 2^20), 4M, ... (required unless --from)")
    w.add_argument("--microbatches", type=int, default=None,
                   help="micro-batches per step per replica (default: one sequence each)")
    par = s.add_argument_group("parallelism (the GPUs are TP x CP x PP x DP; the nodes follow from the GPUs per node)")
    par.add_argument("--gpus", type=int, default=None,
                     help="the GPUs, checked against TP x CP x PP x DP (default: their product)")
    for flag, what in (("--tp", "tensor"), ("--cp", "context"), ("--pp", "pipeline"), ("--dp", "data")):
        par.add_argument(flag, type=int, default=1, help=f"{what}-parallel degree (default 1)")
    par.add_argument("--zero", type=int, choices=ZERO_STAGES, default=1,
                     help="0: DDP, 1: ZeRO-1 (default), 3: FSDP (weights, gradients and optimizer state sharded)")
    par.add_argument("--recompute", choices=RECOMPUTE, default="none",
                     help="none (default), selective (attention recomputed) or full (each layer's forward)")
    par.add_argument("--fp8", action="store_true", help="GEMMs in FP8 at the GPU's FP8 rate")
    par.add_argument("--interleave", type=int, default=1, help="virtual pipeline stages per GPU (default 1)")
    par.add_argument("--tp-overlap", action="store_true",
                     help="TP collectives overlapped with the GEMMs (Megatron's --tp-comm-overlap; default exposed)")
    par.add_argument("--grad-reduce", choices=tuple(GRAD_BYTES), default="fp32",
                     help="the dtype gradients are reduced and kept in: fp32 (default: Megatron-LM's and "
                          "torchtitan's for bf16 training) or bf16")
    par.add_argument("--scheme", choices=scheme_names(), default=DEFAULT_SCHEME,
                     help=f"the CP scheme (default {DEFAULT_SCHEME})")
    par.add_argument("--layout", default="zigzag", help="the CP ring's layout (default zigzag)")
    par.add_argument("--ulysses-degree", type=int, default=None,
                     help="ulysses, hybrid: GPUs per all-to-all group (Megatron's first hierarchical CP size; default: "
                          "the scheme's choice)")
    par.add_argument("--impl", choices=tuple(IMPL_LIBRARIES), default="ideal",
                     help="whose implementation of the CP scheme runs: ideal (default), te, rfa, torch, usp")
    add_hardware_args(s)
    s.add_argument("--json", action="store_true",
                   help="one JSON object: step_s, tokens_per_s_per_gpu, tflops_per_gpu, mfu, palm_tflops_per_gpu, "
                        "palm_mfu, memory_bytes_per_gpu, fits, breakdown, memory, ...")
    s.add_argument("--trace", metavar="FILE",
                   help="save the pipeline as the engine played it (one GPU per stage: its forwards, backwards "
                        "and sends) as a trace")
    s.add_argument("--chrome-trace", metavar="FILE", help="the same as a Chrome trace (Perfetto)")
    s.add_argument("--force", action="store_true", help="overwrite existing output files")
    add_framework_args(s)
    s.set_defaults(func=cmd_step)
    g = sub.add_parser("gemm", help="the GEMM model's time of one product C (M x N) = A (M x K) B (K x N), "
                                    "called alone")
    g.add_argument("--m", type=int, required=True, help="rows of A and C (tokens, for a linear layer's forward)")
    g.add_argument("--n", type=int, required=True, help="columns of B and C")
    g.add_argument("--k", type=int, required=True, help="the reduced dimension")
    g.add_argument("--gpu", default="H100-SXM", help=f"GPU preset: {', '.join(GPU_PRESETS)} (default H100-SXM)")
    g.add_argument("--fp8", action="store_true", help="FP8 (e4m3) inputs, bf16 output (default bf16)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(func=cmd_gemm)


def cmd_gemm(a: argparse.Namespace) -> int:
    t = gemm_time(a.m, a.n, a.k, a.gpu, fp8=a.fp8)
    flops = 2.0 * a.m * a.n * a.k
    out = {"gpu": gpu_preset(a.gpu).name, "m": a.m, "n": a.n, "k": a.k, "dtype": "fp8" if a.fp8 else "bf16",
           "time_s": t.time_s, "tflops": flops / t.time_s / 1e12, "math_s": t.math_s, "memory_s": t.memory_s,
           "floor_s": t.floor_s, "bound": t.bound, "tiles": t.tiles, "waves": t.waves, "split_k": t.split_k,
           "rate_tflops": t.rate_tflops, "rate_source": t.rate_source}
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{out['gpu']}, {out['dtype']}: {a.m} x {a.n} over {a.k}: {fmt_s(t.time_s)} "
          f"({out['tflops']:.1f} TFLOP/s, {t.bound}-bound)")
    print(f"{t.tiles} tiles in {t.waves} wave{'s' if t.waves > 1 else ''}"
          + (f", K split {t.split_k} ways" if t.split_k > 1 else "")
          + f"; math {fmt_s(t.math_s)}, memory {fmt_s(t.memory_s)}, floor {fmt_s(t.floor_s)}")
    print(f"rate: {t.rate_tflops:g} TFLOP/s, {t.rate_source}")
    return 0


def cmd_step(a: argparse.Namespace) -> int:
    for path in (a.trace, a.chrome_trace):
        check_output(path, a.force)
    check_framework_args(a)
    if a.from_file is not None:
        return step_from(a, simulate_step, lambda step: print_step(a, step))
    if a.seq is None or a.global_batch is None:
        raise RingsimError("the following arguments are required: --seq, --global-batch (or --from FILE)")
    hw = hardware_from_args(a)
    par = Parallel(tp=a.tp, cp=a.cp, pp=a.pp, dp=a.dp, zero=a.zero, recompute=a.recompute, fp8=a.fp8,
                   microbatches=a.microbatches, interleave=a.interleave, scheme=a.scheme, layout=a.layout,
                   ulysses_degree=a.ulysses_degree, impl=a.impl, tp_overlap=a.tp_overlap, grad_reduce=a.grad_reduce)
    check_gpus(par, a.gpus)
    req = StepRequest(model=model_from_args(a), seq=a.seq, global_batch=a.global_batch, parallel=par, hardware=hw)
    step = simulate_step(req)
    if a.export:
        # the whole-step planner loads when a step is exported, not on every start
        from sim.training.plan import step_command

        return export_step(a, step, step_command(req.model, req.seq, req.global_batch, par, hardware_argv(a)),
                           show=lambda: print_step(a, step))
    return print_step(a, step)


def print_step(a: argparse.Namespace, step) -> int:
    """The step as a table (or JSON), its traces written where asked."""
    req = step.request
    par, hw = req.parallel, req.hardware
    result = step.to_dict()
    check_step(result, {"model": req.model.name, "seq": req.seq, "global_batch": req.global_batch,
                        **result["parallel"], "gpu": hw.gpu.name})
    if a.trace or a.chrome_trace:
        t = step.pipeline
        trace = Trace(t.source, t.n_gpus, t.columns, {"step": result["parallel"], "model": req.model.name,
                                                        "seq": req.seq, "global_batch": req.global_batch},
                      hw.describe(), t.meta)
        save_traces(a, trace)
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    nodes = -(-par.gpus // hw.gpus_per_node)
    print(f"{req.model.name}, {req.seq:,}-token sequences, {req.global_batch:,} tokens a step; {par.gpus:,} x "
          f"{hw.gpu.name} ({nodes:,} node{'s' if nodes > 1 else ''} of {hw.gpus_per_node}) as TP {par.tp} x CP "
          f"{par.cp} x PP {par.pp} x DP {par.dp}, ZeRO-{par.zero}, recompute {par.recompute}"
          + (", FP8" if par.fp8 else ""))
    print(f"step {fmt_s(step.step_s)}   {step.tokens_per_s_per_gpu:,.0f} tokens/s per GPU   "
          f"{step.tflops_per_gpu:.0f} TFLOP/s per GPU   MFU {step.mfu:.1%}")
    print(f"by PaLM's count (6N + 12LHQT, attention unmasked; Llama 3's and torchtitan's MFU): "
          f"{step.palm_tflops_per_gpu:.0f} TFLOP/s per GPU, MFU {step.palm_mfu:.1%}")
    print(f"micro-batches {req.microbatches} of {req.micro_batch} sequence{'s' if req.micro_batch > 1 else ''}; "
          f"stages of {', '.join(map(str, sorted(set(step.stage_layers))))} layers")
    rows = [[k.removesuffix("_s").replace("_", " "), fmt_s(v), f"{v / step.step_s:.1%}"]
            for k, v in step.breakdown.items() if v > 0]
    print("\n" + table(["part of the step (slowest stage)", "time", "share"], rows))
    mem = step.memory
    fits = "fits" if step.fits else "does NOT fit"
    print(f"\nmemory per GPU {fmt_bytes(mem['total'])} of {hw.gpu.memory_gb:g} GB: {fits}  ("
          + ", ".join(f"{k.replace('_', ' ')} {fmt_bytes(v)}" for k, v in mem.items() if k != "total" and v > 0)
          + ")")
    for note in step.notes:
        print(note)
    return 0


def print_step_replay(run, iteration: int | None, as_json: bool) -> int:
    """`ringsim validate --trace PATH` on a profiled tensor-parallel iteration (no ring in
    it): the iteration measured against the step model's play of it
    (sim.profiler.step_replay), as a table or one JSON object."""
    from sim.profiler.step_replay import replay

    r = replay(run, iteration)
    if as_json:
        print(json.dumps(r.to_dict(), indent=2, default=float))
        return 0
    sh, g, ar = r.shapes, r.gemm, r.all_reduce
    step = run.iterations[r.ranks[0]][-1][0] if iteration is None else iteration
    print(f"profiled run: {len(r.ranks)} ranks on {r.gpu}, ProfilerStep#{step}, "
          + ("forward only (no backward kernels)" if sh.forward_only else "forward and backward"))
    print(f"shapes read from the GEMM dims: {sh.layers} layers, hidden {sh.hidden:,}, {sh.heads} heads x "
          f"{sh.head_dim} ({sh.kv_heads} K/V heads), FFN {sh.ffn:,} ({sh.mlp}), vocabulary "
          f"{sh.vocab if sh.vocab is None else f'{sh.vocab:,}'}; TP {sh.tp}; {sh.microbatches} micro-batch"
          f"{'es' if sh.microbatches > 1 else ''} of {sh.micro_batch} x {sh.seq:,} tokens; attention {sh.attention}")
    for note in sh.unread:
        print(f"  not read: {note}")
    print(f"\nGEMM rate fitted: {g.rate_tflops:.1f} TFLOP/s (median over {g.kernels:,} math-bound GEMM kernels of "
          f"the rate giving each its time; the preset's MAMF is {g.mamf_tflops:g})")
    rows = [[x["op"], f"{x['batch']} x " * (x["batch"] > 1) + f"{x['m']} x {x['n']} over {x['k']}", x["count"],
             fmt_s(x["measured_s"]), f"{x['measured_tflops']:.0f}", fmt_s(x["modelled_s"]), f"{x['error']:+.1%}"]
            for x in g.by_shape]
    print(table(["op", "product", "kernels", "measured", "TFLOP/s", "modelled", "error"], rows))
    print(f"\nall-reduce fitted: alpha {ar.alpha_s * 1e6:.1f} us + bytes / {ar.beta_gbps:.1f} GB/s (bus bandwidth "
          f"{ar.bus_gbps:.1f} GB/s over {ar.group} GPUs), least squares over {ar.calls} calls, each timed by its "
          f"shortest kernel over the ranks (the last rank to arrive waits for none)")
    rows = [[fmt_bytes(x["bytes"]), x["calls"], fmt_s(x["measured_s"]), fmt_s(x["modelled_s"]), f"{x['error']:+.1%}"]
            for x in ar.sizes]
    print(table(["message", "calls", "measured", "modelled", "error"], rows))
    sm = r.step_model
    print(f"\nstep model, one layer's forward (sim.training.step with the fitted rate and link): GEMMs "
          f"{fmt_s(sm['layer_gemm_fwd_s'])}, TP all-reduces {fmt_s(sm['layer_tp_fwd_s'])}")
    print("taken as measured (not modelled):")
    for t in r.taken_as_measured:
        print(f"  {t}")
    rows = []
    for rank, m, s_, p in zip(r.ranks, r.measured_s, r.simulated_s, r.parts):
        rows.append([rank, fmt_s(m), fmt_s(s_), f"{s_ / m - 1:+.1%}", fmt_s(p["gemm_measured_s"]),
                     fmt_s(p["gemm_modelled_s"]), fmt_s(p["all_reduce_kernels_s"]), fmt_s(p["all_reduce_modelled_s"]),
                     fmt_s(p["other_kernels_s"]), fmt_s(p["idle_s"])])
    rows.append(["all", fmt_s(r.measured_overall_s), fmt_s(r.simulated_overall_s), f"{r.overall_error:+.1%}",
                 "", "", "", "", "", ""])
    print("\n" + table(["rank", "measured", "simulated", "error", "GEMMs meas.", "GEMMs model", "all-reduce kernels",
                        "all-reduces model", "other (meas.)", "GPU idle (meas.)"], rows))
    print("all-reduce kernels: as recorded, with each rank's wait for the last to arrive; the model times the "
          "collective alone and the play adds the wait")
    print(f"the play with every kernel at its measured time: {fmt_s(max(r.identity_s))} "
          f"({max(r.identity_s) / r.measured_overall_s - 1:+.2%}: the play's own error)")
    print(f"the GPUs alone (no host idle): measured kernels {fmt_s(r.device_measured_s)}, modelled "
          f"{fmt_s(r.device_simulated_s)} ({r.device_simulated_s / r.device_measured_s - 1:+.1%})")
    print(f"the step model on its own (its fused attention and elementwise terms in place of the run's measured "
          f"kernels, no host): forward {fmt_s(sm['forward_s'])}, against the GPUs alone measured "
          f"{fmt_s(r.device_measured_s)} ({sm['forward_s'] / r.device_measured_s - 1:+.1%})")
    print(f"with the presets' constants in place of the fits (the MAMF, {r.unfitted_link}): "
          f"{fmt_s(max(r.unfitted_s))} ({max(r.unfitted_s) / r.measured_overall_s - 1:+.1%}); the GPUs alone "
          f"{fmt_s(r.unfitted_device_s)} ({r.unfitted_device_s / r.device_measured_s - 1:+.1%})")
    return 0
