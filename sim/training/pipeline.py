"""A training step's pipeline as a schedule the engine plays: one GPU per stage, each
micro-batch's forward and backward of each of its model chunks, and the activations and
gradients sent between stages (sim.training.step gives the durations).

The order each stage runs its work in is Megatron's 1F1B: a warm-up of forwards, then one
forward and one backward in turn, then the remaining backwards. Without interleaving
(v = 1) stage s warms up with PP - s - 1 forwards; interleaved (v model chunks per GPU,
chunk c of stage s holding virtual stage c PP + s) with (PP - s - 1) 2 + (v - 1) PP, the
k-th forward being chunk (k mod PP v) // PP of micro-batch (k // PP v) PP + k mod PP and
the backwards taking the chunks in reverse (Narayanan et al., "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM", 2021; Megatron-LM's
`forward_backward_pipelining_with_interleaving`).

What waits on what: a forward on the activations of the virtual stage before it (sent
from the GPU before, or from the last stage to the first between chunks), a backward on
the gradient of the virtual stage after it, the last virtual stage's backward on its own
forward. Each stage's sends leave through its port out and arrive through the next's
port in, one at a time (sim.hardware.topology's discipline). The engine's recurrence player times
it (sim.engine.players.times_waves), and the record is a trace like any other: stage s is rank
s, its computes `fwd` and `bwd`, its sends `pp`. A stage's activations leave through one
port and its gradients through another (the two directions of its link), each port's
sends in the order the stage produced them.
"""

from __future__ import annotations

import functools

import numpy as np

from sim.engine.players import times_waves
from sim.engine.record import record_owned
from sim.engine.schedule import BWD, FWD, NO_DEP, PP, Schedule, ScheduleBuilder
from sim.trace.format import Trace


def program(pp: int, microbatches: int, interleave: int = 1) -> list[list[tuple[str, int, int]]]:
    """Per stage, its (phase 'F' or 'B', chunk, micro-batch) in the order it runs them."""
    total = microbatches * interleave

    def which(k: int, backward: bool) -> tuple[int, int]:
        group, within = divmod(k, pp * interleave)
        chunk = within // pp
        return (interleave - 1 - chunk if backward else chunk), group * pp + within % pp

    out = []
    for s in range(pp):
        warm = pp - s - 1 if interleave == 1 else (pp - s - 1) * 2 + (interleave - 1) * pp
        warm = min(warm, total)
        order = [("F", *which(k, False)) for k in range(warm)]
        for j in range(total - warm):
            order.append(("F", *which(warm + j, False)))
            order.append(("B", *which(j, True)))
        order += [("B", *which(k, True)) for k in range(total - warm, total)]
        out.append(order)
    return out


@functools.lru_cache(maxsize=1024)
def in_flight(pp: int, microbatches: int, interleave: int = 1) -> tuple[int, ...]:
    """Per stage, the most (chunk, micro-batch) forwards whose backward has not yet run at
    any moment of its program: the activations it holds at its peak. Stage 0 holds PP
    without interleaving and (v + 1) PP - 1 chunks of 1/v of its layers with v, so its
    activations grow by 1 + (PP - 1) / (PP v) (Korthikanti et al., "Reducing Activation
    Recomputation in Large Transformer Models", 2022, section 4.2.3). Read from the
    program's shape rather than walked: its warm-up's forwards, then one more before the
    first backward (each backward after it follows a forward), or every chunk where the
    warm-up takes them all."""
    total = microbatches * interleave
    return tuple(min((pp - s - 1 if interleave == 1 else (pp - s - 1) * 2 + (interleave - 1) * pp) + 1, total)
                 for s in range(pp))


def build_pipeline_schedule(forward_s: list[float], backward_s: list[float], send_s: float, microbatches: int,
                            interleave: int = 1) -> tuple[Schedule, np.ndarray]:
    """The schedule of one step's pipeline and every op's duration: stage s's chunk takes
    forward_s[s] / v forward and backward_s[s] / v backward; a send takes send_s."""
    schedule = _pipeline_ops(len(forward_s), microbatches, interleave)
    rank = schedule.rank
    durations = np.where(schedule.kind == FWD, np.asarray(forward_s, dtype=np.float64)[rank] / interleave,
                         np.where(schedule.kind == BWD, np.asarray(backward_s, dtype=np.float64)[rank] / interleave,
                                  send_s))
    return schedule, durations


@functools.lru_cache(maxsize=256)
def _pipeline_ops(pp: int, microbatches: int, v: int) -> Schedule:
    """The pipeline's ops and what each waits on, which the stage times do not change (a
    plan plays one shape for many of its splits); not to be modified."""
    names = [f"stage {s} compute" for s in range(pp)]
    names += [f"stage {s} {way} {phase}" for phase in ("activations", "gradients") for way in ("out", "in")
              for s in range(pp)]
    b = ScheduleBuilder(pp, names)
    done: dict[tuple[str, int, int, int], int] = {}     # (phase, chunk, stage, micro-batch) -> the op
    sent: dict[tuple[str, int, int, int], int] = {}     # the same -> the send that delivers its result

    def needs(phase: str, c: int, s: int, i: int) -> list[int | None]:
        """What the op waits for (None: not yet built)."""
        if phase == "F":
            if s > 0:
                return [sent.get(("F", c, s - 1, i))]
            return [sent.get(("F", c - 1, pp - 1, i))] if c > 0 else []
        if c == v - 1 and s == pp - 1:
            return [done.get(("F", c, s, i))]
        if s < pp - 1:
            return [sent.get(("B", c, s + 1, i))]
        return [sent.get(("B", c + 1, 0, i))]

    def destination(phase: str, c: int, s: int) -> int | None:
        """The stage that takes this op's result, None where nothing is sent."""
        if phase == "F":
            return s + 1 if s < pp - 1 else (0 if c < v - 1 else None)
        return s - 1 if s > 0 else (pp - 1 if c > 0 else None)

    orders = program(pp, microbatches, v)
    # the ops in an order every dependency comes before its dependant, as columns
    kind, rank, peer, step, dep, res, held = [], [], [], [], [], [], []
    at = [0] * pp
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(pp):
            while at[s] < len(orders[s]):
                phase, c, i = orders[s][at[s]]
                deps = needs(phase, c, s, i)
                if any(d is None for d in deps):
                    break
                op = len(kind)
                kind.append(FWD if phase == "F" else BWD)
                rank.append(s)
                peer.append(-1)
                step.append(i)
                dep.append(deps[0] if deps else NO_DEP)
                res.append(s)
                held.append(-1)
                done[(phase, c, s, i)] = op
                to = destination(phase, c, s)
                if to is not None:
                    base = pp if phase == "F" else 3 * pp
                    sent[(phase, c, s, i)] = len(kind)
                    kind.append(PP)
                    rank.append(s)
                    peer.append(to)
                    step.append(i)
                    dep.append(op)
                    res.append(base + s)
                    held.append(base + pp + to)
                at[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("the pipeline's program waits on itself")
    n = len(kind)
    values = dict(kind=np.array(kind, dtype=np.int64), rank=np.array(rank), peer=np.array(peer),
                  step=np.array(step), kv_rank=np.array(rank), pairs=0, flops=0.0, mask=0, q_tokens=0, kv_tokens=0,
                  nbytes=0, q_chunks=-1, kv_chunks=-1)
    b.add(n, values, [np.array(dep, dtype=np.int64)], [np.array(res), np.array(held)])
    return b.build()


def pipeline_makespan(forward_s: list[float], backward_s: list[float], send_s: float, microbatches: int,
                      interleave: int = 1) -> float:
    """The pipeline's time from its first op to its last, as play_pipeline's trace gives it,
    without recording the trace."""
    if len(forward_s) == 1 and interleave == 1:
        # one stage: a forward and a backward in turn, each waiting for the one before, so
        # the engine's recurrence is a running sum, added in its order (the same number)
        f, b, end = float(forward_s[0]), float(backward_s[0]), 0.0
        for _ in range(microbatches):
            end = end + f
            end = end + b
        return end
    start, end = times_waves(*build_pipeline_schedule(forward_s, backward_s, send_s, microbatches, interleave))
    return float(end[:len(start)].max()) - float(start.min()) if len(start) else 0.0


BATCH_CELLS = 1 << 21
"""pipeline_makespans plays at most this many ops x pipelines at once (16 MB a column of times)."""


def pipeline_makespans(forward_s: list[list[float]], backward_s: list[list[float]], send_s: list[float],
                       microbatches: int, interleave: int = 1) -> list[float]:
    """pipeline_makespan of K pipelines of one shape (forward_s and backward_s: K lists of
    the stages' times; send_s: K sends), played side by side on the engine's recurrence, one
    column of durations each (sim.engine.players.times_waves): the same numbers, the
    recurrence's per-wave work shared by the K."""
    if not len(send_s):
        return []
    f, b = np.asarray(forward_s, dtype=np.float64), np.asarray(backward_s, dtype=np.float64)
    if f.shape[1] == 1 and interleave == 1:
        return [pipeline_makespan(*x, microbatches, interleave) for x in zip(forward_s, backward_s, send_s)]
    schedule = _pipeline_ops(f.shape[1], microbatches, interleave)
    if not len(schedule):
        return [0.0] * len(send_s)
    rank, kind = schedule.rank, schedule.kind[:, None]
    send = np.asarray(send_s, dtype=np.float64)
    out: list[float] = []
    step = max(1, BATCH_CELLS // len(schedule))
    for a in range(0, len(send), step):
        fa, ba, sa = f[a:a + step], b[a:a + step], send[a:a + step]
        durations = np.where(kind == FWD, fa[:, rank].T / interleave,
                             np.where(kind == BWD, ba[:, rank].T / interleave, sa[None, :]))
        start, end = times_waves(schedule, durations)
        out += (end.max(axis=0) - start.min(axis=0)).tolist()
    return out


def play_pipeline(forward_s: list[float], backward_s: list[float], send_s: float, microbatches: int,
                  interleave: int = 1, header: dict | None = None) -> Trace:
    """The pipeline played on the engine's recurrence (module docstring) as a trace."""
    schedule, dur = build_pipeline_schedule(forward_s, backward_s, send_s, microbatches, interleave)
    times = list(times_waves(schedule, dur))
    header = header or {}
    return Trace("simulated", schedule.n_ranks, record_owned(schedule, times, release=False),
                 header.get("config", {}), header.get("hardware", {}), {"player": "recurrence", "schedule": "1f1b"})
