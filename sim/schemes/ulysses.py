"""DeepSpeed-Ulysses (docs/design.md, "Beyond the ring"): all-to-all of Q, K, V from token
shards to head shards, attention over the whole sequence on H/N heads, all-to-all of the
output back; backward the mirror image (dO in, dQ, dK, dV back).

It is the hybrid (sim.schemes.hybrid) with every GPU in one all-to-all group and rings
of one: the flows, the head and K/V-head rules (replicated K/V heads when the degree
exceeds H_kv, bytes counted; anything else refused), the memory and the block map are
the hybrid's. Each GPU computes one S x S kernel call (causal or dense) on H/N heads:
no causal imbalance, and nothing to overlap the all-to-alls with.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sim.errors import RingsimError
from sim.schemes import hybrid
from sim.schemes.base import only_settings

if TYPE_CHECKING:     # annotations only: sim.scenario.config imports the schemes
    from sim.scenario.config import Scenario


def _degree(scenario: Scenario) -> int:
    u = scenario.ulysses_degree
    if u is not None and u != scenario.n_gpus:
        raise RingsimError(f"ulysses splits the heads over every GPU: --ulysses-degree must be {scenario.n_gpus} "
                           f"(got {u}); use --scheme hybrid for fewer")
    return scenario.n_gpus


def _check(scenario: Scenario) -> None:
    only_settings(scenario, "ulysses", "ulysses_degree")
    hybrid.check_degree(scenario.workload, _degree(scenario))
    hybrid._check_shards(scenario)


SCHEME = replace(
    hybrid.SCHEME,
    name="ulysses",
    summary="DeepSpeed-Ulysses: all-to-all from token shards to head shards, attention over the whole "
            "sequence on H/N heads, all-to-all back",
    build_schedule=lambda scenario: hybrid.build_hybrid_schedule(scenario, _degree(scenario), 1),
    count_ops=lambda scenario: hybrid.count_hybrid_ops(scenario, _degree(scenario), 1),
    peak_memory=lambda scenario: hybrid.peak_memory_bytes(scenario, _degree(scenario), 1),
    op_kinds={k: v for k, v in hybrid.OP_KINDS.items() if k not in ("kv", "dkv")},
    check=_check,
    settings=lambda scenario: {"ulysses_degree": _degree(scenario)},
    block_map=lambda trace: hybrid.block_map_of(trace, trace.n_gpus, 1, "ulysses-inner"),
)
