"""The kernels of each scheme the hardware side runs: (forward, backward) by name.

Every forward takes (q, k, v, *, ring, layout, causal, ops, step0, on_step) and returns
(out, state); every backward takes (dout, q, k, v, out, state, *, same) and returns
(dq, dk, dv). The state is the ring's and all-gather's log-sum-exp, Ulysses' head
shards (`hw.ulysses.UlyssesState`).
"""

from __future__ import annotations

from typing import Callable

from sim.errors import RingsimError

SCHEMES = ("ring", "allgather", "ulysses")


def kernels(scheme: str) -> tuple[Callable, Callable]:
    # the kernels import torch; SCHEMES is read on every `ringsim` start (hw.validate)
    if scheme == "ring":
        from hw.ring import ring_backward, ring_forward
        return ring_forward, ring_backward
    if scheme == "allgather":
        from hw.allgather import allgather_backward, allgather_forward
        return allgather_forward, allgather_backward
    if scheme == "ulysses":
        from hw.ulysses import ulysses_backward, ulysses_forward
        return ulysses_forward, ulysses_backward
    raise RingsimError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
