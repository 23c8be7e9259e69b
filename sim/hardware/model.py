"""What a hardware model offers the engine: the time of a block and of a transfer, the rate
of the ideal time, a description for the trace's header, and the abilities that change
how a schedule is played.

The engine (sim.engine.play, sim.engine.players) plays a schedule on any `HardwareModel`:
the datasheet model of GPUs, links and nodes (sim.hardware.cluster.Hardware) and a
calibrated profile (sim.hardware.profile.Profile) implement it, and so may a test's or a
user's model. A model must give the per-op times (`compute_time_s`, `transfer_time_s`),
`rate_flops` and `describe`; the batch forms over arrays default to calling the per-op
methods once per distinct argument tuple, and a model that times arrays faster overrides
them, giving element for element the per-op method's float. Every model takes the same
arguments and ignores those its times do not depend on (a profile's blocks do not depend
on the head dim or on the call order). The optional abilities are attributes whose
defaults here say the model lacks them; the engine reads them and never probes a model
for what it has. Definitions of block, transfer and ideal time: docs/design.md.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from sim.hardware.contention import Contention, GpuPull


@runtime_checkable
class HardwareModel(Protocol):
    """The methods and abilities the engine and the players use (see the module's
    docstring). A model subclasses it to take the defaults."""

    contention: Contention | None = None
    """What slows compute and transfers while they run together (sim.hardware.contention);
    None: nothing does. An active model makes the engine play on SimPy."""
    gpu_pull: GpuPull | None = None
    """What a transfer's kernel takes from the compute on its GPUs (NCCL's CTAs and copies,
    sim.hardware.contention.GpuPull), added to `contention`; None: nothing. Makes the
    engine play on SimPy."""
    inline_send_after_s: float | None = None
    """gloo's point-to-point protocol: a send posted more than this after its receiver
    posted the receive is written by the posting thread (sim.engine.players.times_simpy);
    None: sends never hold their rank (NCCL, GPUs)."""
    p2p_queue: bool = False
    """A device runs its point-to-point batches one after another, as NCCL does
    (sim.engine.queues)."""
    merge_copies_slices: bool = False
    """A block on part of its rank's queries costs more to merge: the engine passes
    `sliced` to the compute times."""
    takes_call_order: bool = False
    """Block times depend on `alone` (the only block of its pass on its rank: nothing to
    merge), `isolated` (its rank's first block: the GPU is idle when it is called) and
    `opens` (its rank's first forward block, whose merge starts the output), which the
    engine then passes to the compute times."""
    times_collectives: bool = False
    """The flows of collectives have their own times (`collective_times_s`); otherwise they
    take the point-to-point link's."""
    times_groups: bool = False
    """Every transfer is timed knowing the communicator it runs in
    (`group_transfer_times_s`, NCCL's tuning model) in place of `transfer_times_s`."""

    @abstractmethod
    def compute_time_s(self, flops: float, *, dtype: str, kind: str, mask: str, q_tokens: int, kv_tokens: int,
                       head_dim: int | None = None, kv_heads_per_head: float | None = None,
                       sliced: bool = False, alone: bool = False, isolated: bool = False,
                       opens: bool = False) -> float:
        """Time of one block of `flops` (kind: 'fwd' or 'bwd'; mask: 'full' or 'diagonal')
        on `q_tokens` queries and `kv_tokens` keys; head_dim and kv_heads_per_head are the
        workload's (None: the model's assumption); sliced, alone, isolated and opens as the
        abilities above."""

    @abstractmethod
    def transfer_time_s(self, nbytes: float, src: int, dst: int) -> float:
        """Time of one transfer of `nbytes` from rank `src` to rank `dst`."""

    @abstractmethod
    def rate_flops(self, dtype: str, head_dim: int | None = None) -> float:
        """The rate of the ideal time (docs/design.md) for `dtype`, at `head_dim` where the
        model's rates depend on it (None: the model's assumption)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The model as the trace's header records it (`kind` names the model)."""

    def compute_times_s(self, flops: np.ndarray, *, dtype: str, kind: np.ndarray, mask: np.ndarray,
                        q_tokens: np.ndarray, kv_tokens: np.ndarray, head_dim: int | None = None,
                        kv_heads_per_head: float | None = None, sliced: np.ndarray | None = None,
                        alone: np.ndarray | None = None, isolated: np.ndarray | None = None,
                        opens: np.ndarray | None = None) -> np.ndarray:
        """compute_time_s over arrays of blocks (kind and mask: arrays of names; a flag
        left None is not passed)."""
        flags = {name: np.asarray(values, dtype=bool)
                 for name, values in (("sliced", sliced), ("alone", alone), ("isolated", isolated), ("opens", opens))
                 if values is not None}

        def one(f, k, m, q, kv, *on):
            return self.compute_time_s(f, dtype=dtype, kind=k, mask=m, q_tokens=q, kv_tokens=kv, head_dim=head_dim,
                                       kv_heads_per_head=kv_heads_per_head, **dict(zip(flags, on)))

        return per_distinct(one, [np.asarray(flops), np.asarray(kind, dtype=str), np.asarray(mask, dtype=str),
                                  np.asarray(q_tokens), np.asarray(kv_tokens), *flags.values()])

    def transfer_times_s(self, nbytes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """transfer_time_s over arrays of transfers."""
        return per_distinct(self.transfer_time_s, [np.asarray(nbytes), np.asarray(src), np.asarray(dst)])

    def times_varlen(self, dtype: str) -> bool:
        """Whether blocks of packed documents of `dtype` are timed as varlen calls
        (`varlen_times_s`); otherwise by their FLOPs, like any block."""
        return False

    def varlen_times_s(self, calls: list[Any], flops: np.ndarray, *, dtype: str, kind: np.ndarray,
                       head_dim: int | None = None, kv_heads_per_head: float | None = None,
                       sliced: np.ndarray | None = None, alone: np.ndarray | None = None,
                       isolated: np.ndarray | None = None, opens: np.ndarray | None = None) -> np.ndarray:
        """compute_times_s for blocks that are varlen calls (`calls`: their
        sim.layouts.packed.BlockCall); asked only where `times_varlen`."""
        raise NotImplementedError(f"{type(self).__name__} does not time varlen calls")

    def collective_times_s(self, kind: np.ndarray, nbytes: np.ndarray, default: np.ndarray, *,
                           group: np.ndarray | None = None) -> np.ndarray:
        """The time of each flow of a collective (`kind`: names 'ag', 'rs', 'a2a'; `group`:
        the ranks its collective joins), `default` (the link's time) where the model has
        none; asked only where `times_collectives`."""
        return np.array(default, dtype=np.float64)


    def group_transfer_times_s(self, kind: np.ndarray, nbytes: np.ndarray, src: np.ndarray, dst: np.ndarray,
                               members: list[np.ndarray], group_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(time, CTAs it holds on each of its GPUs) of each transfer (`kind`: names such as
        'kv', 'ag', 'a2a') in the communicator of ranks members[group_of]; asked only where
        `times_groups`."""
        raise NotImplementedError(f"{type(self).__name__} does not time transfers by communicator")

    def memory_bound_s(self, flops: np.ndarray, *, dtype: str, kind: np.ndarray, mask: np.ndarray,
                       q_tokens: np.ndarray, kv_tokens: np.ndarray, head_dim: int | None = None,
                       kv_heads_per_head: float | None = None, sliced: np.ndarray | None = None,
                       alone: np.ndarray | None = None, isolated: np.ndarray | None = None,
                       opens: np.ndarray | None = None) -> np.ndarray:
        """The memory-bound part of each block's time (arguments as `compute_times_s`), which
        a GPU contention model slows by the HBM bandwidth transfers take; 0: none."""
        return np.zeros(len(np.asarray(flops)))


def per_distinct(fn: Callable[..., float], columns: list[np.ndarray]) -> np.ndarray:
    """fn(one element's arguments, as Python scalars) for every element, called once per
    distinct argument tuple: a ring repeats a few block shapes and link hops many times over."""
    order = np.lexsort(columns[::-1])
    new = np.zeros(len(order), dtype=bool)     # where a sorted row differs from the last
    if len(order):
        new[0] = True
    for c in columns:
        c = c[order]
        new[1:] |= c[1:] != c[:-1]
    firsts = order[new]
    values = [fn(*args) for args in zip(*(c[firsts].tolist() for c in columns))]
    out = np.empty(len(order))
    out[order] = np.array(values, dtype=np.float64)[np.cumsum(new) - 1]
    return out
