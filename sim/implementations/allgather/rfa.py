"""ring-flash-attention's llama3_flash_attn_varlen_func (zhuzilin/ring-flash-attention at
899628238f2f5bb8c028579c89b7cd56ea451d2a, ring_flash_attn/llama3_flash_attn_varlen.py): the
all-gather scheme with head groups of heads_k_stride K/V heads.

Forward, per head group: the next group's K and V slices made contiguous (two copies) and
all-gathered (two all_gather_into_tensor, async on NCCL's stream), comm.wait() on the
group's own gather, then one flash_attn_varlen forward call of the group's query heads
against the K/V its queries need (local_k_slice). The calls write disjoint heads: nothing
is merged; after the last group torch.cat joins the outputs and the log-sum-exps
(sim.hardware.presets.MERGE_BYTES 'concat'). Backward, per group: the gather again, one
varlen backward, dK/dV reduce-scattered (reduce_scatter_tensor, two).
"""

from sim.implementations.base import Implementation

IMPLEMENTATION = Implementation(
    library="rfa",
    title="ring-flash-attention llama3_flash_attn_varlen_func",
    source="zhuzilin/ring-flash-attention 899628238f2f5bb8c028579c89b7cd56ea451d2a: "
           "ring_flash_attn/llama3_flash_attn_varlen.py (llama3_flash_attn_varlen_forward/_backward); utils.py "
           "(AllGatherComm)",
    layouts=("contiguous", "doc-contiguous"),
    merge="concat",
    # forward per group: 2 contiguous copies, 2 all-gathers, 2 waits; backward: those, the
    # log-sum-exp slice made contiguous, 2 reduce-scatters
    host_ops={"fwd": 6, "bwd": 9},
    steps=("k[:, group].contiguous(), v[:, group].contiguous(); 2 x all_gather_into_tensor of the next group",
           "comm.wait() on this group's gathers (2 handles)",
           "one flash_attn_varlen forward call: the group's query heads against local_k_slice of the gathered K/V",
           "after the last group: torch.cat of the outputs and of the log-sum-exps (2 kernels, 2 bytes read and "
           "written per bf16 element)"),
    not_modelled=("the copies that make each group's K/V slices contiguous before the gather are not played",),
)
