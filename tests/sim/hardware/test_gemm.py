"""The GEMM model (sim.hardware.gemm) against closed forms worked out here: tiles, waves, split-K,
the memory roofline, FP8, and its command (`ringsim gemm`)."""

import json
import subprocess
import sys

import pytest

from sim.errors import RingsimError
from sim.hardware.gemm import MAMF_TFLOPS, MIN_SPLIT_K, TILE_M, TILE_N, Linear, gemm_time, linear_products
from sim.hardware.presets import KERNEL_GAP_US, OP_HOST_US

GAP = KERNEL_GAP_US * 1e-6
H100_SMS = 132
PER_SM = MAMF_TFLOPS["H100-SXM"]["bf16"] * 1e12 / H100_SMS


def test_tiles_that_fill_whole_waves_run_at_the_measured_peak():
    m, n, k = TILE_M * 33, TILE_N * 4, 16384                 # 132 tiles: one full wave
    t = gemm_time(m, n, k, "H100-SXM", alone=False)
    assert (t.tiles, t.waves, t.split_k) == (132, 1, 1)
    assert t.math_s == pytest.approx(2.0 * m * n * k / (MAMF_TFLOPS["H100-SXM"]["bf16"] * 1e12), rel=1e-12)
    assert t.time_s == pytest.approx(GAP + t.math_s, rel=1e-12)
    assert t.bound == "math"


def test_one_tile_more_than_a_wave_costs_a_whole_wave():
    k = 16384
    full = gemm_time(TILE_M * 33, TILE_N * 4, k, "H100-SXM", alone=False)
    over = gemm_time(TILE_M * 33 + 1, TILE_N * 4, k, "H100-SXM", alone=False)   # a partial tile row: 136 tiles
    assert over.tiles == 136 and over.waves == 2
    assert over.math_s == pytest.approx(2 * full.math_s, rel=1e-12)


def test_few_tiles_split_k_to_fill_the_sms():
    # 2 x 2 = 4 tiles on 132 SMs: K = 8192 split 32 ways (132 // 4 = 33, but no slice under 256)
    t = gemm_time(2 * TILE_M, 2 * TILE_N, 8192, "H100-SXM", alone=False)
    assert t.tiles == 4 and t.split_k == min(H100_SMS // 4, 8192 // MIN_SPLIT_K) == 32 and t.waves == 1
    assert t.math_s == pytest.approx(2.0 * TILE_M * TILE_N * (8192 / 32) / PER_SM, rel=1e-12)


def test_a_thin_product_is_bound_by_memory():
    # 16 tokens through a 8192 x 8192 weight: 128 MiB of weight read at the streaming rate
    t = gemm_time(16, 8192, 8192, "H100-SXM", alone=False)
    assert t.bound == "memory"
    split = t.split_k
    moved = (16 * 8192 + 8192 * 8192) * 2 + 16 * 8192 * 2 + (2 * split * 16 * 8192 * 4 if split > 1 else 0)
    assert t.memory_s == pytest.approx(moved / 2500e9, rel=1e-12)          # the H100 preset's streaming rate
    assert t.time_s == pytest.approx(GAP + t.memory_s, rel=1e-12)


def test_a_batch_of_products_is_their_tiles_and_their_bytes_in_one_call():
    # 4 products of 2 x 1 tiles: 8 tiles, split 16 ways (132 // 8, K 4096 / 256 = 16)
    one, four = (gemm_time(2 * TILE_M, TILE_N, 4096, "H100-SXM", alone=False, batch=b) for b in (1, 4))
    assert (one.tiles, four.tiles) == (2, 8) and four.split_k == min(H100_SMS // 8, 4096 // MIN_SPLIT_K) == 16
    moved = 4 * ((2 * TILE_M * 4096 + 4096 * TILE_N) * 2 + 2 * TILE_M * TILE_N * 2) + 2 * 16 * 4 * 2 * TILE_M * TILE_N * 4
    assert four.memory_s == pytest.approx(moved / 2500e9, rel=1e-12)
    assert four.math_s == pytest.approx(2.0 * TILE_M * TILE_N * (4096 / 16) / PER_SM, rel=1e-12)
    with pytest.raises(RingsimError, match="--batch"):
        gemm_time(256, 256, 256, "H100-SXM", batch=0)


def test_the_xla_comparison_runs_over_every_product(tmp_path):
    out = tmp_path / "xla.json"
    run = subprocess.run([sys.executable, "bench/accuracy/gemm_xla.py", "--out", str(out)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    d = json.loads(out.read_text())
    assert len(d["products"]) == 750 and d["fp8_above_peak"] == 29
    r = next(p for p in d["products"] if (p["b"], p["m"], p["n"], p["k"], p["dtype"]) == (1, 4096, 4096, 4096, "bf16"))
    line = next(x for x in open("bench/accuracy/data/xla_sm90_matmul.csv") if x.startswith("1,4096,4096,4096,"))
    assert r["measured_s"] == pytest.approx(2 * 4096 ** 3 / int(line.split(",")[4]), rel=1e-12)   # the table's FLOP/s


def test_a_product_called_alone_pays_the_hosts_time_in_front():
    queued = gemm_time(4096, 4096, 4096, "H100-SXM", alone=False)
    alone = gemm_time(4096, 4096, 4096, "H100-SXM")
    assert alone.time_s - queued.time_s == pytest.approx(OP_HOST_US * 1e-6, rel=1e-9)


def test_fp8_runs_at_its_own_measured_peak_on_one_byte_inputs():
    m, n, k = TILE_M * 33, TILE_N * 4, 16384
    bf16 = gemm_time(m, n, k, "H200", alone=False)
    fp8 = gemm_time(m, n, k, "H200", fp8=True, alone=False)
    assert bf16.math_s / fp8.math_s == pytest.approx(MAMF_TFLOPS["H200"]["fp8"] / MAMF_TFLOPS["H200"]["bf16"])
    assert fp8.memory_s < bf16.memory_s


def test_a_gpu_without_a_measured_peak_says_its_rate_is_assumed():
    t = gemm_time(4096, 4096, 4096, "L40S")
    assert t.rate_source.startswith("assumed") and t.rate_tflops == pytest.approx(0.75 * 362.05)


def test_a_linear_layers_three_products():
    p = linear_products(4096, Linear("qkv", k_in=4096, n_out=6144))
    assert p == {"fwd": (4096, 6144, 4096), "dgrad": (4096, 4096, 6144), "wgrad": (4096, 6144, 4096)}


@pytest.mark.parametrize("m", [0, -3])
def test_bad_sizes_are_refused(m):
    with pytest.raises(RingsimError, match="--m must be a positive whole number"):
        gemm_time(m, 4, 4, "H100-SXM")


def test_the_command_prints_the_time_as_json_and_refuses_bad_input_in_one_line():
    r = subprocess.run([sys.executable, "-m", "sim.cli.main", "gemm", "--m", "8192", "--n", "8192", "--k", "8192",
                        "--gpu", "H200", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["time_s"] == pytest.approx(gemm_time(8192, 8192, 8192, "H200").time_s, rel=1e-12)
    assert out["gpu"] == "H200" and out["dtype"] == "bf16"
    r = subprocess.run([sys.executable, "-m", "sim.cli.main", "gemm", "--m", "8", "--n", "0", "--k", "8"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--n must be" in r.stderr
