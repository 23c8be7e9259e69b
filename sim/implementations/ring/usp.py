"""long-context-attention's ring (feifeibear/long-context-attention, yunchang, at
56118e0d8fe377d43441226dd8bdd07135c92c22): yunchang/ring/ring_flash_attn.py,
zigzag_ring_flash_attn.py, stripe_flash_attn.py over yunchang/ring/utils.py, a copy of
ring-flash-attention's (RingComm, and the TorchScript _update_out_and_lse: out - sigmoid(
block_lse - lse) * (out - block_out)). Its step is ring-flash-attention's
(sim.implementations.ring.rfa): the same posts, call, unfused merge and waits, and its varlen
zigzag (yunchang/ring/zigzag_ring_flash_attn_varlen.py) takes its halves with the same mask
made on the CPU (get_half_index), so the host waits for the GPU each step there too.
"""

from dataclasses import replace

from sim.implementations.ring.rfa import IMPLEMENTATION as RFA

IMPLEMENTATION = replace(
    RFA,
    library="usp",
    title="long-context-attention (USP) ring",
    source="feifeibear/long-context-attention 56118e0d8fe377d43441226dd8bdd07135c92c22: yunchang/ring/"
           "ring_flash_attn.py, zigzag_ring_flash_attn.py, stripe_flash_attn.py; yunchang/ring/utils.py (RingComm, "
           "update_out_and_lse, as ring-flash-attention's)",
    layouts=("contiguous", "zigzag", "striped"),
)
