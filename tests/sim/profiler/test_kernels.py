"""The kernel-name table against names as the libraries emit them (FlashAttention 2 and 3,
torch's pytorch_flash, cuDNN's SDPA, memory-efficient attention, AMD's aiter and CK, cuBLAS,
CUTLASS, hipBLASLt, NCCL and RCCL), and every kernel of the vendored traces accounted for."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from sim.profiler.kernels import GPU_KINDS, classify_cpu, classify_gpu, classify_kernel, step_number
from sim.profiler.reader import read_run

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"

NAMES = {
    # FlashAttention 2 (Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_kernel.h, flash_bwd_kernel.h)
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, "
    "false>(Flash_fwd_params)": "attention_fwd",
    "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, true>(Flash_fwd_params)":
        "attention_fwd",
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8>, true>"
    "(Flash_bwd_params)": "attention_bwd",
    "void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128>>(Flash_bwd_params)": "attention_bwd",
    "void flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128>>(Flash_bwd_params, int)": "attention_bwd",
    # torch's copy of it (the H100 trace)
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
    "cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)": "attention_fwd",
    # FlashAttention 3 (hopper/flash_fwd_launch_template.h)
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::"
    "CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>>>>>(flash::FlashAttnFwdSm90::Params)": "attention_fwd",
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<flash::"
    "CollectiveMainloopBwdSm90<2>>>>(flash::FlashAttnBwdSm90::Params)": "attention_bwd",
    # cuDNN's fused SDPA (cudnn-frontend), which TransformerEngine's fused attention runs
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0":
        "attention_fwd",
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x128_4x1x1_cga1x1x1_kernel0_0":
        "attention_bwd",
    # memory-efficient attention (xformers' kernels as torch ships them)
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
    "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)": "attention_fwd",
    "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::"
    "Sm80, cutlass::bfloat16_t, true, false, true, 64, 64, 64, false>::Params)": "attention_bwd",
    # AMD: aiter and CK tile, Triton attention (the MI300X trace)
    "aiter::fmha_fwd_hd128_bf16_rtz": "attention_fwd",
    "aiter::fmha_bwd_hd128_bf16_a16_rtne": "attention_bwd",
    "ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<>>": "attention_fwd",
    "ck_tile::FmhaBwdDQDKDVKernel<>": "attention_bwd",
    "attn_fwd": "attention_fwd",
    # GEMMs
    "ampere_fp16_s1688gemm_fp16_256x64_ldg8_f2f_tn": "gemm",
    "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x256x64_stage3_warpsize2x4x1_tensor16x8x16_kernel": "gemm",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
    "kernel__5x_cublas": "gemm",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN": "gemm",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)": "gemm",
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x64x128_MI16x16x1_SN_LDSB1_AFC1": "gemm",
    "triton_tem_fused_mm_0": "gemm",
    # NCCL 2.17 (ncclKernel_*) and 2.19+ (ncclDevKernel_*), RCCL
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": "all_reduce",
    "ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": "all_reduce",
    "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)": "p2p",
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": "p2p",
    "ncclKernel_Send_RING_SIMPLE_Sum_int8_t": "p2p_send",
    "ncclKernel_Recv_RING_SIMPLE_Sum_int8_t": "p2p_recv",
    "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": "all_gather",
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": "reduce_scatter",
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": "broadcast",
    "ncclDevKernel_AllToAllPivot_RING_SIMPLE_Sum_int8_t": "all_to_all",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)": "collective_other",
    # torch.compile's fused pointwise kernels that name the ops around them
    "triton_red_fused__to_copy_add_addmm_as_strided_fmha_v3_fwd_mean_mul_neg_pow_rsqrt_stack_unbind_"
    "unsqueeze_view_24": "other",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
    "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)": "other",
}


@pytest.mark.parametrize("name,kind", list(NAMES.items()))
def test_library_names(name, kind):
    assert classify_kernel(name) == (kind, True)


def test_memory_by_category_and_unknown_names():
    assert classify_gpu("gpu_memcpy", "Memcpy DtoD (Device -> Device)") == ("memcpy", True)
    assert classify_gpu("gpu_memset", "Memset (Device)") == ("memset", True)
    assert classify_kernel("my_own_kernel_v2") == ("other", False)


@pytest.mark.parametrize("cat,name,kind", [
    ("cpu_op", "aten::_scaled_dot_product_flash_attention_for_cpu", "cpu_attention_fwd"),
    ("cpu_op", "aten::_scaled_dot_product_flash_attention_for_cpu_backward", "cpu_attention_bwd"),
    ("cpu_op", "aten::_scaled_dot_product_efficient_attention", "cpu_attention_fwd"),
    ("cpu_op", "aten::_efficient_attention_backward", "cpu_attention_bwd"),
    ("cpu_op", "FlashAttnFuncBackward", "cpu_attention_bwd"),
    ("cpu_op", "aten::mm", "cpu_gemm"),
    ("cpu_op", "aten::addmm", "cpu_gemm"),
    ("cpu_op", "aten::add", "cpu_op"),
    ("cpu_op", "record_param_comms", "cpu_comm"),
    ("cpu_op", "gloo:all_reduce", "cpu_comm"),
    ("user_annotation", "nccl:all_reduce", "cpu_comm"),
    ("user_annotation", "## forward ##", "annotation"),
    ("user_annotation", "ProfilerStep#3", "step"),
    ("cpu_op", "ProfilerStep#12", "step"),
    ("cuda_runtime", "cudaLaunchKernel", "runtime"),
    ("cuda_driver", "cuLaunchKernel", "runtime"),
])
def test_cpu_rows(cat, name, kind):
    assert classify_cpu(cat, name) == kind


def test_step_numbers():
    assert step_number("ProfilerStep#15") == 15
    assert step_number("ProfilerStep#x") is None


@pytest.mark.parametrize("files,expected", [
    (["tracelens-qwen0.5b-h100.json.gz"], {"attention_fwd": 34}),  # the README's 34 flash calls
    (["tracelens-capture-mi300x.json.gz"], {"attention_fwd": 57 + 13}),  # aiter fmha_fwd and Triton attn_fwd
    (["hta-nccl-a100.rank0-of-2.json.gz"], {"all_reduce": 15, "broadcast": 6}),
    ([f"megatron-tp8-a100.rank{i}.json.gz" for i in range(8)], {"all_reduce": 8 * 84}),
])
def test_vendored_traces_fully_classified(files, expected):
    run = read_run([TRACES / f for f in files])
    gpu = run.events.on_gpu
    kinds = Counter(run.events.kind[gpu].tolist())
    assert set(kinds) <= set(GPU_KINDS)
    for kind, n in expected.items():
        assert kinds[kind] == n
    assert run.unknown_kernels == {}, run.unknown_kernels
