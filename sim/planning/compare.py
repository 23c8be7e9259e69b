"""Runs side by side on one workload and cluster: every layout of a scheme with overlap on
and off (`ringsim compare`), every scheme's variants (`ringsim compare --schemes`), and the
implementations of one scheme (`ringsim compare --impls`, sim.implementations), each
run summarized by sim.trace.metrics (comparison_row: the layout's makespan, efficiency,
imbalance and exposed communication; scheme_row: makespan, exposed communication, bytes and
memory per GPU, and what bounds it, in English and as sim.reasons clauses). The command line
prints these rows; the dashboard makes the same ones through its cached runs (`metrics_of`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from sim import implementations
from sim.engine.host_memory import check_fits
from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.reasons import clause
from sim.scenario.config import Scenario
from sim.scenario.resolve import vary
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.schemes.base import Variant, layouts_for
from sim.trace.metrics import comparison_row, compute_metrics, scheme_row


def layout_variants(scenario: Scenario) -> list[Scenario]:
    """What `ringsim compare` runs: the scenario on every layout worth trying for its
    workload (sim.schemes.base.layouts_for), overlap on, then off."""
    return [scenario.with_(layout=layout, overlap=overlap)
            for layout in layouts_for(scenario.workload) for overlap in (True, False)]


def compare_layout_rows(scenario: Scenario, hardware: Any = None,
                        metrics_of: Callable[[Scenario], Any] | None = None) -> list[dict[str, Any]]:
    """A `sim.trace.metrics.comparison_row` of each of layout_variants; `metrics_of` (a
    scenario's metrics) replaces simulating each here on `hardware`."""
    metrics_of = metrics_of or (lambda sc: compute_metrics(simulate(sc, hardware)))
    variants = layout_variants(scenario)
    for sc in variants:         # every run's memory estimated before the first starts
        check_fits(get_scheme(sc.scheme), sc.implementation.played(sc))
    return [comparison_row(sc.layout, sc.overlap, metrics_of(sc)) for sc in variants]


def scheme_variants(scenario: Scenario) -> list[tuple[str, Variant]]:
    """What `compare --schemes` runs for each scheme, in the registry's order: (scheme, its
    variant), each scheme's own (sim.schemes.base.Scheme.variants) for the scenario's
    workload on its GPUs. `vary(scenario, scheme, variant.values)` makes the run."""
    w, hw, n = scenario.workload, scenario.hardware, scenario.n_gpus
    return [(name, v) for name in scheme_names() for v in get_scheme(name).variants(w, hw, n)]


def compare_scheme_rows(scenario: Scenario, hardware=None, schemes: Sequence[str] | None = None
                        ) -> list[dict[str, Any]]:
    """A `sim.trace.metrics.scheme_row` for every variant of `schemes` (all when None) of
    the scenario, with the variant's clause (`variant_clause`); a variant the configuration
    refuses gets a row with its reason (`refused`, and `refused_clause` where sim.reasons
    knows the reason)."""
    runs = []
    for scheme, variant in scheme_variants(scenario):
        if schemes is not None and scheme not in schemes:
            continue
        try:
            runs.append((scheme, variant, vary(scenario, scheme, variant.values)))
        except RingsimError as e:
            runs.append((scheme, variant, e))
    # every run's memory estimated before the first starts: a comparison too large for this
    # machine stops at once, naming the run, not part way through
    for _, _, sc in runs:
        if isinstance(sc, Scenario):
            check_fits(get_scheme(sc.scheme), sc.implementation.played(sc))
    out = []
    for scheme, variant, sc in runs:
        if isinstance(sc, RingsimError):
            out.append({"scheme": scheme, "variant": variant.name, "refused": str(sc),
                        "variant_clause": variant.label, "refused_clause": sc.reason})
            continue
        trace = simulate(sc, hardware, player="recurrence")
        out.append({**scheme_row(scheme, variant.name, trace, compute_metrics(trace)),
                    "variant_clause": variant.label})
        del trace
    return out


def compare_impl_rows(scenario: Scenario, hardware=None, libraries: Sequence[str] | None = None
                      ) -> list[dict[str, Any]]:
    """A `sim.trace.metrics.scheme_row` for each implementation of the scenario's scheme
    (sim.implementations.of_scheme: the ideal first; `libraries` of them, all when None) on
    its layout, named by its library (`impl`), title (`variant`) and clause
    (`variant_clause`); an implementation the configuration refuses (a layout it lacks) gets a
    row with its reason (`refused`, and `refused_clause`)."""
    runs = []
    for impl in implementations.of_scheme(scenario.scheme):
        if libraries is not None and impl.library not in libraries:
            continue
        try:
            runs.append((impl, scenario.with_(impl=impl.library)))
        except RingsimError as e:
            runs.append((impl, e))
    for _, sc in runs:          # every run's memory estimated before the first starts
        if isinstance(sc, Scenario):
            check_fits(get_scheme(sc.scheme), sc.implementation.played(sc))
    out = []
    for impl, sc in runs:
        label = clause("variant.impl", impl=impl.library)
        if isinstance(sc, RingsimError):
            out.append({"scheme": scenario.scheme, "impl": impl.library, "variant": impl.title, "refused": str(sc),
                        "variant_clause": label, "refused_clause": sc.reason})
            continue
        trace = simulate(sc, hardware, player="recurrence")
        out.append({**scheme_row(scenario.scheme, impl.title, trace, compute_metrics(trace)), "impl": impl.library,
                    "variant_clause": label})
        del trace
    return out
