"""TransformerEngine's context parallelism, cp_comm_type "all_gather": AttnFuncWithCPAndKVAllGather
in NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
at d0067d0da6cb01811b8072a7d304f0e00344ce2b.

K/V all-gathered once (gather_along_first_dim), then the rank's two chunks (i and 2N-1-i,
the zigzag pairs of the all-gather scheme) each attended, on two streams, by one attention
call against the K/V before it (get_kv_seq_info_after_all_gather); each chunk's output is
copied into its half of the output (out_f16[:, i].copy_(out_per_step[i])): nothing is
merged (sim.hardware.presets.MERGE_BYTES 'concat'). Backward: the gather again, one call per
chunk, dK/dV reduce-scattered.
"""

from sim.implementations.base import Implementation

IMPLEMENTATION = Implementation(
    library="te",
    title="TransformerEngine all_gather (AttnFuncWithCPAndKVAllGather)",
    source="NVIDIA/TransformerEngine d0067d0da6cb01811b8072a7d304f0e00344ce2b: "
           "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py "
           "(AttnFuncWithCPAndKVAllGather)",
    merge="concat",
    # per chunk: q.select(...).contiguous(), a stream switch waited on, the output copy
    host_ops={"fwd": 3, "bwd": 4},
    steps=("once: gather_along_first_dim of K/V (one all-gather)",
           "per local chunk, on stream i: q chunk made contiguous, one attention call against the K/V before it",
           "out_f16[:, i].copy_(out_per_step[i]): each chunk's output copied into place (2 bytes read and written "
           "per bf16 element)"),
    not_modelled=("the two chunks' calls on two streams overlap on the GPU: played one after another",),
)
