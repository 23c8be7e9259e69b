"""sim.reasons: every clause renders in English; on real runs the English of the clauses a row
carries is the sentence the simulator wrote before its reasons were data (copied here from
that version's output); a plan's reasons survive a round trip through JSON; a refusal carries
its clause."""

from __future__ import annotations

import json
import pickle
import re

import pytest

from sim.errors import RingsimError
from sim.reasons import ENGLISH, JOINERS, LABEL_SEPARATOR, NAMES, NUMBERS, WORDS, clause, english, refusal

_NESTED = {
    "link": lambda: example("link.in-node"),
    "resource": lambda: example("link.root"),
    "on_lane": lambda: example("link.lane"),
    "variant": lambda: example("variant.hybrid"),
    "reason": lambda: example("refused.heads"),
    "items": lambda: [example("plan.kept-for-backward"), example("plan.working"), example("plan.params")],
    "diffs": lambda: [example("plan.less-memory"), example("plan.more-exposed")],
    "of_all": lambda: example("bound.of-all"),
}
_VALUES = {"scheme": "hybrid", "layout": "zigzag", "placement": "ring-inner", "share": 0.4, "computing": 0.95,
           "rate": 0.8, "ahead": 0.0712, "apart": 0.031, "slower": 0.062, "ratio": 1.5, "capacity_gb": 79.6,
           "limit_gb": 80, "memory_gb": 81.84}


def example(key: str) -> dict:
    """A clause `key` with a value in each of its fields: the first of a word's values, a name,
    a number with decimals where it has them, a clause or a list of clauses where it nests."""
    fields = {}
    for name in re.findall(r"{(\w+)}", ENGLISH[key]):
        if name in _NESTED:
            fields[name] = _NESTED[name]()
        elif name in WORDS:
            fields[name] = next(iter(WORDS[name]))
        elif name in _VALUES:
            fields[name] = _VALUES[name]
        elif name.endswith("_s"):
            fields[name] = 0.0123456
        elif name.endswith("_bytes"):
            fields[name] = 100.5 * 2 ** 30
        else:
            fields[name] = 12
    return clause(key, **fields)


@pytest.mark.parametrize("key", ENGLISH)
def test_every_clause_renders_in_english(key):
    c = example(key)
    text = english(c)
    assert text and "{" not in text and "None" not in text
    assert json.loads(json.dumps(c)) == c


def test_fields_are_written_as_the_simulator_writes_them():
    assert english(clause("bound.exposed", kind="dkv", exposed_s=0.004, share=0.4)) == \
        "dK/dV ring exposed 4.000 ms (40% of the makespan)"
    assert english(clause("plan.no-fit", peak_bytes=61.31 * 2 ** 20, limit_bytes=60e6, items=[
        clause("plan.working", working_bytes=3 * 2 ** 30), clause("plan.params", params_bytes=1000)])) == \
        "does not fit: 61.31 MiB per GPU over the 57.22 MiB limit (3.00 GiB working, 1000 B parameters)"
    assert english(clause("step.unfit", memory_gb=113.41, limit_gb=80.0)) == "does not fit: 113.4 GB per GPU of 80 GB"
    assert english(clause("link.in-node", node=1, resource=clause("link.root", socket=0, direction="in"),
                          on_lane=clause("link.lane", lane=2))) == "node 1 socket 0 root complex in lane 2"
    assert english(clause("link.in-node", node=0, resource=clause("link.socket", a=0, b=1), on_lane=None)) == \
        "node 0 socket link 0->1"
    assert english([clause("split.degrees", tp=2, cp=1, pp=1, dp=2), clause("split.zero", zero=1)],
                   LABEL_SEPARATOR) == "TP 2 CP 1 PP 1 DP 2, ZeRO-1"


def test_the_tables_name_only_fields_the_sentences_have():
    fields = {name for text in ENGLISH.values() for name in re.findall(r"{(\w+)}", text)}
    assert set(WORDS) <= fields and set(NAMES) <= fields and set(JOINERS) <= fields and set(NUMBERS) <= fields


def test_a_refusal_carries_its_clause_through_a_pickle():
    e = refusal("refused.shards", seq=1000, shards=16, multiple=16)
    assert isinstance(e, RingsimError)
    assert str(e) == "sequence length 1000 does not divide into 16 equal shards; use a multiple of 16"
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == str(e) and back.reason == e.reason == {"clause": "refused.shards", "seq": 1000, "shards": 16,
                                                              "multiple": 16}
    assert RingsimError("a bad flag").reason is None


# --- real runs: the sentences the simulator wrote before ------------------------------------------

COMPARED = {
    ("ring", "contiguous"): "K/V ring exposed 74.502 us (33% of the makespan); causal imbalance "
                            "1.47x",
    # under half the kernel's best rate: the calls' fixed costs bound the run
    ("ring", "striped"): "bound by per-call costs: 100% of the makespan computing, but at only 23% of the "
                         "kernel's best rate (each call's fixed cost and partial wave outweigh its small block)",
    ("ring", "zigzag"): "bound by per-call costs: 100% of the makespan computing, but at only 23% of the "
                        "kernel's best rate (each call's fixed cost and partial wave outweigh its small block)",
    ("allgather", "one gather"): "all-gather exposed 36.076 us (15% of the makespan)",
    ("allgather", "4 head groups"): "bound by per-call costs: 97% of the makespan computing, but at only 7% "
                                    "of the kernel's best rate (each call's fixed cost and partial wave outweigh "
                                    "its small block)",
    ("hybrid", "2 x 2"): "all-to-all exposed 42.688 us (21% of the makespan)",
    ("ulysses", "degree 4"): "all-to-all exposed 42.688 us (22% of the makespan)",
}
PCIE = {
    ("hybrid", "4 x 2 ring-inner"): "all-to-all exposed 10.164 ms (10% of the makespan); bound by"
                                    " the PCIe socket link (node 0 socket link 0->1), carrying "
                                    "flows 32% of the makespan",
    ("hybrid", "2 x 4 ulysses-inner"): "compute-bound: 95% of the makespan computing, at 100% of "
                                       "the kernel's best rate",
}


def _compared(args: str, schemes=None) -> list[dict]:
    from sim.cli.options import simulate_parser, values_from_args
    from sim.planning.compare import compare_scheme_rows
    from sim.scenario.resolve import scenario_of

    return compare_scheme_rows(scenario_of(values_from_args(simulate_parser().parse_args(args.split()))),
                               schemes=schemes)


@pytest.mark.parametrize("args, schemes, want", [
    ("--gpus 4 --seq 8192 --heads 8 --kv-heads 4 --head-dim 64", None, COMPARED),
    ("--cluster pcie-l20 --p2p on --socket-link upi-skl --seq 65536", ["hybrid"], PCIE),
])
def test_compared_runs_say_what_they_said(args, schemes, want):
    rows = {(r["scheme"], r["variant"]): r for r in _compared(args, schemes)}
    assert set(want) <= set(rows)
    for (scheme, variant), sentence in want.items():
        r = rows[scheme, variant]
        assert english(r["explanation_clauses"]) == r["explanation"] == sentence
        assert english(r["variant_clause"]) == variant


PLANNED = {
    # a ring of two holds one K/V block in flight, not two: the hybrids of rings of two fit
    "hybrid 4 x 2, ulysses-inner, zigzag": "0.9% slower than the fastest; all-to-all exposed 85.376 us (10% "
                                           "of the makespan)",
    "ring zigzag layout": "1.39x the fastest; bound by per-call costs: 97% of the makespan computing, but at "
                          "only 26% of the kernel's best rate (each call's fixed cost and partial wave outweigh "
                          "its small block)",
    # forward and backward: the dK/dV ring's exposure is the rest of the 862 us
    "ring contiguous layout": "1.92x the fastest; K/V ring exposed 458.341 us of the 862.330 us "
                              "exposed in all (28% of the makespan); causal imbalance 1.81x",
    "allgather 4 head groups": "2.02x the fastest; all-gather exposed 77.550 us of the 125.700 us "
                               "exposed in all (4% of the makespan); holds a head group of the K/V of the sequence",
    "hybrid 2 x 4, ulysses-inner, zigzag": "does not fit: 61.31 MiB per GPU over the 57.22 MiB "
                                           "limit (18.21 MiB kept for backward by 3 other layers,"
                                           " 42.14 MiB working, 976.56 KiB parameters); "
                                           "all-to-all exposed 85.376 us (9% of the makespan)",
}
PLANNED_FORWARD = {
    "allgather one gather": "tied with the next (allgather, 2 head groups): 1.0% apart, within "
                            "the model's own error; this one has 42.132 us more exposed "
                            "communication (the part a slower network would stretch); a "
                            "calibrated profile of your GPUs (ringsim calibrate) or both runs "
                            "measured would separate them; all-gather exposed 113.756 us (6% of "
                            "the makespan); holds the whole K/V of the sequence",
    "ring zigzag layout": "3.0% slower than the fastest; compute-bound: 100% of the makespan "
                          "computing, at 80% of the kernel's best rate",
    "ulysses degree 8": "1.20x the fastest; all-to-all exposed 125.403 us (5% of the makespan); "
                        "K/V heads replicated 4x by a Ulysses degree above the 2 K/V heads",
    "hybrid 2 x 4, ulysses-inner, contiguous": "1.69x the fastest; K/V ring exposed 125.403 us "
                                               "of the 212.631 us exposed in all (4% of the makespan); "
                                               "causal imbalance 1.67x",
    # a ring of two holds one K/V block in flight: it fits
    "hybrid 4 x 2, ulysses-inner, zigzag": "8.7% slower than the fastest; compute-bound: 95% of the "
                                           "makespan computing, at 80% of the kernel's best rate; K/V "
                                           "heads replicated 2x by a Ulysses degree above the 2 K/V heads",
}


@pytest.fixture(scope="module")
def plans():
    from sim.planning.plan import PlanRequest, plan
    from sim.scenario.models import Model

    small = Model(name="small", layers=4, hidden=512, heads=12, kv_heads=4, head_dim=64, params=5e5)
    forward = Model(name="small", layers=4, hidden=512, heads=8, kv_heads=2, head_dim=64)
    return (plan(PlanRequest(model=small, seq=12288, nodes=2, gpus_per_node=4, memory_gb=0.06, param_shards=8)),
            plan(PlanRequest(model=forward, seq=65536, nodes=1, gpus_per_node=8, pass_="fwd", memory_gb=0.09)))


def test_planned_candidates_say_what_they_said(plans):
    for p, want in zip(plans, (PLANNED, PLANNED_FORWARD)):
        by_name = {f"{c['scheme']} {c['variant']}": c for c in p.candidates}
        for name, sentence in want.items():
            c = by_name[name]
            assert english(c["why_clauses"]) == c["why"] == sentence
            assert english(c["bound_clauses"]) == c["bound"]
            assert c["bound"] in sentence
    refused = plans[0].not_possible
    assert [(x["scheme"], x["variant"], x["reason"]) for x in refused] == [
        ("ulysses", "degree 8", "ulysses degree 8 does not divide the 12 query heads (the head count limits Ulysses)")]
    assert english(refused[0]["reason_clause"]) == refused[0]["reason"]
    assert refused[0]["reason_clause"]["reason"] == {"clause": "refused.heads", "degree": 8, "heads": 12}


def test_a_plans_reasons_survive_json(plans):
    for p in plans:
        d = p.to_dict()
        back = json.loads(json.dumps(d))
        assert back == d
        for c in back["candidates"]:
            assert english(c["why_clauses"]) == c["why"]
            assert english(c["variant_clause"]) == c["variant"]
        for x in back["not_possible"]:
            assert english(x["reason_clause"]) == x["reason"]


STEPS = {
    "TP 1 CP 1 PP 1 DP 4, ZeRO-3, recompute none": "fastest; attention 27% of the step",
    # 1.02x: within the model's error of the fastest (sim.planning.plan.TIE_WITHIN)
    "TP 2 CP 1 PP 1 DP 2, ZeRO-1, recompute none, TP overlapped": "within 5% of the fastest, a tie for "
                                                                  "the model; attention 28% of the step",
    "TP 2 CP 2 PP 1 DP 1, ZeRO-1, recompute none, CP ring, TP overlapped": "1.11x the fastest's "
                                                                           "time; attention 34% "
                                                                           "of the step",
    "TP 2 CP 1 PP 2 DP 1, ZeRO-1, recompute none, TP overlapped, 4 virtual stages": "1.09x the "
                                                                                    "fastest's "
                                                                                    "time; "
                                                                                    "attention "
                                                                                    "26% of the "
                                                                                    "step",
    "TP 1 CP 2 PP 1 DP 2, ZeRO-1, recompute none, CP allgather": "does not fit: 92.8 GB per GPU "
                                                                 "of 80 GB",
    # CP 1: no ring, no ring buffers
    "TP 1 CP 1 PP 1 DP 4, ZeRO-1, recompute selective": "does not fit: 111.2 GB per GPU of 80 GB",
}


def test_whole_step_candidates_say_what_they_said():
    from sim.planning.plan import request_from
    from sim.scenario.models import model_preset
    from sim.training.plan import label, plan_steps, request_hardware, split_clauses

    req = request_from(model_preset("llama3-8b"), seq="8k", nodes=1, gpus_per_node=4)
    hw, argv = request_hardware(req)
    cands = {label(c): c for c in plan_steps(req.model, req.seq, 1 << 17, hw, req.n_gpus, hardware_argv=argv).candidates}
    assert set(STEPS) <= set(cands)
    for split, sentence in STEPS.items():
        c = json.loads(json.dumps(cands[split]))
        assert english(c["why_clauses"]) == c["why"] == sentence
        assert english(split_clauses(c["parallel"]), LABEL_SEPARATOR) == split


def test_the_words_are_the_simulators_closed_sets():
    from sim.hardware.pcie import LINK_KIND_KEYS, LINK_KINDS
    from sim.trace.format import TRANSFER_KINDS
    from sim.training.plan import PARTS
    from sim.training.step import RECOMPUTE

    assert tuple(WORDS["kind"]) == TRANSFER_KINDS
    assert tuple(WORDS["link_kind"]) == LINK_KIND_KEYS and tuple(WORDS["link_kind"].values()) == LINK_KINDS
    assert tuple(WORDS["part"]) == PARTS
    assert tuple(WORDS["recompute"]) == RECOMPUTE


# --- the scenario's refusals of an option's value ---------------------------------------------------

REFUSALS = {
    "kv-heads": ("--kv-heads 5", {"kv-heads": 5}, "kv-heads", "--kv-heads (5) must divide heads (32)"),
    "head-groups": ("--scheme allgather --head-groups 3", {"scheme": "allgather", "head-groups": 3}, "head-groups",
                    "head groups (3) must divide the 8 K/V heads"),
    "nics-per-node": ("--nics-per-node 3", {"nics-per-node": 3}, "nics-per-node",
                      "--nics-per-node (3) must divide --gpus-per-node (8)"),
    "layout chunks": ("--seq 1000", {"seq": 1000}, "seq",
                      "sequence length 1000 does not divide into 16 equal chunks (zigzag layout on 8 GPUs); use a "
                      "multiple of 16"),
    "a hybrid's ring chunks": ("--scheme hybrid --gpus 16 --ulysses-degree 4 --seq 1000",
                               {"scheme": "hybrid", "gpus": 16, "ulysses-degree": 4, "seq": 1000}, "seq",
                               "sequence length 1000 does not divide into 32 equal chunks (zigzag layout on 4 GPUs, "
                               "each chunk 4 ways); use a multiple of 32"),
    "packed shards": ("--docs 4096 --layout striped --gpus 7", {"docs": "4096", "layout": "striped", "gpus": 7}, "seq",
                      "sequence length 131072 does not divide over 7 GPUs"),
    "degrees": ("--scheme hybrid --gpus 16 --ulysses-degree 4 --ring-degree 2",
                {"scheme": "hybrid", "gpus": 16, "ulysses-degree": 4, "ring-degree": 2}, "ulysses-degree",
                "ulysses degree 4 x ring degree 2 = 8, not the 16 GPUs"),
    "ulysses degree": ("--scheme hybrid --gpus 16 --ulysses-degree 3", {"scheme": "hybrid", "gpus": 16,
                                                                        "ulysses-degree": 3}, "ulysses-degree",
                       "ulysses degree 3 does not divide the 16 GPUs"),
    "ring degree": ("--scheme hybrid --gpus 16 --ring-degree 3", {"scheme": "hybrid", "gpus": 16, "ring-degree": 3},
                    "ring-degree", "ring degree 3 does not divide the 16 GPUs"),
    "custom GPU": ("--gpu custom", {"gpu": "custom"}, "tflops", "a custom GPU needs its achieved TFLOP/s"),
    "custom link": ("--link custom", {"link": "custom"}, "link-gbps", "a custom link needs its bandwidth in GB/s"),
    "efficiency": ("--efficiency 2", {"efficiency": 2.0}, "efficiency", "--efficiency must be in (0, 1], got 2.0"),
    "tflops": ("--tflops -1", {"tflops": -1.0}, "tflops", "--tflops must be a positive finite number, got -1.0"),
    "link-gbps": ("--link-gbps -3", {"link-gbps": -3.0}, "link-gbps",
                  "--link-gbps must be a positive finite number, got -3.0"),
    "nic-gbps": ("--nic-gbps -1.5", {"nic-gbps": -1.5}, "nic-gbps",
                 "--nic-gbps must be a positive finite number, got -1.5"),
    "link-latency-us": ("--link-latency-us -1", {"link-latency-us": -1.0}, "link-latency-us",
                        "--link-latency-us must be a non-negative finite number, got -1.0"),
    "overhead-us": ("--overhead-us -2.5", {"overhead-us": -2.5}, "overhead-us",
                    "--overhead-us must be a non-negative finite number, got -2.5"),
    "documents over the sequence": ("--docs 100000000", {"docs": "100000000"}, "docs",
                                    "the documents (100,000,000 tokens) exceed the sequence of 131,072 tokens"),
    "documents short of the sequence": ("--docs 1000", {"docs": "1000"}, "docs",
                                        "the documents (1,000 tokens) do not fill the sequence of 131,072 tokens: the "
                                        "list repeats whole, so its sum must divide the sequence"),
    "not a length": ("--docs 100,abc", {"docs": "100,abc"}, "docs",
                     "document 2 of the document list is not a length: 'abc'"),
    "length zero": ("--docs sample:100,0", {"docs": "sample:100,0"}, "docs", "document 2 of the sample has length zero"),
    "negative length": ("--docs 100,-3", {"docs": "100,-3"}, "docs",
                        "document 2 of the document list has a negative length (-3)"),
    "a parameter lognormal does not take": ("--docs lognormal:mean=3", {"docs": "lognormal:mean=3"}, "docs",
                                            "lognormal takes median=, sigma=; got 'mean=3'"),
    "a parameter lognormal needs": ("--docs lognormal:median=3", {"docs": "lognormal:median=3"}, "docs",
                                    "lognormal needs sigma="),
    "unknown distribution": ("--docs zipf:3", {"docs": "zipf:3"}, "docs",
                             "unknown document distribution 'zipf'; give a list of lengths, "
                             "lognormal:median=M,sigma=S or file:PATH"),
    "sigma not a number": ("--docs lognormal:median=1000,sigma=x", {"docs": "lognormal:median=1000,sigma=x"}, "docs",
                           "lognormal sigma must be a number, got 'x'"),
    "sigma out of range": ("--docs lognormal:median=1000,sigma=20", {"docs": "lognormal:median=1000,sigma=20"},
                           "docs", "lognormal sigma must be between 0 and 10, got 20"),
}
"""What the command line refuses (simulate's arguments, the dashboard's controls that say the same,
the option the refusal is about, and the line the command line printed before its refusals
carried clauses, copied here from that version's output)."""


@pytest.mark.parametrize("name", REFUSALS)
def test_a_refused_option_value_carries_its_clause_and_option(name, capsys):
    from sim.cli.main import main
    from sim.cli.options import simulate_parser, values_from_args
    from sim.scenario.resolve import scenario_of

    args, _, option, sentence = REFUSALS[name]
    assert main(["simulate", *args.split()]) == 2
    assert capsys.readouterr().err.strip() == f"ringsim: error: {sentence}"
    with pytest.raises(RingsimError) as e:
        scenario_of(values_from_args(simulate_parser().parse_args(args.split())))
    assert str(e.value) == sentence
    assert english(e.value.reason) == sentence and e.value.reason["option"] == option
    assert json.loads(json.dumps(e.value.reason)) == e.value.reason
    back = pickle.loads(pickle.dumps(e.value))
    assert (str(back), back.reason) == (sentence, e.value.reason)


def test_a_dataclass_refusal_spells_its_fields_and_resolve_names_the_options():
    """Made directly, a refusal says the dataclass's fields (its clause says the same); through the
    options, their flags and the options they are."""
    from sim.hardware.cluster import Hardware, Link
    from sim.scenario.config import Workload

    with pytest.raises(RingsimError) as e:
        Workload(heads=32, kv_heads=5)
    assert str(e.value) == english(e.value.reason) == "kv_heads (5) must divide heads (32)"
    assert "option" not in e.value.reason
    with pytest.raises(RingsimError) as e:
        Link(name="custom", bandwidth_gbps=-2.0)
    assert str(e.value) == english(e.value.reason) == "bandwidth_gbps must be a positive finite number, got -2.0"
    with pytest.raises(RingsimError) as e:
        Hardware(gpus_per_node=8, nics_per_node=3)
    assert e.value.reason == clause("refused.must-divide", field="nics_per_node", value=3,
                                    other_field="gpus_per_node", other_value=8)
