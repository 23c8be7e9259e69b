"""ring-flash-attention's ring (zhuzilin/ring-flash-attention at 899628238f2f5bb8c028579c89b7cd56ea451d2a):
ring_flash_attn.py, zigzag_ring_flash_attn.py, stripe_flash_attn.py (and their varlen
versions), over utils.py's RingComm and update_out_and_lse.

Forward, each step: RingComm.send_recv_kv posts the next block (two torch.empty_like
receive buffers, one batch_isend_irecv of a send and a receive for K and one for V: four
NCCL operations), one flash-attention call on the block (skipped when fully masked; zigzag
calls q x the first half of K/V at steps <= rank and the second half of q x K/V after;
stripe calls q[:, 1:] x k[:, :-1] after), then update_out_and_lse: the TorchScript
_update_out_and_lse, run as one elementwise kernel per operation
(sim.hardware.presets.MERGE_BYTES 'unfused', fp32 output and log-sum-exp), and on a slice
(zigzag's and stripe's half and shifted blocks) the slice copied back; then comm.wait():
four req.wait(), each making the compute stream wait on NCCL's. The first step's
update_out_and_lse only converts the block's output to fp32, and the forward ends by
converting it back (sim.hardware.presets.MERGE_OPEN). The send of step k+1 is
posted after step k's call and merge were queued, and NCCL's stream waits for the stream
that posts it: the next send waits for this step's compute ('step').
With packed documents the varlen zigzag (zigzag_ring_flash_attn_varlen.py) takes its halves
with a boolean mask made on the CPU (get_half_index): k[half_index0], out[half_index1] and
dq[half_index1] += copy the mask's indices to the GPU from pageable memory, which waits for the
stream, so each step's call is made on an idle GPU.
Backward, each step: the K/V post as above, one flash-attention backward into bf16
buffers, dq += (fp32), d_kv_comm.wait(), dk/dv add, kv_comm.wait(), then d_kv_comm's post of
the fp32 dK/dV: eight NCCL operations and eight waits, two buffers.
"""

from sim.implementations.base import Implementation

IMPLEMENTATION = Implementation(
    library="rfa",
    title="ring-flash-attention",
    source="zhuzilin/ring-flash-attention 899628238f2f5bb8c028579c89b7cd56ea451d2a: "
           "ring_flash_attn/ring_flash_attn.py, zigzag_ring_flash_attn.py, "
           "stripe_flash_attn.py, ring_flash_attn_varlen.py, zigzag_ring_flash_attn_varlen.py; utils.py "
           "(RingComm, update_out_and_lse)",
    layouts=("contiguous", "zigzag", "striped", "doc-contiguous"),
    causal_layouts=("zigzag", "striped"),
    host_wait_layouts=("zigzag",),
    merge="unfused",
    # forward: 2 receive buffers, 4 NCCL posts (K and V, send and receive), 4 waits;
    # backward: the same for K/V, and for dK/dV 4 posts and 4 waits (buffers passed in)
    host_ops={"fwd": 10, "bwd": 18},
    sync="step",
    steps=("send_recv_kv: 2 x torch.empty_like, batch_isend_irecv of K and V (4 NCCL operations)",
           "one flash_attn forward call on the block (zigzag: q x first half of K/V at steps <= rank, second half "
           "of q x K/V after; stripe: q[:, 1:] x k[:, :-1] after; skipped where fully masked)",
           "update_out_and_lse: 9 elementwise kernels on the fp32 output and log-sum-exp (38 bytes per bf16 "
           "output element); on a slice, 2 more copies back (8 bytes)",
           "comm.wait(): 4 x req.wait(), the compute stream waits on NCCL's"),
    not_modelled=("the final out.to(bf16) (6 bytes per output element, one kernel) is played at the first block, "
                  "with its block_out.to(fp32) (sim.hardware.presets.MERGE_OPEN), not after the last step",
                  "the backward's final dq, dk, dv .to(bf16) are not played",
                  "the varlen zigzag's gathers and scatters of its halves (k[half_index0], dq[half_index1] +=) "
                  "are played as the merge's bytes, their host waits as each call on an idle GPU"),
)
