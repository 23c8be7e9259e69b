"""long-context-attention's Ulysses (feifeibear/long-context-attention at 56118e0d8fe377d43441226dd8bdd07135c92c22:
yunchang/ulysses/attn_layer.py UlyssesAttention, yunchang/comm/all_to_all.py SeqAllToAll4D).

Q, K and V each: reshape and transpose to (heads, tokens) made contiguous, one
all_to_all_single, reshape back made contiguous; one flash-attention call over the whole
sequence on the rank's heads (nothing merged); the output back through SeqAllToAll4D.
"""

from sim.implementations.base import Implementation

IMPLEMENTATION = Implementation(
    library="usp",
    title="long-context-attention (USP) Ulysses",
    source="feifeibear/long-context-attention 56118e0d8fe377d43441226dd8bdd07135c92c22: yunchang/ulysses/attn_layer.py "
           "(UlyssesAttention), yunchang/comm/all_to_all.py (SeqAllToAll4D, all_to_all_4D)",
    merge="fused",
    # Q, K, V and the output: per tensor a contiguous copy before, all_to_all_single, a
    # contiguous copy after
    host_ops={"fwd": 12, "bwd": 12},
    steps=("per Q, K, V: reshape/transpose .contiguous(), all_to_all_single, reshape/transpose .contiguous()",
           "one flash-attention call over the whole sequence on the rank's heads (nothing merged)",
           "the output back through SeqAllToAll4D (the same three operations)"),
    not_modelled=("the contiguous copies around each all-to-all are not played",),
)
