"""A schedule as plain data: who computes what at which step, who sends what to whom,
and what each operation waits on. The engine plays any schedule; it knows nothing of
layouts or schemes.

Operations are numbered; `after` lists the ids that must complete before an operation
may start. A rank's computes run one after another in `compute_order[rank]`. A transfer
starts once everything in its `after` is done and its link (src -> dst) is free; it
occupies the link for its whole duration, and transfers on one link queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class ComputeOp(NamedTuple):
    id: int
    rank: int
    kind: str
    """'fwd' or 'bwd'."""
    step: int
    kv_rank: int
    """Owner of the K/V block computed on."""
    pairs: int
    """Work of the block (unmasked or tile-rounded pairs, per head and batch item)."""
    flops: float
    mask: str
    """'full', 'diagonal' or 'empty' (see sim.layouts.block_masks; empty is skipped)."""
    q_tokens: int
    kv_tokens: int
    q_chunks: tuple[int, ...]
    kv_chunks: tuple[int, ...]
    after: tuple[int, ...]


class TransferOp(NamedTuple):
    id: int
    src: int
    dst: int
    kind: str
    """'kv' or 'dkv'."""
    step: int
    kv_rank: int
    nbytes: int
    kv_chunks: tuple[int, ...]
    after: tuple[int, ...]


@dataclass
class Schedule:
    n_ranks: int
    ops: list[ComputeOp | TransferOp] = field(default_factory=list)
    compute_order: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.compute_order:
            self.compute_order = [[] for _ in range(self.n_ranks)]

    @property
    def computes(self) -> list[ComputeOp]:
        return [op for op in self.ops if isinstance(op, ComputeOp)]

    @property
    def transfers(self) -> list[TransferOp]:
        return [op for op in self.ops if isinstance(op, TransferOp)]
