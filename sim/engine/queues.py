"""One queue of point-to-point batches per rank, as NCCL runs them.

A ring rank posts its hops in batches (`batch_isend_irecv`: a send to the next rank and a
receive from the previous one). gloo runs each batch as soon as it is posted; NCCL puts
every batch of a device on one stream, in posting order, so a batch starts only when the
batch the rank posted before it has completed, and the pair of a hop must have reached
it on both ranks: the sender's queue and the receiver's. In backward, the K/V hop of step
s + 1 queues behind the dK/dV hop of step s (posted before it), on both of its ranks.

`queue_batches` adds exactly that to a schedule: every point-to-point transfer (K/V and
dK/dV hops) also waits on the transfers of the batch before its own, on its sender and on
its receiver. A rank's batch is its transfers of one kind at one step (the ones it sends
and the ones it receives); its batches are posted in order of step, and at one step the
K/V hop before the dK/dV hop (the order `hw.ring` posts them in). The waves stay where
each new dependency lies in an earlier wave than its hop (a ring's do), and are cut again
otherwise. Collectives are left as they are.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sim.engine.schedule import DKV, KV, NO_DEP, Schedule, cut_waves


def queue_batches(schedule: Schedule) -> Schedule:
    """The schedule with each rank's point-to-point batches run one after another."""
    hops = schedule.transfer_ids
    hops = hops[(schedule.kind[hops] == KV) | (schedule.kind[hops] == DKV)].astype(np.int64)
    if hops.size == 0:
        return schedule
    src = schedule.rank[hops].astype(np.int64)
    dst = schedule.peer[hops].astype(np.int64)
    step = schedule.step[hops].astype(np.int64)
    kinds = np.unique(schedule.kind[hops])
    # a batch is a cell of a dense (rank, step, kind) table, in posting order within a rank
    n_kinds, n_steps = len(kinds), int(step.max()) + 1
    k = np.searchsorted(kinds, schedule.kind[hops]).astype(np.int64)
    per_rank = n_steps * n_kinds
    n_cells = schedule.n_ranks * per_rank
    sent_in = (src * n_steps + step) * n_kinds + k
    received_in = (dst * n_steps + step) * n_kinds + k
    sends = np.bincount(sent_in, minlength=n_cells)
    receives = np.bincount(received_in, minlength=n_cells)
    # members: the hops a batch sends, then the hops it receives (one of each in a ring)
    send_slot, n_send = _slots(sent_in, sends)
    recv_slot, n_recv = _slots(received_in, receives)
    members = np.full((n_cells, n_send + n_recv), NO_DEP, dtype=np.int64)
    members[sent_in, send_slot] = hops
    members[received_in, n_send + recv_slot] = hops
    # the batch before each one on the same rank: the last non-empty cell before it
    cell = np.arange(n_cells, dtype=np.int64)
    last = np.maximum.accumulate(np.where((sends + receives) > 0, cell, -1))
    prev = np.empty(n_cells, dtype=np.int64)
    prev[0] = -1
    prev[1:] = last[:-1]
    prev[prev < cell - cell % per_rank] = -1
    return _with_deps(schedule, hops, [prev[sent_in], prev[received_in]], members)


def _slots(cells: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, int]:
    """Each entry's place among the entries of its cell (in order), and the most places
    a cell needs: all 0 where no cell holds two (a ring's batches), without sorting."""
    width = int(counts.max())
    if width <= 1:
        return np.zeros(len(cells), dtype=np.int64), 1
    order = np.argsort(cells, kind="stable")
    starts = np.cumsum(counts) - counts
    slot = np.empty(len(cells), dtype=np.int64)
    slot[order] = np.arange(len(cells)) - starts[cells[order]]
    return slot, width


def _with_deps(schedule: Schedule, hops: np.ndarray, prev_batches: list[np.ndarray],
               members: np.ndarray) -> Schedule:
    """Each hop also after the members of the batch before its own, on its sender's side
    and on its receiver's (`prev_batches`: that batch's row in `members`, -1: none)."""
    width = members.shape[1]
    extra = np.full((2 * width, len(schedule)), NO_DEP, dtype=schedule.after.dtype)
    for side, prev in enumerate(prev_batches):
        deps = members[np.maximum(prev, 0)]
        deps[prev < 0] = NO_DEP
        deps[deps >= hops[:, None]] = NO_DEP        # only what was posted earlier in schedule order
        extra[side * width:(side + 1) * width, hops] = deps.T
    after = np.vstack([schedule.after, extra])
    # the waves stand where every new dependency lies in a wave before its hop's own
    wave_of = np.searchsorted(schedule.wave_starts, hops, side="right") - 1
    if (extra[:, hops].max(axis=0) < schedule.wave_starts[wave_of]).all():
        return dataclasses.replace(schedule, after=after, wave_starts=schedule.wave_starts)
    resources = schedule.resource[None, :]
    if schedule.extra_resources is not None:
        resources = np.vstack([resources, schedule.extra_resources])
    return dataclasses.replace(schedule, after=after, wave_starts=cut_waves(resources, after))
