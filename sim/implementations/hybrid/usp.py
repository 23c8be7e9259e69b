"""long-context-attention's USP (feifeibear/long-context-attention at 56118e0d8fe377d43441226dd8bdd07135c92c22:
yunchang/hybrid/attn_layer.py LongContextAttention): SeqAllToAll4D over the Ulysses group,
then its ring (yunchang/ring: ring-flash-attention's step, sim.implementations.ring.usp:
the unfused merge, the sends behind the step before's compute), the output back.
"""

from dataclasses import replace

from sim.implementations.ring.usp import IMPLEMENTATION as RING

IMPLEMENTATION = replace(
    RING,
    library="usp",
    title="long-context-attention (USP) Ulysses x ring",
    source="feifeibear/long-context-attention 56118e0d8fe377d43441226dd8bdd07135c92c22: yunchang/hybrid/attn_layer.py "
           "(LongContextAttention), yunchang/comm/all_to_all.py (SeqAllToAll4D), yunchang/ring/ (RingComm, "
           "update_out_and_lse)",
    steps=("Q, K, V through SeqAllToAll4D over the Ulysses group",) + RING.steps
    + ("the output back through SeqAllToAll4D",),
)
