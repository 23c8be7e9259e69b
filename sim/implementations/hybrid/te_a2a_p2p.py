"""TransformerEngine's context parallelism, cp_comm_type "a2a+p2p" (NVIDIA/TransformerEngine
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
at d0067d0da6cb01811b8072a7d304f0e00344ce2b): AttnFuncWithCPAndKVP2P with cp_group a list [a2a group,
p2p group]: Q, K and V all-to-all'd inside the a2a group (flash_attn_a2a_communicate), then the p2p ring across
(sim.implementations.ring.te_p2p: one call per step on alternating streams, the fused
log-sum-exp and output corrections on the bf16 output, the next send behind the block
two steps back), the output all-to-all'd back.
"""

from dataclasses import replace

from sim.implementations.ring.te_p2p import IMPLEMENTATION as P2P

IMPLEMENTATION = replace(
    P2P,
    library="te",
    title="TransformerEngine a2a+p2p (AttnFuncWithCPAndKVP2P, hierarchical)",
    source="NVIDIA/TransformerEngine d0067d0da6cb01811b8072a7d304f0e00344ce2b: "
           "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py "
           "(AttnFuncWithCPAndKVP2P with cp_size_a2a > 1, flash_attn_a2a_communicate)",
    steps=("Q, K, V all-to-all'd inside the a2a group (all_to_all_single, reorder, wait)",) + P2P.steps
    + ("the output all-to-all'd back",),
)
