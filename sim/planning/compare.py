"""Schemes side by side: every scheme (and ring layout) on one workload and cluster, each
run summarized by sim.trace.metrics.scheme_row (makespan, exposed communication, bytes and
memory per GPU, and what bounds it, in English and as sim.reasons clauses). `ringsim compare
--schemes` prints these rows; anything else (the dashboard) can call `compare_scheme_rows` the
same way.
"""

from __future__ import annotations

from typing import Any, Sequence

from sim.errors import RingsimError
from sim.reasons import Clause, clause, english
from sim.scenario.config import PLACEMENTS, Scenario, layouts_for
from sim.schemes import names as scheme_names


def scheme_variants(scenario: Scenario) -> list[tuple[str, Clause | None, dict[str, Any]]]:
    """What `compare --schemes` runs for each scheme: (scheme, variant, Scenario changes), the
    variant a sim.reasons clause (None for a scheme with one way to run; `variant_name` is
    its English). ring: each layout, overlap on; allgather: one gather, and pipelined per K/V
    head; ulysses: every GPU; hybrid: every split u x r with 1 < u < N that the heads allow,
    both placements where they differ (across nodes, or on a PCIe node)."""
    w, hw, n = scenario.workload, scenario.hardware, scenario.n_gpus
    plain = dict(ulysses_degree=None, ring_degree=None, placement="ulysses-inner", head_groups=1)
    out: list[tuple[str, Clause | None, dict[str, Any]]] = []
    for scheme in scheme_names():
        if scheme == "ring":
            out += [("ring", clause("variant.ring", layout=layout), dict(plain, layout=layout, overlap=True))
                    for layout in layouts_for(w)]
        elif scheme == "allgather":
            # packed documents: on contiguous shards, as the llama3 varlen variant runs
            gather = dict(plain, layout="contiguous") if scenario.packed else plain
            out.append(("allgather", clause("variant.one-gather"), dict(gather)))
            if w.kv_heads > 1:
                out.append(("allgather", clause("variant.head-groups", groups=w.kv_heads),
                            dict(gather, head_groups=w.kv_heads)))
        elif scheme == "ulysses":
            out.append(("ulysses", clause("variant.degree", degree=n), dict(plain)))
        elif scheme == "hybrid":
            from sim.schemes.hybrid import degree_fits

            # every split u x r of the GPUs the heads allow (1 x N is the ring, N x 1
            # Ulysses: listed as those schemes), each placement where it decides what the
            # flows cross: across nodes, or the switches and sockets of a PCIe node
            placements = PLACEMENTS if n > hw.gpus_per_node or hw.pcie is not None else PLACEMENTS[:1]
            for u in (d for d in range(n - 1, 1, -1) if n % d == 0 and degree_fits(w, d)):
                for placement in placements:
                    label = (clause("variant.split-placed", ulysses=u, ring=n // u, placement=placement)
                             if len(placements) > 1 else clause("variant.split", ulysses=u, ring=n // u))
                    out.append(("hybrid", label, dict(plain, ulysses_degree=u, ring_degree=n // u,
                                                      placement=placement)))
        else:
            out.append((scheme, None, dict(plain)))
    return out


def variant_name(variant: Clause | None) -> str:
    """A variant of `scheme_variants` as the rows name it: its English ("" for none)."""
    return "" if variant is None else english(variant)


def compare_scheme_rows(scenario: Scenario, hardware=None, schemes: Sequence[str] | None = None
                        ) -> list[dict[str, Any]]:
    """A `sim.trace.metrics.scheme_row` for every variant of `schemes` (all when None), with
    the variant's clause (`variant_clause`); a variant the configuration refuses gets a row with
    its reason (`refused`, and `refused_clause` where sim.reasons knows the reason)."""
    from sim.engine.play import simulate
    from sim.trace.metrics import compute_metrics, scheme_row

    out = []
    for scheme, variant, changes in scheme_variants(scenario):
        if schemes is not None and scheme not in schemes:
            continue
        try:
            sc = scenario.with_(scheme=scheme, **changes)
        except RingsimError as e:
            out.append({"scheme": scheme, "variant": variant_name(variant), "refused": str(e),
                        "variant_clause": variant, "refused_clause": e.reason})
            continue
        trace = simulate(sc, hardware, player="recurrence")
        out.append({**scheme_row(scheme, variant_name(variant), trace, compute_metrics(trace)),
                    "variant_clause": variant})
        del trace
    return out
