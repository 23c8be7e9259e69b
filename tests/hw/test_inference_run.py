"""`ringsim hw infer` (hw.inference_run): the inputs each rank makes, the measured traces
of a prefill and a decode run (one spawned group), and the command line's refusals."""

from __future__ import annotations

import pytest
import torch

from hw.inference_run import InferRun, decode_inputs, prefill_inputs
from sim.errors import RingsimError


def test_each_rank_makes_its_shard_of_the_one_rank_context():
    """A value depends on its request and position alone: the shards of N ranks are the
    one-rank tensors at the positions each rank holds (new tokens by the layout, the
    cache as it was written, decode shards request after request)."""
    from hw.layouts import token_index

    one = InferRun(phase="prefill", n_gpus=1, cached=7, new=12, batch=2, heads=4, kv_heads=2, head_dim=8,
                   layout="contiguous")
    q1, kn1, vn1, kc1, vc1 = prefill_inputs(one, 0)
    run = InferRun(phase="prefill", n_gpus=3, cached=7, new=12, batch=2, heads=4, kv_heads=2, head_dim=8,
                   layout="zigzag", cache_layout="zigzag")
    held = {0: [0, 5, 6], 1: [1, 4], 2: [2, 3]}   # zigzag pieces of 7 tokens, edges floor(i 7 / 6)
    for r in range(3):
        q, kn, vn, kc, vc = prefill_inputs(run, r)
        pos = token_index("zigzag", 12, 3)[r]
        assert torch.equal(q, q1[:, pos]) and torch.equal(kn, kn1[:, pos]) and torch.equal(vn, vn1[:, pos])
        assert torch.equal(kc, kc1[:, held[r]]) and torch.equal(vc, vc1[:, held[r]])
    one = InferRun(phase="decode", n_gpus=1, prompts=(5, 2), generated=2, heads=4, kv_heads=2, head_dim=8)
    q1, k1, _ = decode_inputs(one, 0)
    run = InferRun(phase="decode", n_gpus=2, prompts=(5, 2), generated=2, heads=4, kv_heads=2, head_dim=8,
                   layout="contiguous")
    # request 0 (7 tokens): prompt halves 0-1 | 2-4, generated 5-6 on the last rank; request 1's
    # tokens start at 7 in the one-rank shard: prompt 0 | 1, generated 2-3 on the last
    k_of = {0: [0, 1, 7 + 0], 1: [2, 3, 4, 5, 6, 7 + 1, 7 + 2, 7 + 3]}
    for r in range(2):
        q, k, _ = decode_inputs(run, r)
        assert torch.equal(q, q1)
        assert torch.equal(k, k1[k_of[r]])


@pytest.mark.slow
def test_a_prefill_and_a_decode_run_give_measured_traces_of_their_layer():
    from hw.inference import Q_KIND
    from hw.inference_run import measure_many

    prefill = InferRun(phase="prefill", n_gpus=2, scheme="pass-q", cached=40, new=32, heads=4, kv_heads=1,
                       head_dim=8, warmup=0, repeats=2, threads_per_rank=1)
    decode = InferRun(phase="decode", n_gpus=2, merge_by="all-to-all", prompts=(30, 9), generated=3, heads=4,
                      kv_heads=2, head_dim=8, warmup=0, repeats=2, threads_per_rank=1)
    traces_p, traces_d = measure_many([prefill, decode])
    assert len(traces_p) == len(traces_d) == 2
    t = traces_p[0]
    assert t.source == "measured" and t.n_gpus == 2
    assert t.config["kind"] == "prefill" and t.config["scheme"] == "pass-q" and t.config["cached"] == 40
    assert t.meta["phase"] == "prefill" and t.meta["carries"] == "q"
    hops = [s for s in t.spans if s.stream == "send" and s.kind == Q_KIND]
    assert len(hops) == 2 and all(s.bytes == 16 * 4 * 8 * 4 for s in hops)      # T/N tokens x heads x d, fp32
    assert sorted({s.kind for s in t.spans if s.stream == "send"}) == sorted({Q_KIND, "a2a"})
    t = traces_d[1]
    assert t.config["kind"] == "decode" and t.config["merge"] == "all-to-all" and t.config["prompts"] == [30, 9]
    sends = sorted((s.kind, s.step) for s in t.spans if s.stream == "send" and s.rank == 0)
    assert sends == [("a2a", 1), ("ag", 2)]
    # every kept pair: request 0 sees 33 keys, request 1 sees 12, one query each, 4 heads x 4 d FLOPs
    flops = sum(s.flops for s in t.spans if s.stream == "compute")
    assert flops == 4 * 8 * 4 * (33 + 12)
    # the model of each layer (on the CPU profile) sends what the kernels sent, at the same steps
    from hw.inference_validate import simulate
    from sim.hardware.profile import load_profile

    profile = load_profile("bench/results/calibration/cpu-2core/profile.json")
    for run, measured in ((prefill, traces_p[0]), (decode, traces_d[0])):
        model = simulate(run, profile, stream_gbps=5.0)
        assert ({(s.rank, s.kind, s.step) for s in model.spans if s.stream == "send"}
                == {(s.rank, s.kind, s.step) for s in measured.spans if s.stream == "send"})


def _args(*argv: str):
    import argparse

    from hw.inference_run import add_infer_args

    p = argparse.ArgumentParser()
    add_infer_args(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize("argv, words", [
    (("--phase", "prefill", "--prompts", "5,6"), "decode batch"),
    (("--phase", "prefill", "--context", "100", "--new", "200"), "--context >= --new"),
    (("--phase", "prefill", "--new", "100", "--gpus", "3"), "multiple of 6"),
    (("--phase", "decode", "--prompts", "5,x"), "separated by commas"),
    (("--phase", "decode", "--context", "4", "--generated", "4"), "generated"),
    (("--phase", "decode", "--prompts", "2", "--new", "3"), "cannot hold"),
    (("--phase", "decode", "--layout", "zigzag"), "round-robin"),
    (("--phase", "decode", "--scheme", "pass-q"), "--merge-by"),
])
def test_the_command_line_refuses_a_layer_it_cannot_run_in_one_line(argv, words):
    from hw.inference_run import run_from_args

    with pytest.raises(RingsimError, match=words) as e:
        run_from_args(_args("--device", "cpu", *argv))
    assert "\n" not in str(e.value)


def test_the_kernels_shard_the_cache_as_the_model_counts_it():
    """Each rank's cached and new tokens (hw.inference_run) are the model's counts
    (sim.inference.work.cached_counts, DecodeAttention.tokens)."""
    from hw.inference_run import decode_batch, prefill_positions
    from sim.inference.decode import DecodeAttention
    from sim.inference.work import cached_counts

    for n, cached, layout in ((3, 37, "zigzag"), (2, 9, "striped"), (5, 23, "contiguous")):
        run = InferRun(phase="prefill", n_gpus=n, cached=cached, new=2 * n * 4, cache_layout=layout)
        got = [len(prefill_positions(run, r)[1]) for r in range(n)]
        assert got == cached_counts(cached, n, layout).tolist()
    for layout in ("round-robin", "contiguous"):
        run = InferRun(phase="decode", n_gpus=3, prompts=(7, 2, 12), generated=4, layout=layout)
        want = DecodeAttention(n_ranks=3, prompts=(7, 2, 12), generated=4, layout=layout).tokens()
        got = [[len(x) for x in decode_batch(run).held(r)] for r in range(3)]
        assert (want.T == got).all()


def test_validate_infer_needs_a_profile():
    from hw.validate_cli import cmd_validate
    from sim.cli.main import build_parser

    a = build_parser().parse_args(["validate", "--infer", "prefill"])
    with pytest.raises(RingsimError, match="--profile") as e:
        cmd_validate(a)
    assert "\n" not in str(e.value)


def test_the_model_on_the_cpu_profile_plays_the_kernels_steps():
    """The model's trace of a layer on the CPU profile (hw.inference_validate.simulate)
    has the kernels' operations: pass-Q's hops at steps 0..N-2, its return at step N and
    one merge per rank after it; decode's all-to-all at step 1 and gather at step 2."""
    from hw.inference_validate import simulate
    from sim.hardware.profile import load_profile

    profile = load_profile("bench/results/calibration/cpu-2core/profile.json")
    run = InferRun(phase="prefill", n_gpus=3, scheme="pass-q", cached=60, new=48, heads=8, kv_heads=2)
    t = simulate(run, profile, stream_gbps=5.0)
    sends = {(s.kind, s.step) for s in t.spans if s.stream == "send"}
    assert sends == {("kv", 0), ("kv", 1), ("a2a", 3)}
    assert t.config["kind"] == "prefill" and t.makespan_s > 0
    merges = [s for s in t.spans if s.stream == "compute" and s.step == 3]
    assert sorted(s.rank for s in merges) == [0, 1, 2]
    run = InferRun(phase="decode", n_gpus=3, merge_by="all-to-all", prompts=(50, 20), heads=8, kv_heads=2)
    t = simulate(run, profile, stream_gbps=5.0)
    assert {(s.kind, s.step) for s in t.spans if s.stream == "send"} == {("a2a", 1), ("ag", 2)}


def test_the_validation_report_reads_as_a_table_with_the_host_state():
    from hw.inference_validate import markdown, summary

    part = {"measured": 0.2, "simulated": 0.1, "error": -0.5}
    rows = [{"key": f"prefill/pass-q/zigzag/gpus2/cached{c}/new64", "rule_scheme": "pass-q",
             "measured_median_s": m, "measured_min_s": m * 0.9, "measured_max_s": m * 1.2, "measured_cv": 0.1,
             "simulated_s": 0.1, "error": (0.1 - m) / m, "within_range": False, "simulated_at_host_state_s": m,
             "error_at_host_state": 0.0, "parts": {"compute_s": part}} for c, m in ((0, 0.2), (64, 0.4))]
    s = summary(rows)
    assert s["median_abs_error"] == pytest.approx(0.625) and s["max_abs_error"] == pytest.approx(0.75)
    assert s["worst_case"] == rows[1]["key"] and s["median_abs_error_at_host_state"] == 0.0
    text = markdown({"measured_on": {"device": "cpu", "threads_per_rank": 1}, "profile": "p.json", "heads": 8,
                     "kv_heads": 2, "head_dim": 64, "dtype": "fp32", "repeats": 5, "warmup": 1,
                     "stream_gbps": [5.0, 5.5], "load_avg_1m": [1.0, 2.0],
                     "host_state": {"speed": 2.0, "sharing": 1.5}, "summary": s, "cases": rows})
    assert "| prefill/pass-q/zigzag/gpus2/cached64/new64 | pass-q | 400.0 ms | 360.0-480.0 ms | 100.0 ms |" in text
    assert "load average 1.0 before, 2.0 after" in text and "2.00x the profile's time" in text


def test_a_measured_traces_header_is_the_models_shape_of_the_layer():
    """The header a measured run writes (InferRun.describe) is read by the model as the same
    layer (sim.inference's from_config), field for field."""
    from sim.inference.decode import DecodeAttention
    from sim.inference.prefill import PrefillAttention

    run = InferRun(phase="prefill", n_gpus=3, scheme="pass-q", cached=100, new=48, batch=2, heads=8, kv_heads=2,
                   head_dim=16, layout="contiguous", cache_layout="striped")
    shape = PrefillAttention.from_config(run.describe())
    assert shape.describe() == {k: v for k, v in run.describe().items() if k != "kind"}
    run = InferRun(phase="decode", n_gpus=2, merge_by="all-to-all", prompts=(30, 9), generated=3, heads=4,
                   kv_heads=2, head_dim=8, layout="contiguous")
    shape = DecodeAttention.from_config(run.describe())
    assert shape.describe() == {k: v for k, v in run.describe().items() if k not in ("kind", "new")}
