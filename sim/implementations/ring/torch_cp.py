"""torch's context_parallel, ring attention with the all-to-all rotation
(torch.distributed.tensor.experimental, _context_parallel/_attention.py at torch 2.13.0,
git cf30153c4c131c8164ee7798e5022d810682e2cb: _templated_ring_attention, _AllToAllRotater, _SDPAMerger).

Causal runs take the head-tail load balancer (the zigzag layout). Each step: wait for the
K/V of the step before (_maybe_wait: wait_tensor), torch.cat of K and V into one buffer and
ft_c.permute_tensor to the next rank (all_to_all_single, one send and one receive), one
SDPA call (the whole block at step 0, q x the first K/V chunk at steps <= rank, the second
q chunk x K/V after), then _SDPAMerger.step: out.to(fp32) and the merge as
ring-flash-attention writes it, eager (out - sigmoid(block_lse - lse) * (out - block_out)),
'unfused'; on the second q chunk, _partial_update rebuilds the whole output and the
statistics with torch.cat (MERGE_BYTES 'torch': 16 bytes per element of the chunk). The
first step's merge only converts the output to fp32 (_merge_one keeps the first block), and
results() converts it back (sim.hardware.presets.MERGE_OPEN). The
send is posted after the step before's call and merge were queued ('step').
"""

from sim.implementations.base import Implementation

IMPLEMENTATION = Implementation(
    library="torch",
    title="torch context_parallel (all-to-all rotation)",
    source="pytorch/pytorch torch 2.13.0 (git cf30153c4c131c8164ee7798e5022d810682e2cb): "
           "torch/distributed/tensor/experimental/"
           "_context_parallel/_attention.py (_templated_ring_attention, _AllToAllRotater, _SDPAMerger, "
           "_partial_update)",
    layouts=("contiguous", "zigzag"),
    causal_layouts=("zigzag",),
    merge="torch",
    # forward: wait_tensor, K/V contiguous + cat, all_to_all_single (a send and a receive);
    # backward: the same for K/V and for dK/dV
    host_ops={"fwd": 5, "bwd": 10},
    sync="step",
    steps=("rotater.next_buffer(): wait_tensor on the K/V of the step before",
           "torch.cat of K and V; ft_c.permute_tensor (all_to_all_single: 1 send + 1 receive)",
           "one SDPA call: the whole block at step 0, q x first K/V chunk at steps <= rank, second q chunk x "
           "K/V after",
           "_SDPAMerger.step: 9 eager elementwise kernels (38 bytes per bf16 output element); on the second q "
           "chunk, torch.cat rebuilds the output and the statistics (2 kernels, 16 bytes per element)"),
    not_modelled=("the K/V concatenation before each send (a copy of the block) is not played",),
)
