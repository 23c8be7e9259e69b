"""sim.trace.metrics.explain in clauses: each clause's sentence written out by hand from the
row's numbers, and the clauses a row carries through JSON and back."""

from __future__ import annotations

import json

import pytest

from sim.reasons import ENGLISH, clause, english
from sim.trace.metrics import explain, explain_clauses

GIB = 2 ** 30


def _row(**changes):
    row = {"makespan_s": 0.01, "compute_s": 0.0095, "exposed_comm_s": 0.0, "exposed_by_kind_s": {},
           "across_nodes_share": {}, "busiest_nic_s": 0.0, "load_imbalance": 1.0, "efficiency": 0.76,
           "peak_mem_bytes": None, "memory_bytes": 80e9}
    return row | changes


CASES = [
    # 95% computing, 0.76 / 0.95 = 80% of the kernel's best rate
    (_row(), ["compute-bound-rate"], "compute-bound: 95% of the makespan computing, at 80% of the kernel's best rate"),
    # 0.38 / 0.95 = 40% of the kernel's best rate: under half, the calls' fixed costs bound it
    (_row(efficiency=0.38), ["call-overhead"],
     "bound by per-call costs: 95% of the makespan computing, but at only 40% of the kernel's best rate (each "
     "call's fixed cost and partial wave outweigh its small block)"),
    (_row(efficiency=None), ["compute-bound"], "compute-bound: 95% of the makespan computing"),
    (_row(compute_s=0.005), ["waits"], "waits on peers: the busiest GPU computes only 50% of the makespan"),
    # 4 ms of 10 ms on the K/V ring, 90% of it between nodes; the NIC busy 6 ms; 1.5x
    (_row(compute_s=0.005, exposed_comm_s=0.005, exposed_by_kind_s={"kv": 0.004, "a2a": 0.001},
          across_nodes_share={"kv": 0.9}, busiest_nic_s=0.006, load_imbalance=1.5),
     ["exposed-across-nodes", "nic-also", "imbalance"],
     "K/V ring exposed 4.000 ms of the 5.000 ms exposed in all (40% of the makespan), NIC-limited: most of "
     "its time is on flows between nodes; "
     "the busiest NIC carries flows 60% of the makespan, transfers queue for it; causal imbalance 1.50x"),
    (_row(compute_s=0.005, busiest_nic_s=0.007), ["nic"],
     "NIC-limited: the busiest NIC carries flows 70% of the makespan, transfers queue for it"),
    # the socket link busy 4 ms, longer than the busiest GPU port's 3 ms
    (_row(exposed_comm_s=0.002, exposed_by_kind_s={"ag": 0.002},
          busiest_pcie_link_clause=clause("link.in-node", node=0, resource=clause("link.socket", a=0, b=1), on_lane=None),
          busiest_pcie_link_kind="socket link", busiest_pcie_link_s=0.004, busiest_port_s=0.003),
     ["exposed", "pcie"],
     "all-gather exposed 2.000 ms (20% of the makespan); bound by the PCIe socket link (node 0 socket link 0->1), "
     "carrying flows 40% of the makespan"),
    (_row(peak_mem_bytes=100 * GIB, load_imbalance=1.2), ["no-fit", "imbalance-alone"],
     "does not fit (100.00 GiB per GPU, 80 GB); causal imbalance: the busiest GPU computes 1.20x the mean"),
    (_row(makespan_s=0.0), ["idle"], "nothing to run"),
]


@pytest.mark.parametrize("row, keys, sentence", CASES)
def test_explain_says_each_clause(row, keys, sentence):
    clauses = explain_clauses(row)
    assert [c["clause"] for c in clauses] == [f"bound.{key}" for key in keys]
    assert explain(row) == english(clauses) == sentence


def test_the_cases_cover_every_clause():
    said = {f"bound.{key}" for _, keys, _ in CASES for key in keys}
    nested = {c["of_all"]["clause"] for row, _, _ in CASES for c in explain_clauses(row) if c.get("of_all")}
    assert said | nested == {k for k in ENGLISH if k.startswith("bound.")}


def test_one_kind_exposed_alone_says_no_whole():
    """The worst GPU's exposure by kind adds up to its whole: with one kind, the kind's
    exposure is the whole, said once."""
    row = _row(compute_s=0.005, exposed_comm_s=0.004, exposed_by_kind_s={"kv": 0.004})
    assert explain(row) == "K/V ring exposed 4.000 ms (40% of the makespan)"


@pytest.mark.parametrize("row, keys, sentence", CASES)
def test_the_clauses_survive_json(row, keys, sentence):
    clauses = explain_clauses(row)
    back = json.loads(json.dumps(clauses))
    assert back == clauses
    assert english(back) == sentence
