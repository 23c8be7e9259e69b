"""TransformerEngine's context parallelism, cp_comm_type "p2p" (what Megatron-Core's
--context-parallel-size runs by default): AttnFuncWithCPAndKVP2P in
NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py at d0067d0da6cb01811b8072a7d304f0e00344ce2b.

Under a causal mask a rank holds two chunks, r and 2N-1-r (the zigzag layout: its
load-balanced halves). Forward, step i: on stream i % 2 (the current stream and cp_stream,
alternating), wait for the K/V received at step i-1 (req.wait() on each of the batch's
two operations), post the next block (torch.empty_like of one packed K/V buffer,
flash_attn_p2p_communicate: batch_isend_irecv of one send and one receive), then one
attention call: the diagonal at step 0 (causal), q x the first half of K/V at steps <=
rank ("lower-triangle"), the second half of q x K/V after ("upper-triangle"); then, on the
other stream, the log-sum-exp of step i-1 corrected (flash_attn_fwd_softmax_lse_correction,
one fused kernel on the fp32 statistics), with an event recorded and waited between the
two streams. After the loop, the output corrections: one fused kernel per step
(flash_attn_fwd_out_correction, out.add_(out_per_step * exp(lse_per_step - lse)) on the
bf16 output), sim.hardware.presets.MERGE_BYTES 'te'. The send of step i+1 is posted on
stream i % 2, whose last call is step i-2's: it waits for its block to arrive and the
buffer two steps back to be computed on ('buffered'). Backward: per step the K/V and
dK/dV posts and waits, one attention backward, dq and the packed dK/dV added.
"""

from sim.implementations.base import Implementation

IMPLEMENTATION = Implementation(
    library="te",
    title="TransformerEngine p2p (AttnFuncWithCPAndKVP2P)",
    source="NVIDIA/TransformerEngine d0067d0da6cb01811b8072a7d304f0e00344ce2b: "
           "transformer_engine/pytorch/attention/dot_product_attention/"
           "context_parallel.py (AttnFuncWithCPAndKVP2P, flash_attn_p2p_communicate, "
           "flash_attn_fwd_out_correction, flash_attn_fwd_softmax_lse_correction)",
    layouts=("zigzag", "contiguous"),
    full_layouts=("contiguous",),
    merge="te",
    # forward: 2 req.wait, 1 receive buffer, 2 NCCL posts, an event recorded and waited;
    # backward: K/V 2 waits + 2 posts, dK/dV 2 waits + 2 posts, 1 buffer
    host_ops={"fwd": 7, "bwd": 9},
    sync="buffered",
    steps=("on stream i % 2: req.wait() x 2 for the K/V of step i-1",
           "torch.empty_like of the packed K/V buffer; batch_isend_irecv: 1 send + 1 receive",
           "one attention call: diagonal at step 0, q x first half of K/V at steps <= rank, second half of q x "
           "K/V after",
           "on the other stream: flash_attn_fwd_softmax_lse_correction of step i-1 (1 fused kernel, fp32 "
           "statistics); an event recorded and waited",
           "after the loop: flash_attn_fwd_out_correction per step (1 fused kernel, bf16 output: 6 bytes per "
           "element)"),
    not_modelled=("consecutive steps' attention calls on two streams overlap on the GPU (wave quantization): "
                  "played one after another",
                  "the output corrections run after the loop: played after each step's call"),
)
