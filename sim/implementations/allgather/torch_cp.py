"""torch's context_parallel with the all-gather rotation (_RotateMethod.ALL_GATHER; torch 2.13.0,
git cf30153c4c131c8164ee7798e5022d810682e2cb, torch/distributed/tensor/experimental/_context_parallel/_attention.py:
_AllGatherRotater, _templated_ring_attention, _SDPAMerger).

K/V all-gathered once (ft_c.all_gather_single), then the ring's loop over the gathered chunks:
one SDPA call per chunk, each merged by _SDPAMerger as ring-flash-attention writes it, eagerly
(MERGE_BYTES 'torch': unfused, fp32), the second chunk's updates rebuilt with torch.cat. Here
the all-gather scheme's calls (a dense and a diagonal call per query chunk) are merged so.
"""

from sim.implementations.base import Implementation

IMPLEMENTATION = Implementation(
    library="torch",
    title="torch context_parallel (all-gather rotation)",
    source="pytorch/pytorch torch 2.13.0 (git cf30153c4c131c8164ee7798e5022d810682e2cb): "
           "torch/distributed/tensor/experimental/_context_parallel/_attention.py (_AllGatherRotater, "
           "_templated_ring_attention, _SDPAMerger)",
    merge="torch",
    # per call: the gathered buffer's chunk (wait_tensor once, chunk views), the call's
    # _is_causal_behavior and chunk views; the merge's kernels are counted apart
    host_ops={"fwd": 2, "bwd": 4},
    steps=("once: ft_c.all_gather_single of K/V concatenated (torch.cat of K and V)",
           "per K/V chunk: one SDPA call (whole chunk, first half or second q chunk, as the ring's load balancer "
           "says)",
           "_SDPAMerger.step: 9 eager elementwise kernels (fp32), torch.cat on the second q chunk"),
    not_modelled=("torch runs one call per gathered K/V chunk (N calls); the all-gather scheme's calls (a dense "
                  "and a diagonal one per query chunk) are played, each merged as torch merges",),
)
