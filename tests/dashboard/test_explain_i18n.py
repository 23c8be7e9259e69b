"""The simulator's sentences in the page's language (dashboard/explain.py): what bounds a
compared run and why a plan's candidate wins or loses. In English each is the
simulator's own sentence, character for character; in Indonesian none of the English
clauses' words is left and every number has its decimal comma."""

from __future__ import annotations

import re

import pytest

from dashboard import explain
from dashboard.i18n import Translator, catalog
from dashboard.plan import DEFAULTS, plan_data
from sim.cli.options import simulate_parser, values_from_args
from sim.planning.compare import compare_scheme_rows
from sim.scenario.resolve import scenario_of
from sim.schemes import names as scheme_names
from sim.trace.metrics import EXPLAIN_TEMPLATES, explain_clauses, explain_text
from sim.trace.metrics import explain as sim_explain

EN, ID = Translator("en"), Translator("id")
SHARED = {"makespan", "kernel", "model", "head", "pcie", "ringsim", "calibrate", *scheme_names()}
"""Words the Indonesian sentences keep: the scheduling term, loanwords, a command, the
schemes' names (as the tables show them)."""


def _words(texts) -> set[str]:
    return {w.lower() for text in texts for w in re.findall(r"[A-Za-z]{4,}", re.sub(r"{\w+}", "", text))} - SHARED


CLAUSE_WORDS = _words(EXPLAIN_TEMPLATES.values())
PLAN_WORDS = CLAUSE_WORDS | _words(v for k, v in catalog("en").items() if k.startswith(("plan.why.", "plan.reason.")))


def _english_left(text: str, words: set[str]) -> list[str]:
    return sorted(w for w in words if re.search(rf"\b{w}\b", text, re.IGNORECASE))


def _indonesian_numbers(english: str, indonesian: str) -> None:
    """Each decimal number of the English sentence is in the Indonesian one with a comma,
    and no number there has a decimal point."""
    decimals = re.findall(r"\d+\.\d+", english)
    for number in decimals:
        assert number.replace(".", ",") in indonesian, number
    assert not re.search(r"\d\.\d", indonesian)


# (simulate's arguments, scheme, variant, the clauses that bound it)
SCENARIOS = {
    "ring, compute-bound": ("--gpus 8 --seq 65536", "ring", "zigzag", ["compute-bound-rate"]),
    "hybrid, the network between nodes": ("--gpus 16 --gpus-per-node 8 --seq 131072 --inter-link ib-hdr",
                                          "hybrid", "4 x 4 ring-inner", ["exposed-across-nodes"]),
    "all-gather, the gather exposed": ("--gpus 8 --seq 16384", "allgather", "one gather", ["exposed"]),
    "PCIe node, the socket link": ("--cluster pcie-l20 --p2p on --socket-link upi-skl --seq 65536",
                                   "hybrid", "4 x 2 ring-inner", ["exposed", "pcie"]),
}


@pytest.fixture(scope="module")
def rows():
    parser = simulate_parser()
    out = {}
    for name, (args, scheme, variant, _) in SCENARIOS.items():
        compared = compare_scheme_rows(scenario_of(values_from_args(parser.parse_args(args.split()))))
        out[name] = next(r for r in compared if (r["scheme"], r["variant"]) == (scheme, variant))
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_what_bounds_a_run_in_each_language(rows, name):
    row = rows[name]
    assert [key for key, _ in explain_clauses(row)] == SCENARIOS[name][3]
    english, indonesian = explain.row_bound(EN, row), explain.row_bound(ID, row)
    assert english == sim_explain(row) == row["explanation"]
    assert explain.bound(EN, explain_clauses(row)) == english
    assert _english_left(indonesian, CLAUSE_WORDS) == []
    _indonesian_numbers(english, indonesian)
    # read back from the sentence alone (a plan's candidates carry only that)
    assert explain.sentence_bound(ID, english) == indonesian


def test_the_socket_link_by_its_indonesian_name(rows):
    indonesian = explain.row_bound(ID, rows["PCIe node, the socket link"])
    assert "dibatasi oleh tautan antar-soket PCIe (tautan soket 0->1 di node 0)" in indonesian


def test_every_clause_in_indonesian():
    params = {"kind": "kv", "exposed_s": 0.0123456, "share": 0.4, "link_kind": "root complex",
              "link": "node 1 socket 0 root complex in lane 2", "ratio": 1.5, "computing": 0.95, "rate": 0.8,
              "peak_bytes": 100.5 * 2 ** 30, "capacity_gb": 79.6}
    for key, template in EXPLAIN_TEMPLATES.items():
        fields = {name: params[name] for name in re.findall(r"{(\w+)}", template)}
        assert catalog("en")[f"why.{key}"] == template
        english, indonesian = explain.bound(EN, [(key, fields)]), explain.bound(ID, [(key, fields)])
        assert english == explain_text([(key, fields)])
        assert _english_left(indonesian, CLAUSE_WORDS) == [], key
        _indonesian_numbers(english, indonesian)


def test_link_names():
    assert explain.link_name(ID, "node 1 socket 0 root complex in lane 2") == \
        "kompleks akar soket 0 arah masuk di node 1 jalur 2"
    assert explain.link_name(ID, "node 0 switch 3 uplink down") == "tautan naik switch 3 arah turun di node 0"
    assert explain.link_name(ID, "node 0 socket 1 host memory") == "memori host soket 1 di node 0"
    for name in ("node 1 socket 0 root complex in lane 2", "node 0 switch 3 uplink down"):
        assert explain.link_name(EN, name) == name
    assert explain.link_name(ID, "a NVLink switch") == "a NVLink switch"


def test_a_sentence_the_catalogs_do_not_know_stays_as_the_simulator_wrote_it():
    assert explain.sentence_bound(ID, "an error the sweep recorded") == "an error the sweep recorded"
    assert explain.reason(ID, "the trace's header has no ulysses and ring degrees") == \
        "the trace's header has no ulysses and ring degrees"
    assert explain.variant(ID, "pipelined over 4 head groups") == "pipelined over 4 head groups"


# --- the plan ----------------------------------------------------------------------------------

PLANS = {
    "one node": {"plan-seq": "32k"},
    "two nodes, 12 heads": {"plan-seq": "24k", "plan-model": "custom", "plan-heads": 12, "plan-kv-heads": 4,
                            "plan-nodes": 2},
    "none fits": {"plan-seq": "1M"},
    # 3 GB usable: only the four candidates of least memory fit, the fastest 12% ahead
    "little memory": {"plan-seq": "32k", "plan-headroom": "77GB"},
}


@pytest.fixture(scope="module")
def plans():
    return {name: plan_data(dict(DEFAULTS, **changes)) for name, changes in PLANS.items()}


@pytest.mark.parametrize("name", PLANS)
def test_why_a_candidate_wins_or_loses_in_each_language(plans, name):
    data = plans[name]
    for c in data["candidates"]:
        assert explain.plan_why(EN, c, data) == c["why"]
        indonesian = explain.plan_why(ID, c, data)
        assert indonesian != c["why"]                        # built, not the English kept
        assert _english_left(indonesian, PLAN_WORDS) == [], indonesian
        _indonesian_numbers(c["why"], indonesian)


def test_the_plans_say_each_kind_of_sentence(plans):
    whys = [c["why"] for data in plans.values() for c in data["candidates"]]
    for start in ("tied with the next", "fastest that fits", "does not fit: ", "slower than the fastest",
                  "x the fastest", "holds the whole K/V"):
        assert any(start in why for why in whys), start
    tie = explain.plan_why(ID, plans["one node"]["candidates"][0], plans["one node"])
    assert tie.startswith("seri dengan berikutnya (hybrid, 4 x 2, ulysses-inner, zigzag): selisih ")


def test_why_a_candidate_is_not_possible(plans):
    refused = plans["two nodes, 12 heads"]["not_possible"]
    assert refused
    for x in refused:
        english, indonesian = explain.reason(EN, x["reason"]), explain.reason(ID, x["reason"])
        assert english == x["reason"]
        assert indonesian.startswith("derajat ulysses ") and indonesian.endswith(" (jumlah head membatasi Ulysses)")
        assert _english_left(indonesian, PLAN_WORDS) == []
    assert explain.variant(ID, "degree 16") == "derajat 16"
    assert explain.variant(ID, "zigzag layout") == "tata letak zigzag"
    assert explain.variant(ID, "8 x 2, ring-inner, zigzag") == "8 x 2, ring-inner, zigzag"


def test_other_refusals_in_indonesian():
    cases = {
        "sequence length 1000 does not divide into 16 chunks for zigzag on 8 ranks":
            "panjang sekuens 1000 tidak terbagi menjadi 16 potongan untuk zigzag pada 8 rank",
        "sequence length 1000 does not divide into 16 equal chunks (allgather on 8 GPUs); use a multiple of 16":
            "panjang sekuens 1000 tidak terbagi menjadi 16 potongan sama besar (allgather pada 8 GPU); pakai kelipatan 16",
        "ulysses degree 16 and 12 K/V heads: one must divide the other (K/V heads are replicated when the degree "
        "is larger)": "derajat ulysses 16 dan 12 head K/V: salah satunya harus membagi habis yang lain (head K/V "
                      "direplikasi bila derajatnya lebih besar)",
    }
    for english, indonesian in cases.items():
        assert explain.reason(EN, english) == english
        assert explain.reason(ID, english) == indonesian


# --- on the page ---------------------------------------------------------------------------------


def _texts(node) -> str:
    """The words a component tree shows (its string children), not its class names."""
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return " ".join(_texts(x) for x in node)
    if isinstance(node, dict):
        return _texts(node.get("props", {}).get("children", ""))
    return ""


def test_the_views_show_the_sentences_in_indonesian(client, plans):
    from dashboard.state import defaults

    store = {"values": defaults() | {"gpus": 4, "seq": 8192, "heads": 8, "kv-heads": 4, "head-dim": 64}}
    status, out = client.call("schemes.figure", {"scenario.data": store, "profile.data": None,
                                                 "tabs.value": "schemes", "lang.value": "id"}, ["tabs.value"])
    assert status == 200
    shown = _texts(out["schemes-table"]["children"]) + _texts(out["schemes-why"]["children"])
    assert "dari makespan" in shown and _english_left(shown, CLAUSE_WORDS) == []
    data = plans["two nodes, 12 heads"]
    status, out = client.call("plan-chart.figure", {"plan-result.data": data, "lang.value": "id",
                                                    "plan-top.value": 5}, ["plan-result.data"])
    assert status == 200
    shown = _texts(out["plan-table"]["children"]) + _texts(out["plan-summary"]["children"])
    assert "seri dengan berikutnya" in shown and "jumlah head membatasi Ulysses" in shown
    assert _english_left(shown, PLAN_WORDS) == []


def test_the_whole_step_plans_sentences_in_both_languages():
    """sim.training.plan's own sentence in English, rebuilt in Indonesian with a decimal comma,
    for the fastest, a tie, a slower one and one that does not fit."""
    from dashboard.explain import step_why
    from sim.planning.plan import request_from
    from sim.scenario.models import model_preset
    from sim.training.plan import plan_steps, request_hardware

    req = request_from(model_preset("llama3-8b"), seq="8k", nodes=2)
    hw, argv = request_hardware(req)
    plan = plan_steps(req.model, req.seq, 1 << 21, hw, req.n_gpus, hardware_argv=argv)
    cands = plan.candidates
    assert len(cands) > 3
    en, id_ = Translator("en"), Translator("id")
    for c in cands:
        assert step_why(en, c, cands[0], plan.memory_bytes) == c["why"]
        text = step_why(id_, c, cands[0], plan.memory_bytes)
        assert text != c["why"]
        assert not any(word in text for word in ("fastest", "of the step", "does not fit"))
    slower = next(c for c in cands[1:] if "x the fastest" in c["why"])
    assert "," in step_why(id_, slower, cands[0], plan.memory_bytes).split("x")[0]


def test_the_compared_variants_in_both_languages():
    en, id_ = Translator("en"), Translator("id")
    assert explain.compared_variant(id_, "allgather", "one gather") == "satu pengumpulan"
    assert explain.compared_variant(id_, "allgather", "8 head groups") == "8 kelompok head"
    assert explain.compared_variant(id_, "ulysses", "degree 8") == "derajat 8"
    assert explain.compared_variant(en, "ulysses", "degree 8") == "degree 8"
    assert explain.compared_variant(id_, "hybrid", "4 x 2 ring-inner") == "4 x 2 ring-inner"
    assert explain.compared_variant(id_, "ring", "doc-contiguous") != "doc-contiguous"


@pytest.mark.parametrize("lang, words", [("en", "2 GPUs a switch, 4 a socket, P2P under a switch"),
                                         ("id", "2 GPU per switch, 4 per soket, P2P di bawah satu switch")])
def test_the_scenario_line_names_a_pcie_nodes_fabric(client, lang, words):
    from dashboard.state import defaults

    values = dict(defaults(), cluster="pcie-l20", gpu="L20", link="pcie4")
    _, out = client.call("scenario-line.children", {
        "scenario.data": {"values": values}, "profile.data": None, "tabs.value": "timeline",
        "measured.data": None, "lang.value": lang}, ["lang.value"])
    line = out["scenario-line"]["children"]
    assert words in line and "L20 / PCIe 4.0" in line


def test_the_layout_comparison_and_the_cards_in_indonesian(client):
    """Compare layouts' chart and table and the summary cards: Indonesian words, and the
    decimal comma, where the English page keeps its own."""
    from dashboard.state import defaults

    store = {"values": dict(defaults(), gpus=4, seq=8192)}
    out = {}
    for lang in ("en", "id"):
        _, fig = client.call("compare.figure", {"scenario.data": store, "profile.data": None,
                                                "tabs.value": "compare", "lang.value": lang}, ["lang.value"])
        _, cards = client.call("m-makespan.children", {"scenario.data": store, "profile.data": None,
                                                       "tabs.value": "timeline", "measured.data": None,
                                                       "lang.value": lang}, ["lang.value"])
        out[lang] = (fig["compare"]["figure"]["layout"]["title"]["text"], _texts(fig["compare-table"]["children"]),
                     cards["m-efficiency"]["children"])
    assert out["en"][0].startswith("Which layout wins") and "." in out["en"][2]
    title, table, eff = out["id"]
    assert title.startswith("Tata letak yang unggul") and "overlap" not in title
    assert "tata letak" in table and "layout" not in table and "," in eff and "." not in eff
