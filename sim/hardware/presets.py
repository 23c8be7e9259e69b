"""Datasheet numbers for GPUs and links, and published attention-kernel throughput, each
with its source.

Peak rates are dense (no structured sparsity). Link bandwidths are per direction: a
datasheet's "bidirectional" or "total" figure is halved. Memory bandwidths are the
datasheet's HBM peak; the merge of partial results is memory-bound work (see
sim.hardware.kernel_model) and streams at the rate a copy kernel was measured to reach on the GPU
where one is published (`stream_bandwidth_gbps`, 66-89% of the peak), else at the peak.

Kernel tables: the throughput FlashAttention's authors published for their kernels,
by pass (fwd, bwd), mask (dense "full" or "diagonal", the causal mask) and head dim, at
sequence lengths 512 to 16k. Their benchmark holds batch x seqlen at 16k tokens and the
hidden size at 2048 (16 heads of 128 or 32 of 64), so the number of query tiles is the
same at every length and the length is that of the kernel's inner loop. TFLOP/s count
a causal run as half the dense FLOPs (`4 * seqlen^2 * heads * head_dim / 2`), backward
as 2.5x forward (flash-attention `benchmarks/benchmark_flash_attention.py`, `flops()`).
Where a series was not published it is derived from published ones and says how.

Kernel shapes (how each kernel cuts a block into thread blocks) are read off each kernel's
source; the per-call floor was measured on one H200. Latencies and the flat model's
launch overhead are assumptions (order of magnitude), labelled so; a calibrated profile
(see `ringsim calibrate`) replaces them with measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.errors import RingsimError
from sim.hardware.pcie import PCIE_X16_GBPS, Pcie


@dataclass(frozen=True, kw_only=True)
class GpuPreset:
    name: str
    peak_tflops: dict[str, float]
    """Dense peak TFLOP/s by dtype (fp32 is the non-tensor-core rate)."""
    memory_gb: float
    memory_bandwidth_gbps: float
    """HBM bandwidth, GB/s (10^9 bytes/s): the datasheet's peak."""
    stream_bandwidth_gbps: float | None = None
    """What a kernel streaming one read and one write reaches, GB/s (both counted),
    measured and published; the rate of the merge. None: none found, the peak is used."""
    stream_source: str = ""
    """Where stream_bandwidth_gbps was measured."""
    kernels: dict[str, str] = field(default_factory=dict)
    """Attention kernels with published tables for this GPU: short name -> KERNEL_TABLES
    key; the first is the default. Empty: only the flat model (peak x efficiency)."""
    sms: int | None = None
    """Streaming multiprocessors (compute units): how many thread blocks run at once
    (sim.hardware.kernel_model). None: not known; a block then runs at its table's rate."""
    source: str


@dataclass(frozen=True, kw_only=True)
class LinkPreset:
    name: str
    bandwidth_gbps: float
    """GB/s per direction (10^9 bytes/s)."""
    latency_us: float
    source: str


@dataclass(frozen=True, kw_only=True)
class RateSeries:
    tflops: tuple[float | None, ...]
    """Achieved TFLOP/s at each of the table's sequence lengths (None: not published)."""
    source: str


@dataclass(frozen=True, kw_only=True)
class KernelTable:
    name: str
    kernel: str
    measured_on: str
    sms: int
    """SMs of the GPU the table was measured on (sim.hardware.kernel_model reads its CTAs' rate off it)."""
    shape: str
    """The kernel's KERNEL_SHAPES entry."""
    stream_gbps: float
    """The streaming rate of that GPU (GpuPreset.stream_bandwidth_gbps): the memory-bound
    kernels of a published backward call ran at it."""
    seqlens: tuple[int, ...]
    series: dict[tuple[str, str, int], RateSeries]
    """(kind 'fwd'/'bwd', mask 'full'/'diagonal', head dim) -> rates by sequence length."""


SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)

# --- FlashAttention-2 and -3 on H100 80GB SXM5 (bf16/fp16) ---------------------------------

_FA2_README = ("Dao-AILab/flash-attention README, 'Performance' (assets/flash2_{gpu}_fwd_bwd_benchmark.png, "
               "the FlashAttention-2 paper's figures, arXiv 2307.08691): FlashAttention-2 forward+backward, {mask}, "
               "head dim {d}")
_FA3_FWD = ("FlashAttention-3 paper (arXiv 2407.08608) Figure 'Attention forward speed' (also "
            "Dao-AILab/flash-attention assets/flash3_fp16_fwd.png): {kernel} forward, {mask}, head dim {d}, H100 80GB SXM5")
_FA3_BWD = ("FlashAttention-3 paper (arXiv 2407.08608) Figure 'Attention backward speed, head dim {d} "
            "(H100 80GB SXM5)', without causal mask: {kernel} backward")

# Published: forward+backward (FA2 README figure), forward (FA3 paper figure, FA2 bars).
_H100_FA2_FWDBWD = {
    ("full", 64): (215, 254, 274, 288, 294, 296),
    ("full", 128): (248, 294, 320, 326, 335, 338),
    ("diagonal", 64): (141, 192, 232, 257, 273, 284),
    ("diagonal", 128): (163, 221, 265, 294, 308, 328),
}
_H100_FA2_FWD = {
    ("full", 64): (282, 306, 318, 321, 322, 324),
    ("full", 128): (309, 350, 362, 368, 370, 370),
    ("full", 256): (275, 313, 321, 323, 324, 326),
    ("diagonal", 64): (180, 229, 262, 284, 295, 299),
    ("diagonal", 128): (191, 260, 298, 319, 333, 335),
    ("diagonal", 256): (208, 251, 278, 293, 297, 298),
}
_H100_FA2_BWD_FULL = {64: (198, 238, 264, 279, 287, 291), 128: (214, 260, 291, 310, 318, 322)}
_H100_FA3_FWD = {
    ("full", 64): (333, 392, 460, 476, 496, 497),
    ("full", 128): (467, 565, 625, 638, 646, 648),
    ("diagonal", 64): (197, 265, 371, 420, 460, 473),
    ("diagonal", 128): (292, 423, 521, 579, 602, 616),
}
_H100_FA3_BWD_FULL = {64: (272, 363, 422, 453, 472, 474), 128: (316, 424, 501, 542, 559, 561)}

# cuDNN's fused attention (cuDNN 9), the bars beside FlashAttention-3's in the same figures.
_H100_CUDNN_FWD = {
    ("full", 64): (335, 373, 395, 408, 412, 413),
    ("full", 128): (497, 574, 617, 609, 600, 595),
    ("diagonal", 128): (315, 410, 484, 518, 529, 539),
}
_H100_CUDNN_BWD_FULL = {128: (305, 408, 465, 499, 518, 516)}

# --- FlashAttention-2 on A100 80GB SXM4: forward+backward only was published in the repo -----
# hdim 128 dense at 512 is hidden behind the figure's legend: not published here (None).
_A100_FA2_FWDBWD = {
    ("full", 64): (132, 153, 162, 171, 175, 176),
    ("full", 128): (None, 173, 187, 196, 201, 203),
    ("diagonal", 64): (88, 119, 140, 156, 165, 171),
    ("diagonal", 128): (99, 133, 155, 173, 182, 189),
}


def _bwd_from(fwdbwd, fwd):
    """Backward TFLOP/s from forward+backward and forward ones at the same size: the
    benchmark counts f FLOPs forward and 2.5f backward, so t_bwd = 3.5f/R_fb - f/R_f and
    R_bwd = 2.5 / (3.5/R_fb - 1/R_f)."""
    return tuple(None if a is None or b is None else round(2.5 / (3.5 / a - 1.0 / b), 1)
                 for a, b in zip(fwdbwd, fwd))


def _scale(values, num, den):
    return tuple(None if v is None or a is None or b is None else round(v * a / b, 1)
                 for v, a, b in zip(values, num, den))


def _fa2_h100() -> KernelTable:
    s: dict[tuple[str, str, int], RateSeries] = {}
    for (mask, d), v in _H100_FA2_FWD.items():
        s["fwd", mask, d] = RateSeries(tflops=v, source=_FA3_FWD.format(
            kernel="FlashAttention-2", mask="causal mask" if mask == "diagonal" else "no mask", d=d))
    for d, v in _H100_FA2_BWD_FULL.items():
        s["bwd", "full", d] = RateSeries(tflops=v, source=_FA3_BWD.format(d=d, kernel="FlashAttention-2"))
    for d in (64, 128):
        s["bwd", "diagonal", d] = RateSeries(
            tflops=_bwd_from(_H100_FA2_FWDBWD["diagonal", d], _H100_FA2_FWD["diagonal", d]),
            source="derived: 2.5 / (3.5/R_fwdbwd - 1/R_fwd) from " + _FA2_README.format(
                gpu="h100", mask="with causal mask", d=d) + " and " + _FA3_FWD.format(
                kernel="FlashAttention-2", mask="causal mask", d=d))
    return KernelTable(name="fa2-h100", kernel="FlashAttention-2", measured_on="H100 80GB SXM5", sms=132,
                       shape="FlashAttention-2", stream_gbps=2500.0,
                       seqlens=SEQLENS, series=s)


def _h100_table(name: str, kernel: str, fwd: dict, bwd_full: dict) -> KernelTable:
    """A kernel's H100 table from the FlashAttention-3 paper's figures (its forward, dense
    and causal, and its dense backward). No causal backward was published for it: that
    series is its dense backward x FlashAttention-2's causal/dense backward ratio."""
    s: dict[tuple[str, str, int], RateSeries] = {}
    for (mask, d), v in fwd.items():
        s["fwd", mask, d] = RateSeries(tflops=v, source=_FA3_FWD.format(
            kernel=kernel, mask="causal mask" if mask == "diagonal" else "no mask", d=d))
    fa2 = _fa2_h100().series
    for d, v in bwd_full.items():
        s["bwd", "full", d] = RateSeries(tflops=v, source=_FA3_BWD.format(d=d, kernel=kernel))
        s["bwd", "diagonal", d] = RateSeries(
            tflops=_scale(v, fa2["bwd", "diagonal", d].tflops, fa2["bwd", "full", d].tflops),
            source=f"assumed (no causal backward published for {kernel}): its dense backward, "
                   + _FA3_BWD.format(d=d, kernel=kernel)
                   + ", x FlashAttention-2's causal/dense backward ratio at the same length (the fa2-h100 series)")
    return KernelTable(name=name, kernel=kernel, measured_on="H100 80GB SXM5", sms=132, shape=kernel,
                       stream_gbps=2500.0, seqlens=SEQLENS, series=s)


def _fa2_a100() -> KernelTable:
    # Only forward+backward was published for A100 in the repository; forward and
    # backward are split with the H100 forward : forward+backward ratio of the same kernel
    # (FlashAttention-2) at the same mask, head dim and length: an assumption.
    s: dict[tuple[str, str, int], RateSeries] = {}
    for (mask, d), fb in _A100_FA2_FWDBWD.items():
        ref = _FA2_README.format(gpu="a100", mask="with causal mask" if mask == "diagonal" else "without causal mask",
                                 d=d) + ", A100 80GB SXM4"
        fwd = _scale(fb, _H100_FA2_FWD[mask, d], _H100_FA2_FWDBWD[mask, d])
        s["fwd", mask, d] = RateSeries(
            tflops=fwd, source="assumed split: " + ref + " x (H100 forward / forward+backward of FlashAttention-2)")
        s["bwd", mask, d] = RateSeries(
            tflops=_bwd_from(fb, fwd), source="derived: 2.5 / (3.5/R_fwdbwd - 1/R_fwd) from " + ref
            + " and the forward above")
    return KernelTable(name="fa2-a100", kernel="FlashAttention-2", measured_on="A100 80GB SXM4", sms=108,
                       shape="FlashAttention-2", stream_gbps=1732.0,
                       seqlens=SEQLENS, series=s)


# --- cuDNN on B200: derived from the H100 table by what bounds each pass on Blackwell ------------
# FlashAttention-4 (Zadouri, Hoehnerbach, Shah, Liu, Thakkar, Dao, arXiv 2603.05451, and its
# blog, together.ai/blog/flashattention-4): from H100 to B200 the BF16 tensor cores go from
# 1 to 2.25 PFLOP/s while the exponential units (16 per clock per SM) and shared-memory
# bandwidth (128 bytes per clock per SM) stay; on B200 the forward is bound by the
# exponentials and the backward by shared-memory traffic, which exceed the matrix products'
# time by 25 to 60% (the paper's feeds-and-speeds analysis). A kernel that kept its H100
# share of the tensor cores' time (the cuDNN series above over H100's 989.4 TFLOP/s) then
# runs at B200's 2,250 TFLOP/s over 1.25 (forward, the exponentials) and over 1.6 (backward,
# shared memory): the ends of that range, assigned so. No per-length cuDNN table was found
# published for B200; FlashAttention-4 reports up to 1613 TFLOP/s forward and 1.3x over
# cuDNN 9.13 at best, so cuDNN's best forward is at least about 1240.
_B200_PER_H100 = 2250.0 / 989.4
_B200_BOUND = {"fwd": 1.25, "bwd": 1.6}
_B200_SOURCE = ("derived: cudnn-h100's series x (2,250 / 989.4 TFLOP/s, B200 over H100 BF16 peak) / {bound} "
                "({what}: FlashAttention-4, arXiv 2603.05451, on B200 the {unit} exceeds the MMA time by 25-60%, the "
                "{end} end assumed); from: ")


def _cudnn_b200() -> KernelTable:
    h100 = _h100_table("cudnn-h100", "cuDNN", _H100_CUDNN_FWD, _H100_CUDNN_BWD_FULL)
    s: dict[tuple[str, str, int], RateSeries] = {}
    for (kind, mask, d), series in h100.series.items():
        bound = _B200_BOUND[kind]
        what = ("forward bound by the exponential unit", "exponentials", "low") if kind == "fwd" else \
            ("backward bound by shared-memory traffic", "shared-memory traffic", "high")
        s[kind, mask, d] = RateSeries(
            tflops=tuple(None if v is None else round(v * _B200_PER_H100 / bound, 1) for v in series.tflops),
            source=_B200_SOURCE.format(bound=bound, what=what[0], unit=what[1], end=what[2]) + series.source)
    return KernelTable(name="cudnn-b200", kernel="cuDNN", measured_on="B200 (derived from H100)", sms=148,
                       shape="cuDNN", stream_gbps=8000.0, seqlens=SEQLENS, series=s)


KERNEL_TABLES: dict[str, KernelTable] = {t.name: t for t in (
    _fa2_h100(), _h100_table("fa3-h100", "FlashAttention-3", _H100_FA3_FWD, _H100_FA3_BWD_FULL),
    _h100_table("cudnn-h100", "cuDNN", _H100_CUDNN_FWD, _H100_CUDNN_BWD_FULL), _fa2_a100(), _cudnn_b200())}

# How each kernel cuts a block into thread blocks (CTAs), from its source: the tile a CTA
# owns and the tile its inner loop steps over, by head dim; how many CTAs share an SM; the
# kernels of a backward call. sim.hardware.kernel_model builds a block's time from these.


@dataclass(frozen=True, kw_only=True)
class KernelShape:
    name: str
    fwd_tile: dict[int, tuple[int, int]]
    """Head dim template -> (query rows a forward CTA owns, key columns per inner-loop step)."""
    bwd_tile: dict[int, tuple[int, int]]
    """Head dim template -> (query rows per inner-loop step, key rows a backward CTA owns):
    the backward parallelises over key tiles and loops over the queries."""
    fwd_ctas_per_sm: int
    bwd_ctas_per_sm: int
    causal_fwd_tile: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Forward tiles under a causal mask where they differ from `fwd_tile`."""
    causal_bwd_tile: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Backward tiles under a causal mask where they differ from `bwd_tile`."""
    split_kv: bool = False
    """The forward splits the keys over several CTAs when the query tiles are too few to
    fill the GPU, and a combine kernel adds the parts (FlashAttention-2's heuristic)."""
    bwd_kernels: tuple[str, ...] = ("preprocess", "main", "convert_dq")
    """The kernels of one backward call, in order: 'preprocess' (rowsum(dO * O), and the
    fp32 dQ accumulator cleared), 'main', 'convert_dq' (the fp32 dQ to the input dtype)."""
    gqa_sum: bool = False
    """With fewer K/V heads than query heads the backward writes dK and dV per query head
    and sums each group after (two more reductions)."""
    gqa_accum: bool = False
    """With fewer K/V heads than query heads the backward adds each query head's dK and dV
    into fp32 accumulators of the K/V heads (cleared first: two memsets) and converts
    them after (two more kernels)."""
    source: str

    @property
    def head_dims(self) -> tuple[int, ...]:
        """The head dims the kernel is compiled for (its templates), smallest first."""
        return tuple(sorted(self.fwd_tile))


_FA2_SRC = ("Dao-AILab/flash-attention csrc/flash_attn/src/static_switch.h HEADDIM_SWITCH (head dims 32, 64, 96, "
            "128, 192, 256: a head dim runs as the next one up), flash_fwd_launch_template.h and "
            "flash_bwd_launch_template.h (commit 0251105a2fb19d2957484b7f023cd8c115286ced; vendored by torch as "
            "aten/src/ATen/native/transformers/cuda/flash_attn): sm90, no dropout: forward Flash_fwd_kernel_traits "
            "hdim32 and hdim64 <128, 128, 4 warps>, hdim96 and hdim128 <128, 64, 4 warps>, hdim192 and hdim256 "
            "<128, 64, 8 warps>; grid (query tiles, batch, heads); "
            "flash_api.cpp set_params_splitkv / num_splits_heuristic ('We multiply number of SMs by 2 to hard-code "
            "the fact that we're using 128 threads per block': two CTAs per SM; split kernel kBlockM 64, kBlockN "
            "256/128/64 by head dim); backward (>= 144 KB shared memory per block) hdim32 and hdim64 <128, 128>, "
            "hdim96 and hdim128 <64, 128>, hdim192 and hdim256 <64, 64>, 8 warps, one CTA per SM, grid (key tiles, "
            "batch, heads), run_flash_bwd_seqk_parallel: flash_bwd_dot_do_o_kernel (clears dq_accum), the main "
            "kernel, flash_bwd_convert_dq_kernel; mha_bwd sums dk_expanded/dv_expanded over each K/V group")
_FA3_SRC = ("Dao-AILab/flash-attention hopper/ (commit 0251105a2fb19d2957484b7f023cd8c115286ced): flash_api.cpp "
            "round_up_headdim (head dims 64, 96, 128, 192, 256: a head dim runs as the next one up); tile_size.h "
            "tile_size_fwd_sm90 (16-bit: hdim64 192 x 192, causal 192 x 128; hdim96 192 x 144; hdim128 128 x 176, "
            "causal 128 x 128; hdim192 128 x 112; hdim256 128 x 80) and flash_bwd_launch_template.h "
            "run_mha_bwd_hdim* (sm90: hdim64 128 x 128; hdim96 64 x 128; hdim128 80 x 128, causal 64 x 128; hdim192 "
            "64 x 96; hdim256 64 x 80), warp-specialised: one CTA (producer + two consumer warpgroups) per SM; "
            "backward preprocess, main and postprocess (dQ) kernels; with GQA (num_heads_k != num_heads) mha_bwd "
            "clears fp32 dk_accum and dv_accum (torch::zeros), the main kernel's epilogue (CollectiveEpilogueBwdGQA) "
            "adds each head's dK, dV into them, and two FlashAttnBwdPostprocessConvertdQ launches convert them")
_CUDNN_SRC = ("assumed: cuDNN's fused attention is closed source; its Hopper kernel taken as FlashAttention-3's "
              "shape (128-row query tiles and 128-key steps, one warp-specialised CTA per SM, backward over 128-key "
              "tiles in 64-row steps with preprocess and dQ conversion kernels) and FlashAttention-3's head dims "
              "(cuDNN's frontend support matrix: Hopper d <= 256); with GQA its backward reduces the per-head dK "
              "and dV over each group after the main kernel, as the backward launch chain cuDNN's frontend "
              "documents does ('SDPA Backward (SM120)', docs.nvidia.com/deeplearning/cudnn: dot preprocess, main "
              "kernel, dQ convert, GQA reduce), taken for its Hopper kernel too")

KERNEL_SHAPES: dict[str, KernelShape] = {k.name: k for k in [
    KernelShape(name="FlashAttention-2",
                fwd_tile={32: (128, 128), 64: (128, 128), 96: (128, 64), 128: (128, 64), 192: (128, 64),
                          256: (128, 64)},
                bwd_tile={32: (128, 128), 64: (128, 128), 96: (64, 128), 128: (64, 128), 192: (64, 64),
                          256: (64, 64)},
                fwd_ctas_per_sm=2, bwd_ctas_per_sm=1, split_kv=True, gqa_sum=True, source=_FA2_SRC),
    KernelShape(name="FlashAttention-3",
                fwd_tile={64: (192, 192), 96: (192, 144), 128: (128, 176), 192: (128, 112), 256: (128, 80)},
                bwd_tile={64: (128, 128), 96: (64, 128), 128: (80, 128), 192: (64, 96), 256: (64, 80)},
                causal_fwd_tile={64: (192, 128), 128: (128, 128)}, causal_bwd_tile={128: (64, 128)},
                fwd_ctas_per_sm=1, bwd_ctas_per_sm=1, gqa_accum=True, source=_FA3_SRC),
    KernelShape(name="cuDNN",
                fwd_tile={64: (128, 128), 96: (128, 128), 128: (128, 128), 192: (128, 64), 256: (128, 64)},
                bwd_tile={64: (64, 128), 96: (64, 128), 128: (64, 128), 192: (64, 64), 256: (64, 64)},
                fwd_ctas_per_sm=1, bwd_ctas_per_sm=1, gqa_sum=True, source=_CUDNN_SRC),
]}

# The per-call floor: what a call costs beside its kernels' work.
CALL_HOST_US = {"fwd": 33.3, "bwd": 36.3}
"""Host-side time of one eager attention call (Python, torch's dispatcher, the output
allocations, the launches), µs: paid in full by an isolated call, whose GPU waits for it,
and hidden behind queued work otherwise. Measured on one H200 (bench/results/gpu/h200/
block-grid.json, torch 2.11, `ringsim hw bench --device cuda`): see docs/gpu-validation.md;
`ringsim calibrate` fits it for another host."""
KERNEL_GAP_US = 1.0
"""GPU time between two kernels queued on one stream, µs: NVIDIA's 'Getting Started with
CUDA Graphs' (developer.nvidia.com/blog/cuda-graphs) times a 2.9 µs kernel at 3.8 µs each
when launched back to back without synchronising."""
OP_HOST_US = 10.0
"""Host-side time of one eager elementwise operation (the merge's), µs: assumed, between a
bare launch's ~5 µs (the same blog) and the ~20 µs NVIDIA's Nsight Systems user guide
measured for a PyTorch elementwise kernel's round trip on a V100 host."""
MERGE_KERNELS = {"fused": {"fwd": 1, "bwd": 1}, "unfused": {"fwd": 9, "bwd": 3},
                 "te": {"fwd": 2, "bwd": 2}, "torch": {"fwd": 9, "bwd": 3}, "concat": {"fwd": 2, "bwd": 3}}
"""Kernels one merge launches. Unfused, ring-flash-attention's `_update_out_and_lse`:
to(fp32), out - block_out, block_lse - lse, sigmoid, multiply, subtract, then the
statistics' subtract, logsigmoid, subtract; its backward adds dQ, dK and dV, one each.
"te": TransformerEngine's p2p (transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py at NVIDIA/TransformerEngine d0067d0): flash_attn_fwd_softmax_lse_correction
and flash_attn_fwd_out_correction, each one fused kernel (`jit_fuser`); its backward adds
dQ and the packed dK/dV, one each. "torch": torch's `_SDPAMerger` (torch 2.13.0,
distributed/tensor/experimental/_context_parallel/_attention.py), ring-flash-attention's
operations run eagerly: the same nine and three. "concat": the calls' outputs and statistics
concatenated (two torch.cat); its backward's dQ, dK and dV written into place, one each."""
MERGE_SLICE_KERNELS = {"fused": 0, "unfused": 2, "te": 0, "torch": 2, "concat": 0}
"""More kernels when the merge writes part of the output (the slice copied back; torch's
_partial_update: a torch.cat of the output and one of the statistics; TransformerEngine
corrects the second half in place)."""

# The merge of (out, lse) after each block, as bytes moved per output element and per
# (query row, head) of statistics (sim.hardware.kernel_model). "fused": one pass, reading the fp32
# accumulator and the block's output and writing the accumulator (4 + b + 4 bytes; the
# lse likewise, 12). "unfused": the merge as ring-flash-attention writes it
# (ring_flash_attn/utils.py `_update_out_and_lse`, at zhuzilin/ring-flash-attention
# 556ddaa, the commit of its README benchmark), one elementwise kernel per operation,
# which that repository's PR #87 and vllm-project/vllm-omni PR #5187 describe as running
# as several elementwise kernels: block_out.to(fp32) (b + 4), out - block_out (12),
# sigmoid(.) * (.) (8), out - (.) (12); statistics: five passes of 8 to 12 bytes (52).
MERGE_BYTES = {
    "fused": lambda b: (8 + b, 12),
    "unfused": lambda b: (36 + b, 52),
    # TransformerEngine p2p: its output stays in the input dtype (flash_attn_fwd_out_correction_init
    # returns out_init_step.dtype) and each step's correction reads the output and the step's
    # output and writes the output (3 b); per row the log-sum-exp correction reads two fp32
    # statistics and writes one (12), the output correction reads two (8)
    "te": lambda b: (3 * b, 20),
    # torch's _SDPAMerger: ring-flash-attention's operations, eager
    "torch": lambda b: (36 + b, 52),
    # no merge: each call writes its own heads, and the outputs of a rank's calls are
    # concatenated once (ring-flash-attention's llama3_flash_attn_varlen_forward:
    # torch.cat(out_list), torch.cat(lse_list)): each element read and written once in its
    # dtype, each row's fp32 statistic likewise
    "concat": lambda b: (2 * b, 8),
}
# A block computed on part of its rank's queries (zigzag's half-query blocks, stripe's
# q[:, 1:]) merges into that slice of the output. ring-flash-attention's
# `update_out_and_lse(..., slice_=...)` merges a view of the slice into new tensors and
# copies them back (`out[slice_], lse[slice_] = slice_out, slice_lse`): one more read and
# write of the fp32 slice, 8 bytes per output element and per (query row, head). A fused
# merge writes the slice in place: nothing more.
# torch's _partial_update rebuilds the whole output (and statistics) with torch.cat when a
# block covers the second of its rank's two chunks: it reads both halves and writes the
# whole, 16 bytes per element of the fp32 slice (and per row). TransformerEngine corrects
# the second half in place (a view): nothing more.
MERGE_SLICE_BYTES = {"fused": (0, 0), "unfused": (8, 8), "te": (0, 0), "torch": (16, 16), "concat": (0, 0)}
# Where a rank's output starts from nothing, its first forward merge is no merge:
# ring-flash-attention's update_out_and_lse with out None does `out = block_out.to(torch.float32)`
# and keeps a view of the block's log-sum-exp (ring_flash_attn/utils.py at
# zhuzilin/ring-flash-attention 899628238f2f5bb8c028579c89b7cd56ea451d2a), and after the last
# step the forward converts the fp32 output back, `out = out.to(q.dtype)`, the log-sum-exp again
# a view (ring_flash_attn.py, zigzag_ring_flash_attn.py, stripe_flash_attn.py); torch's
# _SDPAMerger.step likewise converts its first output (`self._out = out.to(torch.float32)`; the
# log-sum-exp is already fp32) and results() converts back (torch 2.13.0,
# distributed/tensor/experimental/_context_parallel/_attention.py). Both conversions read and
# write each element once (b + 4 bytes each), one kernel each. Both are charged to the block
# that opens the output, the rank's first forward block: it covers all the rank's queries (every
# layout's step 0 is the rank's own K/V), as the final conversion does. (bytes per output element,
# bytes per (query row, head), kernels); a merge not named here merges its first block as any other.
MERGE_OPEN = {"unfused": lambda b: (2 * (b + 4), 0, 2), "torch": lambda b: (2 * (b + 4), 0, 2)}

# H100 and H200 have the same SMs and clocks (H200 has more, faster memory); H800 is the
# H100 SXM5 die with NVLink cut to 400 GB/s. Attention tables measured on H100 apply to all.
_HOPPER_KERNELS = {"fa2": "fa2-h100", "fa3": "fa3-h100", "cudnn": "cudnn-h100"}
_HOPPER_SMS = dict(sms=132)
"""NVIDIA H100 Tensor Core GPU Architecture whitepaper: the H100 SXM5 has 132 SMs; the
H800 SXM5 and the H200 SXM are the same GH100 configuration."""
_H100_STREAM = dict(
    stream_bandwidth_gbps=2500.0,
    stream_source="NVIDIA/nccl issue #1264, p2pBandwidthLatencyTest on an HGX H100 SXM (80GB HBM3): the "
                  "device-local copy, read and write counted (the sample's `gb *= 2`), 2,475-2,515 GB/s "
                  "on the eight GPUs: 2,500 GB/s (75% of 3,350); H800 SXM5 has the same HBM3")

GPU_PRESETS: dict[str, GpuPreset] = {p.name: p for p in [
    GpuPreset(name="A100-SXM-80GB", peak_tflops={"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
              memory_gb=80.0, memory_bandwidth_gbps=2039.0, kernels={"fa2": "fa2-a100"}, sms=108,
              stream_bandwidth_gbps=1732.0,
              stream_source="te42kyfo/gpu-benches cuda-stream/a100_80.txt: 'scale' (A[i] = B[i] * c) at full "
                            "occupancy, 1,732 GB/s (85% of 2,039)",
              source="NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): BF16/FP16 312 TFLOPS dense, "
                     "FP32 19.5 TFLOPS, 80 GB HBM2e at 2,039 GB/s; NVIDIA A100 Tensor Core GPU Architecture "
                     "whitepaper: 108 SMs"),
    GpuPreset(name="A100-SXM-40GB", peak_tflops={"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
              memory_gb=40.0, memory_bandwidth_gbps=1555.0, kernels={"fa2": "fa2-a100"}, sms=108,
              stream_bandwidth_gbps=1381.0,
              stream_source="te42kyfo/gpu-benches gpu-stream/a100_40.txt: 'scale' at full occupancy, "
                            "1,381 GB/s (89% of 1,555)",
              source="NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM): BF16/FP16 312 TFLOPS dense, "
                     "FP32 19.5 TFLOPS, 40 GB HBM2 at 1,555 GB/s; NVIDIA A100 Tensor Core GPU Architecture "
                     "whitepaper: 108 SMs"),
    GpuPreset(name="H100-SXM", peak_tflops={"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
              memory_gb=80.0, memory_bandwidth_gbps=3350.0, kernels=_HOPPER_KERNELS, **_HOPPER_SMS, **_H100_STREAM,
              source="NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16/FP16 1979 TFLOPS with sparsity = 989.4 "
                     "dense, FP32 66.9 TFLOPS, 80 GB HBM3 at 3.35 TB/s"),
    GpuPreset(name="H800-SXM", peak_tflops={"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
              memory_gb=80.0, memory_bandwidth_gbps=3350.0, kernels=_HOPPER_KERNELS, **_HOPPER_SMS, **_H100_STREAM,
              source="NVIDIA H800 Tensor Core GPU (SXM5) product brief: the H100 SXM5 compute (BF16/FP16 1979 "
                     "TFLOPS with sparsity = 989.4 dense, FP32 67 TFLOPS), 80 GB HBM3 at 3.35 TB/s, NVLink 400 GB/s"),
    GpuPreset(name="H200", peak_tflops={"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
              memory_gb=141.0, memory_bandwidth_gbps=4800.0, kernels=_HOPPER_KERNELS, **_HOPPER_SMS,
              stream_bandwidth_gbps=3165.0,
              stream_source="te42kyfo/gpu-benches gpu-stream/h200.txt: 'scale' at full occupancy, "
                            "3,165 GB/s (66% of 4,800)",
              source="NVIDIA H200 Tensor Core GPU datasheet (SXM): BF16/FP16 1979 TFLOPS with sparsity = 989.4 "
                     "dense, FP32 67 TFLOPS, 141 GB HBM3e at 4.8 TB/s"),
    GpuPreset(name="A100-PCIe-80GB", peak_tflops={"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
              memory_gb=80.0, memory_bandwidth_gbps=1935.0, kernels={"fa2": "fa2-a100"}, sms=108,
              source="NVIDIA A100 Tensor Core GPU datasheet (A100 80GB PCIe): BF16/FP16 312 TFLOPS dense, FP32 "
                     "19.5 TFLOPS, 80 GB HBM2e at 1,935 GB/s, 300 W; the SXM card's chip and boost clock, so "
                     "FlashAttention-2's A100 table (measured on SXM4) is assumed to hold at 300 W"),
    # Flat model (peak x efficiency, the efficiency assumed): no per-mask, per-length
    # attention table was found published for these PCIe cards.
    GpuPreset(name="H100-PCIe", peak_tflops={"bf16": 756.0, "fp16": 756.0, "fp32": 51.2},
              memory_gb=80.0, memory_bandwidth_gbps=2000.0, sms=114,
              source="NVIDIA H100 Tensor Core GPU datasheet (PCIe): BF16/FP16 1,513 TFLOPS with sparsity = 756 "
                     "dense, FP32 51.2 TFLOPS, 80 GB HBM2e at 2 TB/s, PCIe 5.0 x16; 114 SMs (NVIDIA H100 "
                     "Tensor Core GPU Architecture whitepaper)"),
    GpuPreset(name="L40S", peak_tflops={"bf16": 362.05, "fp16": 362.05, "fp32": 91.6},
              memory_gb=48.0, memory_bandwidth_gbps=864.0, sms=142,
              source="NVIDIA L40S datasheet: BF16/FP16 Tensor 733 TFLOPS with sparsity = 362.05 dense, FP32 91.6 "
                     "TFLOPS, 48 GB GDDR6 at 864 GB/s, PCIe 4.0 x16; 142 SMs"),
    GpuPreset(name="L20", peak_tflops={"bf16": 119.5, "fp16": 119.5, "fp32": 59.8},
              memory_gb=48.0, memory_bandwidth_gbps=864.0, sms=92,
              source="NVIDIA L20 product brief: BF16/FP16 Tensor 239 TFLOPS with sparsity = 119.5 dense, FP32 "
                     "59.8 TFLOPS, 48 GB GDDR6 at 864 GB/s, PCIe 4.0 x16, 11,776 CUDA cores (92 SMs of 128 "
                     "on Ada)"),
    GpuPreset(name="RTX-4090", peak_tflops={"bf16": 165.2, "fp16": 165.2, "fp32": 82.6},
              memory_gb=24.0, memory_bandwidth_gbps=1008.0, sms=128,
              source="NVIDIA Ada GPU architecture whitepaper (GeForce RTX 4090): FP16/BF16 Tensor with FP32 "
                     "accumulate 165.2 TFLOPS dense (330.4 with sparsity), FP32 82.6 TFLOPS, 24 GB GDDR6X at "
                     "1,008 GB/s, 128 SMs, PCIe 4.0 x16; GeForce cards do not allow peer-to-peer"),
    # B200 runs cuDNN's fused attention (the kernel PyTorch's SDPA and TransformerEngine pick on
    # it) from a table derived from H100's by what bounds each pass on Blackwell (cudnn-b200).
    GpuPreset(name="B200", peak_tflops={"bf16": 2250.0, "fp16": 2250.0, "fp32": 75.0},
              memory_gb=180.0, memory_bandwidth_gbps=8000.0, kernels={"cudnn": "cudnn-b200"}, sms=148,
              source="NVIDIA HGX B200 datasheet (per GPU): FP16/BF16 4.5 PFLOPS with sparsity = 2.25 dense, "
                     "FP32 75 TFLOPS, 180 GB HBM3e at 8 TB/s; 148 SMs (Dao-AILab/flash-attention "
                     "flash_attn/cute/prepare_scheduler.py, commit 0251105: 'e.g. 148/128', B200's SM count)"),
    # No per-mask, per-length attention table was found published for this one: the flat
    # model applies (peak x efficiency).
    GpuPreset(name="MI300X", peak_tflops={"bf16": 1307.4, "fp16": 1307.4, "fp32": 163.4},
              memory_gb=192.0, memory_bandwidth_gbps=5300.0,
              source="AMD Instinct MI300X datasheet: FP16/BF16 1307.4 TFLOPS dense, FP32 vector 163.4 TFLOPS, "
                     "192 GB HBM3 at 5.3 TB/s"),
]}

GPU_ALIASES = {"A100-SXM": "A100-SXM-80GB", "H800": "H800-SXM", "H100": "H100-SXM", "A100-PCIe": "A100-PCIe-80GB",
               "4090": "RTX-4090"}

# Latencies: typical small-message point-to-point times reported for NCCL/RCCL on each
# fabric (order of magnitude only; an assumption to be replaced by calibration).
LINK_PRESETS: dict[str, LinkPreset] = {p.name: p for p in [
    LinkPreset(name="nvlink3", bandwidth_gbps=300.0, latency_us=3.0,
               source="NVIDIA A100 datasheet: NVLink 600 GB/s total = 300 GB/s per direction"),
    LinkPreset(name="nvlink4", bandwidth_gbps=450.0, latency_us=3.0,
               source="NVIDIA H100/H200 SXM datasheet: NVLink 900 GB/s total = 450 GB/s per direction"),
    LinkPreset(name="nvlink-h800", bandwidth_gbps=200.0, latency_us=3.0,
               source="NVIDIA H800 SXM5 product brief: NVLink 400 GB/s total = 200 GB/s per direction"),
    LinkPreset(name="nvlink5", bandwidth_gbps=900.0, latency_us=3.0,
               source="NVIDIA HGX B200 datasheet: NVLink 1.8 TB/s total = 900 GB/s per direction"),
    LinkPreset(name="xgmi-mi300x", bandwidth_gbps=64.0, latency_us=4.0,
               source="AMD MI300X datasheet: 896 GB/s aggregate bidirectional over 7 Infinity Fabric links = "
                      "64 GB/s per direction per peer"),
    LinkPreset(name="ib-ndr", bandwidth_gbps=50.0, latency_us=5.0,
               source="NVIDIA ConnectX-7 / Quantum-2 InfiniBand NDR: 400 Gb/s per port per direction = 50 GB/s"),
    LinkPreset(name="ib-hdr", bandwidth_gbps=25.0, latency_us=5.0,
               source="NVIDIA ConnectX-6 / Quantum InfiniBand HDR: 200 Gb/s per port per direction = 25 GB/s"),
    LinkPreset(name="pcie3", bandwidth_gbps=PCIE_X16_GBPS[3], latency_us=5.0,
               source="PCI-SIG PCIe 3.0 x16: 8 GT/s x 16 lanes, 128b/130b = 15.75 GB/s per direction"),
    LinkPreset(name="pcie4", bandwidth_gbps=PCIE_X16_GBPS[4], latency_us=5.0,
               source="PCI-SIG PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b = 31.5 GB/s per direction"),
    LinkPreset(name="pcie5", bandwidth_gbps=PCIE_X16_GBPS[5], latency_us=5.0,
               source="PCI-SIG PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b = 63 GB/s per direction"),
]}

LAUNCH_OVERHEAD_US = 5.0
"""Flat model: fixed cost per block (its attention kernel and merge launches and tails), µs: an
assumption of a few µs per launch, the order NVIDIA's 'Getting Started with CUDA Graphs'
(developer.nvidia.com/blog/cuda-graphs) gives for launching a kernel on a stream."""


def gpu_preset(name: str) -> GpuPreset:
    for key, p in GPU_PRESETS.items():
        if key.lower() == name.lower():
            return p
    for alias, key in GPU_ALIASES.items():
        if alias.lower() == name.lower():
            return GPU_PRESETS[key]
    raise RingsimError(f"unknown GPU preset {name!r}; choose from {', '.join(GPU_PRESETS)}")


def link_preset(name: str) -> LinkPreset:
    for key, p in LINK_PRESETS.items():
        if key.lower() == name.lower():
            return p
    raise RingsimError(f"unknown link preset {name!r}; choose from {', '.join(LINK_PRESETS)}")


@dataclass(frozen=True, kw_only=True)
class ClusterPreset:
    """A common kind of node: its GPUs, the link inside it and the NICs between nodes."""

    name: str
    gpu: str
    """A GPU preset."""
    link: str
    """The link preset inside a node (each GPU's own port, per direction)."""
    inter_link: str
    """The link preset of one NIC (per direction)."""
    gpus_per_node: int
    nics_per_node: int
    pcie: Pcie | None = None
    """The PCIe fabric inside a node (sim.hardware.pcie); None: NVLink through NVSwitch."""
    source: str


CLUSTER_PRESETS: dict[str, ClusterPreset] = {p.name: p for p in [
    ClusterPreset(name="dgx-h100", gpu="H100-SXM", link="nvlink4", inter_link="ib-ndr", gpus_per_node=8,
                  nics_per_node=8,
                  source="NVIDIA DGX H100 datasheet: 8x H100 SXM5 on NVLink 4 through NVSwitch (900 GB/s per GPU), "
                         "8x single-port ConnectX-7 400 Gb/s InfiniBand NDR for the compute fabric (one per GPU)"),
    ClusterPreset(name="dgx-a100", gpu="A100-SXM-80GB", link="nvlink3", inter_link="ib-hdr", gpus_per_node=8,
                  nics_per_node=8,
                  source="NVIDIA DGX A100 datasheet: 8x A100 SXM4 on NVLink 3 through NVSwitch (600 GB/s per GPU), "
                         "8x single-port ConnectX-6 200 Gb/s InfiniBand HDR for the compute fabric (one per GPU)"),
    ClusterPreset(name="pcie-a100", gpu="A100-PCIe-80GB", link="pcie4", inter_link="ib-hdr", gpus_per_node=8,
                  nics_per_node=2,
                  pcie=Pcie(gen=4, gpus_per_switch=1, gpus_per_socket=4, p2p="switch", socket_link="xgmi"),
                  source="an 8 x A100 80GB PCIe server on two AMD EPYC sockets, every GPU on its own PCIe 4.0 x16 "
                         "root port, 4 per socket (the bus IDs 0x01 to 0xe1 and the EPYC 7543 of NVIDIA/nccl issue "
                         "#841); NCCL's default peer-to-peer level (through PCIe switches only) stages every pair "
                         "through host memory; two HDR NICs per node, an assumption"),
    ClusterPreset(name="pcie-l20", gpu="L20", link="pcie4", inter_link="ib-hdr", gpus_per_node=8, nics_per_node=2,
                  pcie=Pcie(gen=4, gpus_per_switch=2, gpus_per_socket=4, p2p="switch", socket_link="upi-spr"),
                  source="an 8 x L20 server: `nvidia-smi topo -m` of NVIDIA/nccl issue #1817 (GPU pairs PIX under "
                         "one PCIe 4.0 switch, two switches per socket NODE, the sockets SYS; 48 cores per socket, "
                         "a Sapphire Rapids Xeon); NCCL's default peer-to-peer level: P2P under a switch, every "
                         "other pair through host memory; two HDR NICs per node, an assumption"),
    ClusterPreset(name="pcie-4090", gpu="RTX-4090", link="pcie4", inter_link="ib-hdr", gpus_per_node=8,
                  nics_per_node=2,
                  pcie=Pcie(gen=4, gpus_per_switch=1, gpus_per_socket=4, p2p="off", socket_link="xgmi"),
                  source="an 8 x RTX 4090 server: every GPU on its own PCIe 4.0 x16 root port (bus IDs 0x16 to 0xd8 "
                         "of NVIDIA/nccl issue #1530), 4 per socket on two AMD EPYC sockets (an assumption); "
                         "GeForce cards do not allow peer-to-peer, so every pair goes through host memory; two HDR "
                         "NICs per node, an assumption"),
    ClusterPreset(name="pcie-h100", gpu="H100-PCIe", link="pcie5", inter_link="ib-ndr", gpus_per_node=8,
                  nics_per_node=4,
                  pcie=Pcie(gen=5, gpus_per_switch=4, gpus_per_socket=4, p2p="switch", socket_link="upi-spr"),
                  source="an 8 x H100 PCIe server with the NVLink bridges off: four GPUs under one PCIe 5.0 switch "
                         "per Sapphire Rapids socket (an assumption: the common dual-root layout), NCCL's default "
                         "peer-to-peer level (under a switch); four NDR NICs per node, an assumption"),
]}


def cluster_preset(name: str) -> ClusterPreset:
    for key, p in CLUSTER_PRESETS.items():
        if key.lower() == name.lower():
            return p
    raise RingsimError(f"unknown cluster preset {name!r}; choose from {', '.join(CLUSTER_PRESETS)}")
