"""The known traps of a context-parallel job, checked on every configuration exported or read:
each violation is one line naming the framework's flag (or key) that sets it.

- **a2a+p2p without its hierarchy**: Megatron's `--cp-comm-type a2a+p2p` needs
  `--hierarchical-context-parallel-sizes` (the all-to-all degree, then the ring's) whose
  product is the CP size (Megatron-LM megatron/training/arguments.py at core_v0.16.1,
  55ac7082: "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp
  comm", and `context_parallel_size == prod(hierarchical_context_parallel_sizes)`).
  Megatron-Bridge ran without the sizes and without context parallelism until it refused
  them (src/megatron/bridge/training/config.py, `_validate_cp_comm_type`, commit 91c39a0,
  PR #2665: "Without it, CP communication is silently disabled and each rank attends only to
  its local chunk, producing artificially high throughput").
- **The load-balanced layout**: a sequence is cut into 2 x CP chunks, rank r holding chunks r
  and 2CP-1-r (Megatron-LM arguments.py: "seq-length should be a multiple of 2 *
  context-parallel-size"; torch's head-tail load balancer likewise).
- **The all-to-all's heads**: an all-to-all of degree u hands each rank 1/u of the query and
  of the K/V heads a TP rank holds, so both must divide by u (TransformerEngine splits the
  head dimension of q, k and v into u parts; it does not replicate K/V heads).
- **Packed sequences (THD)**: each packed sequence is padded to a multiple of 2 x CP, and of
  TP x CP with sequence parallelism (Megatron-Bridge config.py, the "CP/SP collate padding
  multiple").
- **Tensor parallelism**: TP divides the query heads; TP and the K/V heads divide one another
  (megatron-core 0.16.1 TransformerConfig.__post_init__); sequence parallelism needs TP > 1
  (ModelParallelConfig.__post_init__: "Cannot use sequence parallelism without tensor
  parallelism").
- **Memory per GPU**: the simulated step's memory (sim.training.step) within the GPU's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from sim.scenario.models import Model
from sim.schemes import get as get_scheme
from sim.training.step import Parallel, Step
from sim.units import fmt_bytes

NAMES = ("tp", "cp", "pp", "seq", "cp_comm", "hierarchical", "heads", "kv_heads", "sp", "micro_batch", "recompute",
         "packed")
"""What a framework's flag table (Flags) names: the setting each trap points at."""


@dataclass(frozen=True)
class Flags:
    """The framework's flag (or key) for each setting a trap names."""

    tp: str
    cp: str
    pp: str
    seq: str
    cp_comm: str
    hierarchical: str
    heads: str
    kv_heads: str
    sp: str
    micro_batch: str
    recompute: str
    packed: str


HIERARCHICAL = "a2a+p2p"
"""Megatron's cp_comm_type whose two levels --hierarchical-context-parallel-sizes gives."""


def all_to_all_degree(parallel: Parallel) -> int | None:
    """The degree of the CP scheme's all-to-all (sim.schemes.base.Scheme.all_to_all_degree:
    every CP rank for Megatron's a2a, the first hierarchical size for a2a+p2p), or None where
    there is none."""
    if parallel.cp == 1:
        return None
    scheme = get_scheme(parallel.scheme)
    own = {f.name for f in fields(scheme.settings_type)}
    given = {"ulysses_degree": parallel.ulysses_degree} if "ulysses_degree" in own and parallel.ulysses_degree else {}
    return scheme.all_to_all_degree(scheme.settings_type(**given), parallel.cp)


def check(model: Model, seq: int, parallel: Parallel, flags: Flags, *, comm: str,
          hierarchical: tuple[int, ...] | None = None, sequence_parallel: bool | None = None,
          packed: bool = False) -> list[str]:
    """The traps a configuration falls into, one line each, naming `flags`' flag; `comm` is
    the framework's word for the CP scheme (a2a+p2p, alltoall, ...), `hierarchical` the
    hierarchical sizes it was given (a2a+p2p), `sequence_parallel` whether it asked for
    sequence parallelism (None: not a setting of it)."""
    p, out = parallel, []
    if p.cp > 1 and comm == HIERARCHICAL:
        if not hierarchical:
            out.append(f"{flags.cp_comm} {comm} needs {flags.hierarchical} (the all-to-all degree, then the "
                       f"ring's, product {flags.cp} {p.cp}): without it Megatron-LM refuses the run and Megatron-Bridge "
                       f"ran it without context parallelism")
        elif math.prod(hierarchical) != p.cp:
            out.append(f"{flags.hierarchical} {' x '.join(map(str, hierarchical))} = {math.prod(hierarchical)}, not "
                       f"{flags.cp} {p.cp}")
    if p.cp > 1 and p.layout == "zigzag" and seq % (2 * p.cp):
        out.append(f"{flags.seq} {seq} does not divide into 2 x {flags.cp} {p.cp} = {2 * p.cp} chunks (the "
                   f"load-balanced layout: rank r holds chunks r and 2CP-1-r)")
    u = all_to_all_degree(p)
    if u is not None and u > 1 and model.heads % p.tp == 0:
        heads, kv = model.heads // p.tp, max(model.kv_heads // p.tp, 1)
        if heads % u:
            out.append(f"{flags.cp_comm} {comm}: a {u}-way all-to-all needs the query heads of a TP rank "
                       f"({flags.heads} {model.heads} / {flags.tp} {p.tp} = {heads}) to divide by {u}")
        if kv % u:
            out.append(f"{flags.cp_comm} {comm}: a {u}-way all-to-all needs the K/V heads of a TP rank "
                       f"({flags.kv_heads} {model.kv_heads} / {flags.tp} {p.tp} -> {kv}) to divide by {u} "
                       f"(TransformerEngine splits them, it does not replicate them)")
    if packed and p.cp > 1:
        multiple = math.lcm(2 * p.cp, p.tp * p.cp if (sequence_parallel is not False and p.tp > 1) else 1)
        if seq % multiple:
            out.append(f"{flags.packed}: packed (THD) sequences are padded to a multiple of {multiple} (2 x CP"
                       + (", and TP x CP with sequence parallelism" if multiple != 2 * p.cp else "")
                       + f"); {flags.seq} {seq} is not one")
    if model.heads % p.tp:
        out.append(f"{flags.tp} {p.tp} does not divide {flags.heads} {model.heads}")
    if model.kv_heads % p.tp and p.tp % model.kv_heads:
        out.append(f"{flags.tp} {p.tp} and {flags.kv_heads} {model.kv_heads}: one must divide the other")
    if sequence_parallel and p.tp == 1:
        out.append(f"{flags.sp} needs {flags.tp} > 1 (megatron-core ModelParallelConfig: \"Cannot use sequence "
                   f"parallelism without tensor parallelism\")")
    return out


def memory_line(step: Step, flags: Flags, micro_batch: int) -> str | None:
    """The step's memory per GPU against the GPU's, one line naming what sets it, or None."""
    if step.fits:
        return None
    p = step.request.parallel
    gpu = step.request.hardware.gpu
    return (f"memory per GPU: {fmt_bytes(step.memory_bytes_per_gpu)} does not fit the {gpu.name}'s "
            f"{gpu.memory_gb:g} GB ({flags.micro_batch} {micro_batch}, {flags.recompute} {p.recompute}, "
            f"{flags.tp} {p.tp}, {flags.cp} {p.cp}, {flags.pp} {p.pp})")
