"""sim.trace.metrics.explain in clauses: each clause's sentence written out by hand from the
row's numbers, the clauses read back from the sentence, and a sentence explain does not
write left unread."""

from __future__ import annotations

import pytest

from sim.trace.metrics import EXPLAIN_TEMPLATES, clauses_from_text, explain, explain_clauses, explain_text

GIB = 2 ** 30


def _row(**changes):
    row = {"makespan_s": 0.01, "compute_s": 0.0095, "exposed_comm_s": 0.0, "exposed_by_kind_s": {},
           "across_nodes_share": {}, "busiest_nic_s": 0.0, "load_imbalance": 1.0, "efficiency": 0.76,
           "peak_mem_bytes": None, "memory_bytes": 80e9}
    return row | changes


CASES = [
    # 95% computing, 0.76 / 0.95 = 80% of the kernel's best rate
    (_row(), ["compute-bound-rate"], "compute-bound: 95% of the makespan computing, at 80% of the kernel's best rate"),
    (_row(efficiency=None), ["compute-bound"], "compute-bound: 95% of the makespan computing"),
    (_row(compute_s=0.005), ["waits"], "waits on peers: the busiest GPU computes only 50% of the makespan"),
    # 4 ms of 10 ms on the K/V ring, 90% of it between nodes; the NIC busy 6 ms; 1.5x
    (_row(compute_s=0.005, exposed_comm_s=0.005, exposed_by_kind_s={"kv": 0.004, "a2a": 0.001},
          across_nodes_share={"kv": 0.9}, busiest_nic_s=0.006, load_imbalance=1.5),
     ["exposed-across-nodes", "nic-also", "imbalance"],
     "K/V ring exposed 4.000 ms (40% of the makespan), NIC-limited: most of its time is on flows between nodes; "
     "the busiest NIC carries flows 60% of the makespan, transfers queue for it; causal imbalance 1.50x"),
    (_row(compute_s=0.005, busiest_nic_s=0.007), ["nic"],
     "NIC-limited: the busiest NIC carries flows 70% of the makespan, transfers queue for it"),
    # the socket link busy 4 ms, longer than the busiest GPU port's 3 ms
    (_row(exposed_comm_s=0.002, exposed_by_kind_s={"ag": 0.002}, busiest_pcie_link="node 0 socket link 0->1",
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
    assert [key for key, _ in clauses] == keys
    assert explain(row) == explain_text(clauses) == sentence


def test_the_cases_cover_every_clause():
    assert {key for _, keys, _ in CASES for key in keys} == set(EXPLAIN_TEMPLATES)


@pytest.mark.parametrize("row, keys, sentence", CASES)
def test_the_clauses_read_back_from_the_sentence(row, keys, sentence):
    back = clauses_from_text(sentence)
    assert [key for key, _ in back] == keys
    assert explain_text(back) == sentence
    # the numbers, as precise as the sentence gives them
    for (_, given), (_, read) in zip(explain_clauses(row), back):
        assert set(read) == set(given)
        for name, value in given.items():
            if isinstance(value, float):
                assert read[name] == pytest.approx(value, abs=0.005, rel=1e-3), name
            else:
                assert read[name] == value


@pytest.mark.parametrize("text", ["", "compute-bound: 95% of the makespan computing, and more",
                                  "K/V ring exposed 4.000 ms (40% of the makespan); bound by the moon",
                                  "an error the sweep recorded"])
def test_a_sentence_explain_does_not_write_is_not_read(text):
    assert clauses_from_text(text) is None
