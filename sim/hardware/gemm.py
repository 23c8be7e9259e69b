"""The GEMM model: the time of one matrix product C (M x N) = A (M x K) B (K x N) on a GPU.

A library GEMM (cuBLAS) cuts C into output tiles, TILE_M x TILE_N elements each, one
thread block per tile on one SM, walking the whole K dimension. The model follows that
structure (NVIDIA's "Matrix Multiplication Background User's Guide": tile and wave
quantization):

- **Tiles.** ceil(M / TILE_M) x ceil(N / TILE_N) of them; a partial tile costs a whole one.
- **Waves.** The SMs take the tiles in rounds: ceil(tiles / SMs) rounds, the last one
  partly idle. A product with fewer tiles than SMs splits K instead (split-K), s ways,
  so that tiles x s fills the SMs without a slice of K shorter than MIN_SPLIT_K; the s
  partial sums are then added (fp32, read and written once more at the streaming rate).
- **Rate.** One SM's rate is the GPU's Maximum Achievable Matmul FLOPS (MAMF: the best a
  large, well-shaped product reaches, measured) over its SMs. So a product whose tiles
  fill whole waves runs at the MAMF, as measured.
- **Memory.** A, B and C are read or written once, at the GPU's streaming rate; a product
  that moves more bytes than it can hide under its math (a thin one: few tokens, or a
  narrow weight) takes that time instead: time = max(math, memory).
- **Floor.** A product called alone (the GPU idle, as `ringsim gemm` times it, the way
  `simulate --gpus 1` times attention) pays the host's time of one eager operation in
  front (sim.hardware.presets.OP_HOST_US) and the gap after its kernel; in a stream of queued
  work only the gap.

FP8 (`fp8=True`): e4m3 inputs (1 byte), the MAMF measured for FP8, output in bf16.

The MAMF values (MAMF_TFLOPS) are Stas Bekman's published measurements
(stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS
comparison table": torch.mm, the mean of 100 iterations after 50 warm-up ones, at the
best shape of a search). A GPU without one runs at its datasheet peak times
ASSUMED_SHARE (assumed, and said so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.hardware.presets import KERNEL_GAP_US, OP_HOST_US, gpu_preset
from sim.units import require_whole

TILE_M, TILE_N = 128, 256
"""Output tile of a large bf16 GEMM: cuBLAS's Hopper kernels for such shapes are named
`..._tilesize128x256x64_...` (sm90_xmma_gemm) and its Ampere ones
`ampere_bf16_s16816gemm_bf16_256x128_...`: 32,768 outputs a tile either way."""
MIN_SPLIT_K = 256
"""The shortest slice of K a split-K product gives one thread block (four k-steps of 64)."""
ASSUMED_SHARE = 0.75
"""A GPU without a published MAMF: this share of its datasheet peak (assumed: the
published MAMFs of NVIDIA's data-center GPUs lie between 71% and 87% of peak)."""
ACCUM_BYTES = 4

MAMF_SOURCE = ("stas00/ml-engineering compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS comparison "
               "table' (torch.mm, mean of 100 iterations after 50 warm-up)")
MAMF_TFLOPS: dict[str, dict[str, float]] = {
    # GPU preset -> {"bf16": TFLOP/s, "fp8": TFLOP/s}
    "A100-SXM-80GB": {"bf16": 271.2},
    "A100-SXM-40GB": {"bf16": 271.2},
    "A100-PCIe-80GB": {"bf16": 252.9},
    "H100-SXM": {"bf16": 794.5, "fp8": 1402.6},
    "H800-SXM": {"bf16": 794.5, "fp8": 1402.6},      # the H100 SXM5 die and clocks
    "H200": {"bf16": 794.5, "fp8": 1453.4},          # the table: "H200 is the same" for BF16; H200's own FP8
    "B200": {"bf16": 1745.0, "fp8": 3432.5},
    "MI300X": {"bf16": 668.4},
}
FP8_PEAK_FACTOR = 2.0
"""FP8 tensor-core peak over BF16 on the GPUs here (NVIDIA's Hopper and Blackwell
datasheets, AMD's MI300X datasheet: 1979 / 989.4, 4500 / 2250, 2614.9 / 1307.4)."""


@dataclass(frozen=True)
class GemmTime:
    """One product's time and what it is made of."""

    time_s: float
    math_s: float
    memory_s: float
    floor_s: float
    tiles: int
    waves: int
    split_k: int
    rate_tflops: float
    """The SMs' rate (MAMF or its assumed stand-in), TFLOP/s."""
    rate_source: str

    @property
    def bound(self) -> str:
        return "math" if self.math_s >= self.memory_s else "memory"


def rate_tflops(gpu: str, fp8: bool = False) -> tuple[float, str]:
    """The GPU's matmul rate (MAMF where measured, else peak x ASSUMED_SHARE) and its source."""
    p = gpu_preset(gpu)
    dtype = "fp8" if fp8 else "bf16"
    measured = MAMF_TFLOPS.get(p.name, {}).get(dtype)
    if measured is not None:
        return measured, f"{MAMF_SOURCE}: {p.name} {dtype.upper()}"
    peak = p.peak_tflops["bf16"] * (FP8_PEAK_FACTOR if fp8 else 1.0)
    return peak * ASSUMED_SHARE, (f"assumed: {ASSUMED_SHARE:.0%} of the datasheet's {peak:g} TFLOPS "
                                  f"{dtype.upper()} (no published MAMF for {p.name})")


def gemm_time(m: int, n: int, k: int, gpu: str, *, fp8: bool = False, alone: bool = True,
              batch: int = 1, rate: tuple[float, str] | None = None) -> GemmTime:
    """The time of C (m x n) = A (m x k) B (k x n) on `gpu` (a preset name); with `batch`,
    of that many independent products in one batched call (each its own A, B and C). `rate`:
    (TFLOP/s, its source) in place of the MAMF, e.g. a rate fitted to a profiled run's own
    GEMM kernels (sim.profiler.step_replay)."""
    for name, v in (("m", m), ("n", n), ("k", k), ("batch", batch)):
        require_whole(f"--{name}", v)
    p = gpu_preset(gpu)
    rate, source = rate if rate is not None else rate_tflops(p.name, fp8)
    stream = (p.stream_bandwidth_gbps or p.memory_bandwidth_gbps) * 1e9
    tiles = batch * math.ceil(m / TILE_M) * math.ceil(n / TILE_N)
    split = 1
    if p.sms is None:
        # no SM count published in the preset: no waves, every tile at the GPU's rate
        waves = 1
        math_s = 2.0 * tiles * TILE_M * TILE_N * k / (rate * 1e12)
        source += "; SMs unknown: tiles without waves"
    else:
        sms = p.sms
        if tiles < sms:
            split = max(1, min(sms // tiles, k // MIN_SPLIT_K))
        waves = math.ceil(tiles * split / sms)
        k_slice = math.ceil(k / split)
        math_s = waves * 2.0 * TILE_M * TILE_N * k_slice / (rate * 1e12 / sms)
    in_bytes = 1 if fp8 else 2
    moved = batch * ((m * k + k * n) * in_bytes + m * n * 2)
    if split > 1:
        moved += 2 * split * batch * m * n * ACCUM_BYTES  # the partial sums written and read back
    memory_s = moved / stream
    floor_s = (KERNEL_GAP_US + (OP_HOST_US if alone else 0.0)) * 1e-6
    return GemmTime(time_s=floor_s + max(math_s, memory_s), math_s=math_s, memory_s=memory_s, floor_s=floor_s,
                    tiles=tiles, waves=waves, split_k=split, rate_tflops=rate, rate_source=source)


@dataclass(frozen=True)
class Linear:
    """One linear layer's product in a transformer: out = x (tokens x k_in) W (k_in x n_out)."""

    name: str
    k_in: int
    n_out: int


def linear_products(tokens: int, layer: Linear) -> dict[str, tuple[int, int, int]]:
    """The three products (m, n, k) of one linear layer on `tokens` tokens: forward
    (tokens x n_out over k_in), the input's gradient (tokens x k_in over n_out) and the
    weight's gradient (k_in x n_out over tokens)."""
    return {"fwd": (tokens, layer.n_out, layer.k_in), "dgrad": (tokens, layer.k_in, layer.n_out),
            "wgrad": (layer.k_in, layer.n_out, tokens)}
