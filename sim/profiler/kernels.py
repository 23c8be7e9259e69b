"""What each GPU kernel and CPU operator of a profiler trace is: one table of name patterns.

A Kineto trace names kernels as the compiler mangled them (FlashAttention's `flash_fwd_kernel`,
cuBLAS's `sm90_xmma_gemm_...`, NCCL's `ncclDevKernel_AllReduce_Sum_f16_RING_LL`, ROCm's
`Cijk_...` Tensile GEMMs and `aiter::fmha_fwd_...`). `KERNEL_PATTERNS` is the one place that
says which family each belongs to, first match wins; a name no row matches is `other` and is
reported as unknown (Run.unknown_kernels), never dropped. The kinds are finer than HTA's
(computation / communication / memory, sim.profiler.breakdown), which the breakdown keeps
for its numbers.
"""

from __future__ import annotations

import re
from functools import lru_cache

GPU_KINDS = ("attention_fwd", "attention_bwd", "gemm", "p2p_send", "p2p_recv", "p2p", "all_gather",
             "reduce_scatter", "all_reduce", "all_to_all", "broadcast", "collective_other", "memcpy",
             "memset", "other")
"""Kinds of GPU rows."""

CPU_KINDS = ("cpu_op", "cpu_attention_fwd", "cpu_attention_bwd", "cpu_gemm", "cpu_comm", "runtime",
             "annotation", "step")
"""Kinds of CPU rows."""

ATTENTION_KINDS = ("attention_fwd", "attention_bwd")
COMM_KINDS = ("p2p_send", "p2p_recv", "p2p", "all_gather", "reduce_scatter", "all_reduce", "all_to_all",
              "broadcast", "collective_other")

# (kind, pattern), searched in order with re.search; the first match names the kernel. A row
# whose kind is "other" is a family known to be neither attention, GEMM nor communication
# (elementwise, reductions, norms, fused Triton pointwise kernels): known, so not reported.
KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    # -- communication: NCCL (ncclKernel_* up to 2.18, ncclDevKernel_* from 2.19) and RCCL,
    # which keeps NCCL's names (NVIDIA/nccl src/device/generate.py; ROCm/rccl). SendRecv
    # before Send and Recv: it contains both.
    ("p2p", r"^nccl\w*Kernel_SendRecv|^ncclDevKernel_SendRecv"),
    ("p2p_send", r"^nccl\w*Kernel_Send"),
    ("p2p_recv", r"^nccl\w*Kernel_Recv"),
    ("all_gather", r"^nccl\w*Kernel_AllGather"),
    ("reduce_scatter", r"^nccl\w*Kernel_ReduceScatter"),
    ("all_reduce", r"^nccl\w*Kernel_AllReduce"),
    ("all_to_all", r"^nccl\w*Kernel_AllToAll"),
    ("broadcast", r"^nccl\w*Kernel_Broadcast"),
    ("collective_other", r"^nccl\w*Kernel"),  # Reduce, Generic (RCCL), ...
    # -- fused Triton kernels from torch.compile name the ops they fuse (an `addmm` or
    # `fmha_v3_fwd` beside the pointwise ops around them) but are pointwise or reductions
    # themselves: torch/_inductor/codegen/triton.py names them triton_{poi,red,per}_fused_*
    ("other", r"^triton_(poi|red|per)_"),
    # -- attention backward before forward: several backward kernels carry "fwd"-free names
    # that would otherwise fall to the forward's broader patterns
    ("attention_bwd", r"flash_bwd|FlashAttn\w*Bwd|flash::\w*bwd"),  # FlashAttention 2 and 3, pytorch_flash::
    ("attention_bwd", r"(?i)fmha_?bwd|fmhabwd|fmha\w*bprop|sdpa\w*bprop|fmha_cutlassB"),  # CK, aiter, cuDNN
    ("attention_bwd", r"(?i)efficient_attention_backward|attention_kernel_backward|_attn_bwd|attn_bwd"),
    ("attention_bwd", r"(?i)fused_?attn\w*(bwd|bprop|backward)|flash_attn\w*backward"),  # TransformerEngine
    ("attention_fwd", r"flash_fwd|FlashAttn\w*Fwd|flash::\w*fwd"),
    ("attention_fwd", r"(?i)fmha_?fwd|fmhafwd|fmha\w*fprop|sdpa\w*fprop|fmha_cutlassF|fmha_v2"),
    ("attention_fwd", r"(?i)efficient_attention_forward|attention_kernel_batched|_attn_fwd|^attn_fwd"),
    ("attention_fwd", r"(?i)fused_?attn\w*(fwd|fprop|forward)|flash_attn\w*forward"),
    # -- GEMMs: cuBLAS (ampere_*gemm, sm80/sm90 xmma, nvjet from CUDA 12.8), CUTLASS,
    # hipBLASLt / Tensile (Cijk_), CK's gridwise GEMMs, Triton's mm templates
    ("gemm", r"(?i)gemm|^nvjet|^Cijk_|^Custom_Cijk|cutlass\w*tensorop|^triton_tem_fused_\w*mm|gemv|"
             r"splitKreduce_kernel|ReduceSplitK|^magma_"),  # split-K's reduction finishes its GEMM
    # -- known families that are none of the above
    ("other", r"^void at::native::|^void (at::|c10::|\(anonymous namespace\)::)|^at::native::"),
    ("other", r"^triton_|^cudnn::|^void cudnn::|^void cub::|^cub::|^batched_transpose|^Memcpy|^Memset"),
    # cuDNN's kernel library (cask) and MIOpen's tensor and im2col kernels
    ("other", r"cask_cudnn|computeOffsetsKernel|^Im2d2Col|^SubTensorOp|^MIOpen"),
    ("other", r"(?i)softmax|layer_?norm|rms_?norm|group_?norm|elementwise|reduce_kernel|rotary|rope|"
              r"transpose|copy|fill|gather|scatter|dropout|cross_entropy|embedding|index|cat_|adam|"
              r"multi_tensor_apply|vectorized|unrolled|topk|sort|sync|memset|memcpy|conv|pooling|"
              r"upsample|interpolate|bn_|batch_norm|im2col|col2im|gelu|silu|relu|swiglu|"
              r"cast|quantize|amax"),
)

_COMPILED = tuple((kind, re.compile(pattern)) for kind, pattern in KERNEL_PATTERNS)

# Collective names record_param_comms and NCCL's kernel args give (torch/csrc/distributed/c10d
# ParamCommsUtils, the "Collective name" arg), for a kernel whose name does not say
# (RCCL's ncclDevKernel_Generic)
_COLLECTIVE_KIND = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "allgather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all", "broadcast": "broadcast", "send": "p2p_send", "recv": "p2p_recv",
    "recvanysource": "p2p_recv",
}


def collective_kind(collective_name: str) -> str | None:
    """The kind a record_param_comms / NCCL "Collective name" arg names, or None."""
    return _COLLECTIVE_KIND.get(collective_name.strip().lower())


@lru_cache(maxsize=1 << 16)
def classify_kernel(name: str) -> tuple[str, bool]:
    """(kind, known) of a GPU kernel's name: known is False when no row of KERNEL_PATTERNS
    matched (the kind is then "other" and the name is reported)."""
    for kind, pattern in _COMPILED:
        if pattern.search(name):
            return kind, True
    return "other", False


def classify_gpu(cat: str, name: str) -> tuple[str, bool]:
    """(kind, known) of a GPU row from its Kineto category and name."""
    if cat == "gpu_memcpy":
        return "memcpy", True
    if cat == "gpu_memset":
        return "memset", True
    if cat == "cuda_sync":
        return "other", True
    return classify_kernel(name)


# torch's SDPA and attention operators as CPU ops record them (aten/src/ATen/native/
# native_functions.yaml; flash_attn's and TransformerEngine's autograd functions)
_CPU_ATTENTION_BWD = re.compile(
    r"^aten::_scaled_dot_product_\w*attention\w*_backward|^aten::_flash_attention_backward|"
    r"^aten::_efficient_attention_backward|^aten::_cudnn_attention_backward|"
    r"(?i:flash_?attn\w*(backward|bwd))|FusedAttnFunc\w*Backward|FlashAttn\w*Backward|"
    r"ScaledDotProduct\w*Backward")
_CPU_ATTENTION_FWD = re.compile(
    r"^aten::_scaled_dot_product_\w*attention|^aten::scaled_dot_product_attention|"
    r"^aten::_flash_attention_forward|^aten::_efficient_attention_forward|^aten::_fused_sdp_choice|"
    r"(?i:flash_?attn\w*(forward|fwd|func))|FusedAttnFunc|FlashAttnFunc|^te::fused_attn")
_CPU_GEMM = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|_addmm_activation|"
                       r"_int_mm|einsum)$")
_CPU_COMM = re.compile(r"^record_param_comms$|^gloo:|^nccl:|^c10d::|^c10d_functional::|^_c10d_functional::|"
                       r"^ProcessGroup|^gloo::")
_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")


@lru_cache(maxsize=1 << 16)
def classify_cpu(cat: str, name: str) -> str:
    """The kind of a CPU row (a ProfilerStep, a CUDA runtime or driver call, a communication
    op, an attention or GEMM op, another op or an annotation) from its category and name."""
    if _STEP.match(name):
        return "step"
    if cat in ("cuda_runtime", "cuda_driver", "runtime"):
        return "runtime"
    if _CPU_COMM.search(name):
        return "cpu_comm"
    if cat == "user_annotation":
        return "annotation"
    if _CPU_ATTENTION_BWD.search(name):
        return "cpu_attention_bwd"
    if _CPU_ATTENTION_FWD.search(name):
        return "cpu_attention_fwd"
    if _CPU_GEMM.match(name):
        return "cpu_gemm"
    return "cpu_op"


def step_number(name: str) -> int | None:
    """The N of a `ProfilerStep#N` annotation, else None."""
    m = _STEP.match(name)
    return int(m.group(1)) if m else None
