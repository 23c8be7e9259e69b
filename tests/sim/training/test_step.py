"""The training step (sim.training.step) against closed forms worked out here: a layer's FLOPs, the
pipeline bubble, a TP collective, FSDP's gathers behind compute, activation memory with
and without recomputation, and configurations refused in one line."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.scenario.models import model_preset
from sim.trace.metrics import compute_metrics
from sim.training.step import (
    ELEMENT_BYTES,
    GRAD_BYTES,
    Parallel,
    StepRequest,
    activation_bytes_per_token,
    bubble_fraction,
    layer_forward_flops,
    layer_params,
    model_flops_per_token,
    palm_flops_per_token,
    ring_collective_s,
    simulate_step,
    stage_layers,
)

L8B = model_preset("llama3-8b")
DGX = Hardware(gpu=Gpu.preset("H100-SXM"), link=Link.preset("nvlink4"), inter_link=Link.preset("ib-ndr"),
               gpus_per_node=8)


def test_one_layers_flops_against_the_closed_form():
    # Llama-3-8B: h 4096, 32 heads, 8 K/V heads of 128, FFN 14336; 4096 tokens of 8192-token sequences
    h, ffn, tokens, seq = 4096, 14336, 4096, 8192
    qkv = h * (32 + 2 * 8) * 128
    linear = 2 * (qkv + 4096 * h + 3 * h * ffn)
    attention = 2 * seq * 32 * 128                    # 4 x seq x heads x dim per token, causal half
    assert layer_forward_flops(L8B, seq, tokens) == pytest.approx(tokens * (linear + attention), rel=1e-15)
    assert layer_params(L8B) == qkv + 4096 * h + 3 * h * ffn + 2 * h
    # 6 N per token plus 6 x seq x heads x dim per layer
    assert model_flops_per_token(L8B, seq) == pytest.approx(6 * 8.03e9 + 6 * 32 * seq * 32 * 128)


def test_palms_count_takes_attention_unmasked():
    # PaLM's Appendix B: 6N + 12LHQT per token, whatever the mask; ringsim's own count halves
    # the attention for the causal mask, so the two differ by 6LHQT
    seq = 131072
    assert palm_flops_per_token(L8B, seq) == pytest.approx(6 * 8.03e9 + 12 * 32 * 32 * 128 * seq)
    assert palm_flops_per_token(L8B, seq) - model_flops_per_token(L8B, seq) == pytest.approx(6 * 32 * 32 * 128 * seq)
    s = simulate_step(StepRequest(model=L8B, seq=8192, global_batch=8 * 8192, parallel=Parallel(dp=8), hardware=DGX))
    want = palm_flops_per_token(L8B, 8192) * 8 * 8192 / s.step_s / 8 / 1e12
    assert s.palm_tflops_per_gpu == pytest.approx(want, rel=1e-12)
    assert s.palm_mfu == pytest.approx(want / 989.4, rel=1e-3)
    assert s.to_dict()["palm_tflops_per_gpu"] == s.palm_tflops_per_gpu


def test_interleaving_holds_more_activations_on_the_first_stage():
    # 32 layers on 4 stages of 8, 8 micro-batches: plain 1F1B keeps 4 micro-batches of 8 layers
    # on the first stage; with v = 2, (v + 1) PP - 1 = 11 chunks of 4 layers
    base = dict(model=L8B, seq=8192, global_batch=8 * 8192, hardware=DGX)
    plain = simulate_step(StepRequest(parallel=Parallel(pp=4), **base))
    deep = simulate_step(StepRequest(parallel=Parallel(pp=4, interleave=2), **base))
    per_layer = activation_bytes_per_token(L8B, 1, "none") * 8192
    assert plain.memory["activations"] == pytest.approx(4 * 8 * per_layer, rel=1e-12)
    assert deep.memory["activations"] == pytest.approx(11 * 4 * per_layer, rel=1e-12)
    assert deep.breakdown["pp_bubble_s"] < plain.breakdown["pp_bubble_s"]


def test_the_embedding_and_the_output_layer_fill_a_chunk_of_their_own():
    # Llama 3: 126 layers on 16 stages of 8 chunks, the first chunk holding only the
    # embedding and the last only the output layer
    m = model_preset("llama3-405b")
    req = dict(model=m, seq=8192, global_batch=16 * 8192, hardware=DGX)
    StepRequest(parallel=Parallel(tp=8, pp=16, interleave=8), **req)
    with pytest.raises(RingsimError, match="126 layers cannot fill 16 stages of 9 virtual stages: stage 0 holds 7 "
                                           "layers and a table$"):
        StepRequest(parallel=Parallel(tp=8, pp=16, interleave=9), **req)
    with pytest.raises(RingsimError, match="stage 1 holds 7 layers$"):     # 120 layers: 7 or 8 a stage
        StepRequest(parallel=Parallel(tp=8, pp=16, interleave=8), **req | {"model": replace(m, layers=120)})


@pytest.mark.parametrize("pp, m, v, want", [(4, 8, 1, 3 / 8), (16, 32, 1, 15 / 32), (16, 32, 4, 15 / 128),
                                            (1, 5, 1, 0.0)])
def test_the_bubble_of_1f1b(pp, m, v, want):
    assert bubble_fraction(pp, m, v) == pytest.approx(want)


def test_the_pipeline_adds_its_bubble_to_the_micro_batches():
    # one layer per stage of 4, 8 micro-batches: the slowest stage (the last, with the output
    # layer) runs its 8 micro-batches, and the fill and drain add at most the other stages'
    m = replace(L8B, layers=4)
    req = StepRequest(model=m, seq=4096, global_batch=8 * 4096, parallel=Parallel(tp=1, pp=4), hardware=DGX)
    s = simulate_step(req)
    totals = [f + b for f, b in s.stage_s]
    assert max(totals) == totals[-1]
    assert 0 < s.breakdown["pp_bubble_s"] <= sum(totals) - max(totals) + 1e-12
    assert s.stage_layers == [1, 1, 1, 1]
    assert s.pipeline is not None and s.pipeline.n_gpus == 4
    assert s.step_s == pytest.approx(compute_metrics(s.pipeline).makespan_s + s.breakdown["dp_comm_s"]
                                     + s.breakdown["optimizer_s"], rel=1e-12)


def test_a_tp_all_gather_moves_its_shards_around_the_ring():
    # 4096 tokens x 4096 hidden in bf16 over 8 GPUs at 450 GB/s and 3 µs: 7 steps of 1/8
    nbytes = 4096 * 4096 * ELEMENT_BYTES
    assert ring_collective_s(nbytes, 8, 450.0, 3.0) == pytest.approx(7 * (3e-6 + nbytes / 8 / 450e9), rel=1e-12)
    assert ring_collective_s(nbytes, 1, 450.0, 3.0) == 0.0
    # the step's TP time per layer: four of them forward, four backward
    req = StepRequest(model=L8B, seq=4096, global_batch=4096, parallel=Parallel(tp=8), hardware=DGX)
    s = simulate_step(req)
    assert s.per_layer["tp_fwd_s"] == pytest.approx(4 * ring_collective_s(nbytes, 8, 450.0, 3.0), rel=1e-12)


def test_fsdp_gathers_hide_behind_a_longer_compute_and_show_behind_a_shorter_one():
    # per layer: the bf16 gather before the forward hides behind the layer before it; the
    # gather before the backward and the fp32 reduce-scatter after it, behind the backward
    def exposed(step, hw, dp):
        layer = layer_params(L8B) / 8
        gather = ring_collective_s(layer * ELEMENT_BYTES, dp, hw.inter_link.bandwidth_gbps, hw.inter_link.latency_us)
        rs = ring_collective_s(layer * GRAD_BYTES["fp32"], dp, hw.inter_link.bandwidth_gbps, hw.inter_link.latency_us)
        p = step.per_layer
        layer_f = p["gemm_fwd_s"] + p["attention_fwd_s"] + p["elementwise_fwd_s"] + p["tp_fwd_s"]
        layer_b = (p["gemm_bwd_s"] + p["attention_bwd_s"] + 2 * p["elementwise_fwd_s"] + p["tp_bwd_s"]
                   + p["recompute_s"])
        return gather, layer_f, 32 * (max(0.0, gather - layer_f) + max(0.0, gather + rs - layer_b))

    slow_nic = replace(DGX, inter_link=Link.preset("ib-ndr", bandwidth_gbps=0.5))     # 4 Gb/s: gathers dominate
    base = dict(model=L8B, seq=8192, global_batch=64 * 8192, hardware=DGX)
    fast = simulate_step(StepRequest(parallel=Parallel(tp=8, dp=16, zero=3), **base))
    gather, layer_f, want = exposed(fast, DGX, 16)
    assert gather < layer_f and fast.breakdown["dp_comm_s"] == pytest.approx(4 * want, rel=1e-9)
    slow = simulate_step(StepRequest(parallel=Parallel(tp=8, dp=16, zero=3), **{**base, "hardware": slow_nic}))
    gather, layer_f, want = exposed(slow, slow_nic, 16)
    assert gather > layer_f                                                  # every layer, every micro-batch
    assert slow.breakdown["dp_comm_s"] == pytest.approx(4 * want, rel=1e-9)


def test_context_parallel_ranks_share_the_weights_so_gradients_and_zero_span_dp_times_cp():
    # CP ranks hold one copy of the weights and their tokens' gradients: the reduction and
    # ZeRO's shards run over DP x CP GPUs (torchtitan's dp_shard_cp mesh, Megatron-LM's
    # data-and-context-parallel group), so FSDP 1 x CP 8 shards as FSDP 8 does
    base = dict(model=L8B, global_batch=262144, hardware=DGX)
    cp8 = simulate_step(StepRequest(parallel=Parallel(cp=8, dp=1, zero=3), seq=262144, **base))
    dp8 = simulate_step(StepRequest(parallel=Parallel(cp=1, dp=8, zero=3), seq=32768, **base))
    params = layer_params(L8B) * 32 + L8B.vocab * L8B.hidden * 2          # the whole model: one stage
    assert params == pytest.approx(8.03e9, rel=0.002)                       # the model card's count
    # ZeRO-3 over 8: fp32 weights, fp32 gradients and Adam's two moments in 8 shards, and
    # two layers' bf16 weights gathered
    assert cp8.memory["optimizer"] == pytest.approx(params * 8 / 8, rel=1e-9)
    assert cp8.memory["gradients"] == pytest.approx(params * GRAD_BYTES["fp32"] / 8, rel=1e-9)
    assert cp8.memory["weights"] == pytest.approx(params * 4 / 8 + 2 * layer_params(L8B) * ELEMENT_BYTES, rel=1e-9)
    for part in ("weights", "gradients", "optimizer"):
        assert cp8.memory[part] == pytest.approx(dp8.memory[part], rel=1e-12)
    # ZeRO-1 over DP 2 x CP 4: Megatron-LM's 6 + 12 / 8 bytes a parameter (bf16 weights and
    # fp32 gradients whole, master weights and moments in 8 shards)
    z1 = simulate_step(StepRequest(parallel=Parallel(cp=4, dp=2, zero=1), seq=131072, **base))
    state = z1.memory["weights"] + z1.memory["gradients"] + z1.memory["optimizer"]
    assert state == pytest.approx(params * (6 + 12 / 8), rel=1e-9)
    # bf16 gradients (--grad-reduce bf16, NeMo's benchmark recipes): Megatron-LM's 4 + 16 / 8
    z1_bf16 = simulate_step(StepRequest(parallel=Parallel(cp=4, dp=2, zero=1, grad_reduce="bf16"), seq=131072,
                                        **base))
    state = z1_bf16.memory["weights"] + z1_bf16.memory["gradients"] + z1_bf16.memory["optimizer"]
    assert state == pytest.approx(params * (4 + 16 / 8), rel=1e-9)
    # the optimizer steps its shard alone: the same time on DP 1 x CP 8 as on DP 8
    assert cp8.breakdown["optimizer_s"] == pytest.approx(dp8.breakdown["optimizer_s"], rel=1e-12)


def test_fp8_products_pay_their_operands_casts_at_the_streaming_rate():
    # Llama-3-8B, TP 1: forward the inputs of QKV (4096), the output projection (4096),
    # gate/up (4096) and down (14336); backward the output gradients of QKV ((32 + 16) x 128),
    # the projection (4096), gate/up (2 x 14336) and down (4096); 6 bytes an element
    from sim.hardware.gemm import gemm_time

    req = StepRequest(model=L8B, seq=8192, global_batch=8 * 8192, parallel=Parallel(dp=8, fp8=True), hardware=DGX)
    step = simulate_step(req)
    t, stream = 8192, DGX.gpu.memory_bandwidth_gbps * 1e9
    shapes = {"qkv": (4096, 6144), "out": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}
    fwd = sum(gemm_time(t, n, k, "H100-SXM", fp8=True, alone=False).time_s for k, n in shapes.values())
    bwd = sum(gemm_time(a, b, c, "H100-SXM", fp8=True, alone=False).time_s
              for k, n in shapes.values() for a, b, c in ((t, k, n), (k, n, t)))
    assert step.per_layer["gemm_fwd_s"] == pytest.approx(fwd + t * 26624 * 6 / stream, rel=1e-12)
    assert step.per_layer["gemm_bwd_s"] == pytest.approx(bwd + t * 43008 * 6 / stream, rel=1e-12)
    # the output layer stays in bf16: its products take the same time with and without --fp8
    bf16 = simulate_step(replace(req, parallel=Parallel(dp=8)))

    def head(x):
        return x.breakdown["gemm_s"] - 32 * (x.per_layer["gemm_fwd_s"] + x.per_layer["gemm_bwd_s"])

    assert head(step) == pytest.approx(head(bf16), rel=1e-9) and head(bf16) > 0


def test_activation_memory_with_and_without_recomputation():
    h, ffn, tp = 4096, 14336, 8
    kept = (4 * h + (32 + 2 * 8) * 128 + 3 * ffn) * 2 / tp
    with_out = kept + (32 * 128 * 2 + 4 * 32) / tp
    assert activation_bytes_per_token(L8B, tp, "none") == pytest.approx(with_out)
    assert activation_bytes_per_token(L8B, tp, "selective") == pytest.approx(kept)
    assert activation_bytes_per_token(L8B, tp, "full") == pytest.approx(2 * h / tp)
    # full recomputation keeps less and costs a forward more
    base = dict(model=L8B, seq=8192, global_batch=8192, hardware=DGX)
    none = simulate_step(StepRequest(parallel=Parallel(tp=8), **base))
    full = simulate_step(StepRequest(parallel=Parallel(tp=8, recompute="full"), **base))
    assert full.memory["activations"] < none.memory["activations"] / 10
    assert full.step_s > none.step_s and full.breakdown["recompute_s"] > 0
    # while a layer's backward runs it holds its rebuilt forward: all of it under full
    # recomputation, the attention output and statistics under selective, nothing without
    selective = simulate_step(StepRequest(parallel=Parallel(tp=8, recompute="selective"), **base))
    assert none.memory["recompute_working"] == 0
    assert full.memory["recompute_working"] == pytest.approx((with_out - 2 * h / tp) * 8192, rel=1e-12)
    assert selective.memory["recompute_working"] == pytest.approx((with_out - kept) * 8192, rel=1e-12)


def test_llama3_stages_take_one_layer_fewer_first_and_last():
    assert stage_layers(126, 16) == [7] + [8] * 14 + [7]
    assert stage_layers(32, 4) == [8, 8, 8, 8]


@pytest.mark.parametrize("changes, message", [
    (dict(parallel=Parallel(tp=3)), "--tp 3 does not divide the model's 32 query heads"),
    (dict(parallel=Parallel(pp=64)), "32 layers cannot fill 64 stages"),
    (dict(parallel=Parallel(dp=3)), "is not a whole number of 8192-token sequences for each of the 3 replicas"),
    (dict(parallel=Parallel(cp=3)), "--seq 8192 does not divide into --cp 3 shards"),
    (dict(parallel=Parallel(microbatches=3)), "--microbatches 3 does not divide the 4 sequences"),
    (dict(parallel=Parallel(zero=2)), "--zero must be one of 0, 1, 3"),
    (dict(parallel=Parallel(interleave=2)), "--interleave 2 needs a pipeline: give --pp of 2 or more"),
    (dict(model=replace(L8B, ffn=None)), "has no FFN size or vocabulary"),
])
def test_bad_configurations_are_refused_in_one_line(changes, message):
    fields = dict(model=L8B, seq=8192, global_batch=4 * 8192, hardware=DGX) | changes
    with pytest.raises(RingsimError, match=message):
        StepRequest(**fields)


def test_the_command_gives_json_and_refuses_degrees_that_do_not_fit():
    args = [sys.executable, "-m", "sim.cli.main", "step", "--model", "llama3-8b", "--seq", "8k", "--global-batch",
            "64k", "--tp", "8", "--dp", "8", "--cluster", "dgx-h100"]
    r = subprocess.run(args + ["--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("step_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "memory_bytes_per_gpu", "fits",
                "breakdown"):
        assert key in d
    assert d["gpus"] == 64 and 0 < d["mfu"] < 1
    assert d["tokens_per_s_per_gpu"] == pytest.approx(65536 / d["step_s"] / 64)
    r = subprocess.run(args[:-4] + ["--tp", "5"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--tp 5 does not divide" in r.stderr
    r = subprocess.run(args + ["--gpus", "48"], capture_output=True, text=True)
    assert r.returncode == 2 and "--tp x --cp x --pp x --dp = 64, not the 48 GPUs given" in r.stderr


def test_the_whole_step_plan_ranks_fitting_splits_by_tokens_per_gpu_and_each_command_reproduces_its_row():
    from sim.training.plan import plan_steps

    hw = DGX
    plan = plan_steps(L8B, 8192, 64 * 8192, hw, 64, hardware_argv=["--cluster", "dgx-h100"])
    assert plan.considered == len(plan.candidates) + plan.refused + plan.skipped
    # an interleaved split is timed only beside a plain one that fits, and holds at least its memory
    def key(c):
        return tuple((k, v) for k, v in c["parallel"].items() if k != "interleave")
    plain = {key(c): c for c in plan.candidates if c["parallel"]["interleave"] == 1}
    deep = [c for c in plan.candidates if c["parallel"]["interleave"] > 1]
    assert deep and plan.skipped
    for c in deep:
        assert plain[key(c)]["fits"]
        assert c["memory_bytes_per_gpu"] >= plain[key(c)]["memory_bytes_per_gpu"]
    fitting = [c for c in plan.candidates if c["fits"]]
    assert fitting and fitting == plan.candidates[:len(fitting)]
    speeds = [c["tokens_per_s_per_gpu"] for c in fitting]
    assert speeds == sorted(speeds, reverse=True)
    assert all(c["parallel"]["tp"] <= 8 for c in plan.candidates)          # TP inside a node
    best = plan.candidates[0]
    assert best["why"].startswith("fastest")
    # the row's command gives the same step
    r = subprocess.run([sys.executable, "-m", "sim.cli.main", *best["command"].split()[1:], "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["step_s"] == pytest.approx(best["step_s"], rel=1e-12)


def test_plan_with_a_global_batch_plans_the_step_and_attention_only_keeps_the_old_question():
    base = [sys.executable, "-m", "sim.cli.main", "plan", "--model", "llama3-8b", "--seq", "8k", "--cluster",
            "dgx-h100", "--top", "3"]
    r = subprocess.run(base + ["--global-batch", "512k", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert len(d["candidates"]) == 3 and d["candidates"][0]["command"].startswith("ringsim step ")
    r = subprocess.run(base + ["--global-batch", "512k", "--attention-only"], capture_output=True, text=True)
    assert r.returncode == 0 and "attention only" in r.stdout


def test_the_step_saves_its_pipeline_as_a_trace_and_keeps_what_is_there(tmp_path):
    from sim.trace.format import Trace

    out = tmp_path / "step.trace.npz"
    args = [sys.executable, "-m", "sim.cli.main", "step", "--model", "llama3-8b", "--seq", "8k", "--global-batch", "128k",
            "--tp", "8", "--pp", "4", "--cluster", "dgx-h100", "--trace", str(out)]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    t = Trace.load(str(out))
    assert t.n_gpus == 4 and t.config["step"]["pp"] == 4
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 2 and "--force" in r.stderr


def test_tp_collectives_overlapped_show_only_what_the_gemms_do_not_cover():
    base = dict(model=L8B, seq=8192, global_batch=8192, hardware=DGX)
    exposed = simulate_step(StepRequest(parallel=Parallel(tp=8), **base))
    hidden = simulate_step(StepRequest(parallel=Parallel(tp=8, tp_overlap=True), **base))
    p = exposed.per_layer
    assert hidden.per_layer["tp_fwd_s"] == pytest.approx(max(0.0, p["tp_fwd_s"] - p["gemm_fwd_s"]), abs=1e-15)
    assert hidden.per_layer["tp_bwd_s"] == pytest.approx(max(0.0, p["tp_bwd_s"] - p["gemm_bwd_s"]), abs=1e-15)
    assert hidden.step_s < exposed.step_s
