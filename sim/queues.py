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
K/V hop before the dK/dV hop (the order `hw.ring` posts them in). The waves are cut again
for the new dependencies. Collectives are left as they are.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sim.schedule import DKV, KV, NO_DEP, Schedule, cut_waves


def queue_batches(schedule: Schedule) -> Schedule:
    """The schedule with each rank's point-to-point batches run one after another."""
    hops = np.flatnonzero((schedule.kind == KV) | (schedule.kind == DKV))
    if hops.size == 0:
        return schedule
    # each hop belongs to a batch on its sender and on its receiver
    op = np.concatenate([hops, hops])
    rank = np.concatenate([schedule.rank[hops], schedule.peer[hops]]).astype(np.int64)
    step = np.concatenate([schedule.step[hops], schedule.step[hops]]).astype(np.int64)
    kind = np.concatenate([schedule.kind[hops], schedule.kind[hops]]).astype(np.int64)
    # batches in posting order per rank: by rank, then step, then kind (K/V before dK/dV)
    key = (rank * (int(step.max()) + 1) + step) * 2 + (kind - KV)
    batches, batch_of = np.unique(key, return_inverse=True)
    batch_of = batch_of.reshape(-1)
    batch_rank = batches // (2 * (int(step.max()) + 1))
    # members of each batch, padded: (batches, width)
    order = np.argsort(batch_of, kind="stable")
    counts = np.bincount(batch_of, minlength=len(batches))
    width = int(counts.max())
    slot = np.arange(len(order)) - np.repeat(np.cumsum(counts) - counts, counts)
    members = np.full((len(batches), width), NO_DEP, dtype=np.int64)
    members[batch_of[order], slot] = op[order]
    # the batch before each one on the same rank (none for a rank's first)
    prev = np.arange(len(batches)) - 1
    first = np.ones(len(batches), dtype=bool)
    first[1:] = batch_rank[1:] != batch_rank[:-1]
    # per hop: the members of the batch before its sender's and before its receiver's
    n_hops = hops.size
    extra = np.full((2 * width, len(schedule)), NO_DEP, dtype=np.int64)
    for side in range(2):
        b = batch_of[side * n_hops:(side + 1) * n_hops]
        deps = np.where(first[b][:, None], NO_DEP, members[np.maximum(prev[b], 0)])
        deps[deps >= hops[:, None]] = NO_DEP        # only what was posted earlier in schedule order
        extra[side * width:(side + 1) * width, hops] = deps.T
    after = np.vstack([schedule.after, extra])
    resources = schedule.resource[None, :]
    if schedule.extra_resources is not None:
        resources = np.vstack([resources, schedule.extra_resources])
    return dataclasses.replace(schedule, after=after, wave_starts=cut_waves(resources, after))
