"""The Megatron-LM TP 8 iteration on 8 x A100 (tests/data/traces/README.md: astra-sim/astra-sim,
commit ab5d3e6, my_test/inputs/workload/megatron-tp8) replayed through the step model: shapes
against a closed form from the raw trace's recorded dims, the fitted all-reduce against its
own kernels, the replay within 10% of the measured iteration per rank and overall."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sim.errors import RingsimError
from sim.profiler.reader import read_run
from sim.profiler.step_replay import Gemm, gemm_of, replay

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
MEGATRON = [TRACES / f"megatron-tp8-a100.rank{r}.json.gz" for r in range(8)]


@pytest.fixture(scope="module")
def run():
    return read_run([str(p) for p in MEGATRON])


@pytest.fixture(scope="module")
def result(run):
    return replay(run)


def _raw(rank: int) -> list[dict]:
    with gzip.open(MEGATRON[rank], "rt") as f:
        return json.load(f)["traceEvents"]


def test_the_shapes_read_are_those_a_closed_form_gives_from_the_recorded_dims(result):
    ev = _raw(0)
    dims = Counter((e["name"], json.dumps(e["args"].get("Input Dims"))) for e in ev if e.get("cat") == "cpu_op")

    def ops(name):
        return [json.loads(d) for (n, d), _ in dims.items() if n == name]

    # Megatron's ColumnParallelLinear for QKV: weight [3 x heads/TP x head_dim, hidden]; the
    # attention scores: baddbmm of [micro-batch x heads/TP, seq, head_dim] by its transpose
    (scores, q, _, _, _), = ops("aten::baddbmm")
    bh, seq, head_dim = q
    weights = [d[1] for d in ops("LinearWithGradAccumulationAndAsyncCommunication")]
    qkv = next(w for w in weights if w[0] % (3 * head_dim) == 0 and w[1] > w[0])
    hidden, heads_tp = qkv[1], qkv[0] // (3 * head_dim)
    fc1 = next(w for w in weights if w[1] == hidden and w is not qkv and w[0] != qkv[0])
    layers = sum(c for (n, _), c in dims.items() if n == "aten::baddbmm")
    logits = next(json.loads(d)[0] for (n, d), _ in dims.items() if n == "aten::copy_" and len(json.loads(d)[0]) == 3
                  and json.loads(d)[0][-1] not in (hidden,))
    tp = 8
    s = result.shapes
    assert (s.hidden, s.heads, s.kv_heads, s.head_dim) == (hidden, heads_tp * tp, heads_tp * tp, head_dim)
    assert (s.ffn, s.mlp, s.layers, s.vocab) == (fc1[0] * tp, "gelu", layers, logits[-1] * tp)
    assert (s.seq, s.micro_batch, s.tokens) == (seq, bh // heads_tp, seq * bh // heads_tp)
    assert s.forward_only and s.attention == "unfused" and s.tp == tp
    assert (s.hidden, s.heads, s.ffn, s.layers, s.vocab, s.seq, s.micro_batch) == (4096, 64, 16384, 40, 51200, 2048, 4)


def test_the_step_model_plays_the_products_read(result):
    sm = result.step_model
    assert sm["layer_gemm_fwd_s"] == pytest.approx(sm["layer_gemm_fwd_from_shapes_s"], rel=1e-12)
    assert sm["layer_tp_fwd_s"] == pytest.approx(sm["layer_all_reduces_fitted_s"], rel=1e-12)


def test_the_fitted_all_reduce_reproduces_its_own_kernels(result):
    # each call's own time from the raw files: the shortest of the 8 ranks' kernels of that call
    durs = np.array([[e["dur"] * 1e-6 for e in sorted((e for e in _raw(r) if e.get("cat") == "kernel"
                                                         and "AllReduce" in e["name"]), key=lambda e: e["ts"])]
                     for r in range(8)])
    own = durs.min(axis=0)
    big = own[own > 100e-6]                                        # the 64 MiB activations' all-reduces
    fit = result.all_reduce
    model = fit.time_s(2048 * 4 * 4096 * 2)
    assert abs(model / np.median(big) - 1) < 0.05
    assert abs(model * len(big) / big.sum() - 1) < 0.02
    assert np.median(np.abs(model / big - 1)) < 0.08
    assert 100 < fit.bus_gbps < 300             # A100 NVLink 3: 300 GB/s a direction (datasheet)


def test_the_fitted_gemm_rate_is_below_the_peak_and_times_the_large_products(result):
    g = result.gemm
    assert 150 < g.rate_tflops <= 312                               # A100 dense FP16 peak (datasheet)
    for row in g.by_shape:
        if row["batch"] == 1 and row["k"] >= 2048:
            assert abs(row["error"]) < 0.15, row


def test_the_replay_is_within_ten_percent_per_rank_and_overall(result):
    assert len(result.measured_s) == 8
    for m, s in zip(result.measured_s, result.simulated_s):
        assert abs(s / m - 1) < 0.10
    assert abs(result.overall_error) < 0.10
    assert abs(result.device_simulated_s / result.device_measured_s - 1) < 0.10


def test_the_play_with_measured_kernels_gives_back_the_measured_iteration(result):
    for m, i in zip(result.measured_s, result.identity_s):
        assert i == pytest.approx(m, rel=0.005)


def test_gemm_shapes_follow_torchs_argument_order():
    torch = pytest.importorskip("torch")
    a, b = torch.empty(6, 5), torch.empty(5, 3)
    bias = torch.empty(3)
    out = torch.addmm(bias, a, b)
    assert gemm_of("aten::addmm", [[3], [6, 5], [5, 3]]) == Gemm(out.shape[0], out.shape[1], 5, 1, "aten::addmm")
    w = torch.empty(3, 5)
    x = torch.empty(2, 6, 5)
    y = torch.nn.functional.linear(x, w)
    g = gemm_of("aten::linear", [[2, 6, 5], [3, 5], [3]])
    assert (g.m, g.n, g.k) == (y.shape[0] * y.shape[1], y.shape[2], 5)
    z = torch.baddbmm(torch.empty(4, 6, 3), torch.empty(4, 6, 5), torch.empty(4, 5, 3))
    g = gemm_of("aten::baddbmm", [[4, 6, 3], [4, 6, 5], [4, 5, 3]])
    assert (g.batch, g.m, g.n, g.k) == (*z.shape, 5)


def test_one_rank_is_refused(run):
    one = read_run([str(MEGATRON[0])], partial=True)
    with pytest.raises(RingsimError, match="one rank"):
        replay(one)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "sim.cli.main", "validate", *args], capture_output=True, text=True)


def test_the_command_line_prints_measured_against_simulated():
    r = _cli("--trace", *map(str, MEGATRON))
    assert r.returncode == 0, r.stderr
    assert "40 layers, hidden 4,096" in r.stdout and "taken as measured" in r.stdout
    last = [line for line in r.stdout.splitlines() if line.startswith("all ")][0]
    assert "%" in last


def test_the_command_line_gives_bad_input_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "not-a-trace.json"
    bad.write_text(json.dumps({"hello": 1}))
    for args in (["--trace", str(bad)], ["--trace", *map(str, MEGATRON), "--profile-out", str(tmp_path / "p.json")],
                 ["--trace", *map(str, MEGATRON), "--iteration", "99"]):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_the_step_models_own_products_read_back_as_its_model():
    # a Llama 3 8B layer (SwiGLU, GQA, head dim 128) at TP 2 as the step model builds its
    # products, recorded 32 times, and the output layer once: read_shapes gives the model back
    from sim.profiler.step_replay import RankKernels, read_shapes
    from sim.scenario.models import model_preset
    from sim.training.step import layer_linears

    m, tp, tokens = model_preset("llama3-8b"), 2, 8192
    products = [Gemm(tokens, n, k) for k, n in layer_linears(m, tp).values()] * m.layers
    products.append(Gemm(tokens, m.vocab // tp, m.hidden))
    n = len(products)
    rk = RankKernels(rank=0, start_s=0.0, end_s=1.0, kind=np.array(["gemm"] * n), name=np.array(["gemm"] * n),
                     k_start=np.arange(n, dtype=float), k_dur=np.ones(n), msg_bytes=np.full(n, np.nan),
                     gemm=products)
    s = read_shapes(rk, tp)
    assert (s.hidden, s.heads, s.kv_heads, s.head_dim, s.ffn, s.mlp) == (m.hidden, m.heads, m.kv_heads, m.head_dim,
                                                                         m.ffn, "swiglu")
    assert (s.layers, s.vocab, s.microbatches, s.forward_only, s.attention) == (m.layers, m.vocab, 1, True, "fused")
    assert any("head dim" in u for u in s.unread)


def test_the_command_line_gives_the_replay_as_json():
    r = _cli("--trace", *map(str, MEGATRON), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["ranks"]) == 8 and abs(out["overall"]["error"]) < 0.10
    assert out["shapes"]["layers"] == 40 and out["taken_as_measured"]
