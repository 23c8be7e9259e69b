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

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

from sim.errors import RingsimError
from sim.reasons import Clause, clause
from sim.schemes import hybrid
from sim.schemes.base import Settings, TokenSplit, Variant
from sim.units import positive_ints

if TYPE_CHECKING:     # annotations only: sim.scenario.config imports the schemes
    from sim.hardware.cluster import Hardware
    from sim.scenario.config import Scenario, Workload


@dataclass(frozen=True, kw_only=True)
class UlyssesSettings(Settings):
    ulysses_degree: int | None = None
    """GPUs in the all-to-all group: every GPU (None, or the scenario's GPUs). The hybrid's
    option sets it (sim.schemes.hybrid.ULYSSES_DEGREE): the command line's --ulysses-degree
    is checked, not chosen."""

    def __post_init__(self) -> None:
        if self.ulysses_degree is not None:
            positive_ints(self, "ulysses_degree")


def _degree(scenario: Scenario) -> int:
    u = scenario.settings.ulysses_degree
    if u is not None and u != scenario.n_gpus:
        raise RingsimError(f"ulysses splits the heads over every GPU: --ulysses-degree must be {scenario.n_gpus} "
                           f"(got {u}); use --scheme hybrid for fewer")
    return scenario.n_gpus


def _check(scenario: Scenario) -> None:
    hybrid.check_degree(scenario.workload, _degree(scenario))
    hybrid._check_shards(scenario)


def _every_gpu(workload: Workload, hardware: Hardware, n_gpus: int) -> list[Variant]:
    return [Variant(clause("variant.degree", degree=n_gpus), {})]


def _split(scenario: Scenario) -> TokenSplit:
    return hybrid.split_of(scenario, _degree(scenario), 1, hybrid.PLACEMENTS[0])


def _notes(values: Mapping[str, Any], n_gpus: int, kv_heads: int) -> list[Clause]:
    return hybrid.replicated(values.get("ulysses-degree", n_gpus), kv_heads)


SCHEME = replace(
    hybrid.SCHEME,
    name="ulysses",
    summary="DeepSpeed-Ulysses: all-to-all from token shards to head shards, attention over the whole "
            "sequence on H/N heads, all-to-all back",
    # one all-to-all group of every GPU: either placement puts it on ranks 0..N-1
    build_schedule=lambda scenario: hybrid.build_hybrid_schedule(scenario, _degree(scenario), 1,
                                                                 hybrid.PLACEMENTS[0]),
    count_ops=lambda scenario: hybrid.count_hybrid_ops(scenario, _degree(scenario), 1),
    peak_memory=lambda scenario: hybrid.peak_memory_bytes(scenario, _degree(scenario), 1),
    op_kinds={k: v for k, v in hybrid.OP_KINDS.items() if k not in ("kv", "dkv")},
    check=_check,
    settings_type=UlyssesSettings,
    options=(),             # its degree is no choice: every GPU (the hybrid's --ulysses-degree sets it)
    resolved_settings=lambda scenario: UlyssesSettings(ulysses_degree=_degree(scenario)),
    gpu_shares=("ulysses-degree",),
    ring_options=(),
    variants=_every_gpu,
    candidates=_every_gpu,
    run_words=lambda config: f"ulysses, degree {config['ulysses_degree']}",
    run_terms=lambda config: ("", {"degree": config.get("ulysses_degree", "?")}),
    token_split=_split,
    plan_notes=_notes,
    block_map=lambda trace: hybrid.block_map_of(trace, trace.n_gpus, 1, hybrid.PLACEMENTS[0]),
    frameworks={"megatron": ("a2a",)},
    all_to_all_degree=lambda settings, n_gpus: settings.ulysses_degree or n_gpus,
)
