"""TransformerEngine's context parallelism, cp_comm_type "a2a" (Ulysses): AttnFuncWithCPAndQKVOA2A
in NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
at d0067d0da6cb01811b8072a7d304f0e00344ce2b.

flash_attn_a2a_communicate turns Q, K and V from token shards to head shards: per tensor a
view to heads, one all_to_all_single, then on cp_stream (waited on) the chunks reordered
(reorder_seq_chunks_for_a2a_before_attn: an index_select, a copy) and moved to the
sequence dim; one attention call over the whole sequence on the rank's heads (nothing to
merge: the call's output is the output); the output back the same way (one all-to-all,
its reorder).
"""

from sim.implementations.base import Implementation

IMPLEMENTATION = Implementation(
    library="te",
    title="TransformerEngine a2a (AttnFuncWithCPAndQKVOA2A)",
    source="NVIDIA/TransformerEngine d0067d0da6cb01811b8072a7d304f0e00344ce2b: "
           "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py "
           "(AttnFuncWithCPAndQKVOA2A, flash_attn_a2a_communicate, reorder_seq_chunks_for_a2a_before_attn)",
    merge="fused",
    # Q, K, V and the output: per tensor an all_to_all_single, its wait, the reorder
    # (index_select) and a movedim copy: 4 tensors x 4
    host_ops={"fwd": 16, "bwd": 24},
    steps=("per Q, K, V: view to heads, all_to_all_single, on cp_stream: wait, index_select of the sequence "
           "chunks (load-balanced order), movedim",
           "one attention call over the whole sequence on the rank's heads (nothing merged)",
           "the output back: view, all_to_all_single, wait, reorder"),
    not_modelled=("the reorder copies (index_select) of Q, K, V and the output are not played",),
)
