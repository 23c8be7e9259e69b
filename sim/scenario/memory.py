"""Memory per rank (docs/design.md, fact 4 and "Peak memory").

Each scheme models its own memory (sim.schemes); this module asks the scheme of a
scenario and holds what does not depend on one.
"""

from __future__ import annotations

from sim.scenario.config import Scenario, Workload
from sim.schemes import get

__all__ = ["full_kv_bytes", "peak_memory"]


def peak_memory(scenario: Scenario) -> dict[str, int]:
    """Bytes per rank under the scenario's scheme, itemized; 'total' is the peak."""
    return get(scenario.scheme).peak_memory(scenario)


def full_kv_bytes(workload: Workload) -> int:
    """What one device would hold if it kept the whole sequence's K and V."""
    return workload.kv_bytes(workload.seq)
