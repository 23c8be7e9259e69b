"""The simulator's reasons in the page's language (dashboard/explain.py): every clause of
sim.reasons, what bounds a compared run, why a plan's candidate wins, loses or is not possible,
a variant and a whole step's split. In English each is the simulator's own sentence, character
for character but for its times, written as the page writes times; in Indonesian none of the
English sentences' words is left and every number has its decimal comma."""

from __future__ import annotations

import dataclasses
import re

import pytest

from dashboard import explain
from dashboard.i18n import Translator
from dashboard.views.plan import DEFAULTS, plan_data
from sim.cli.options import simulate_parser, values_from_args
from sim.planning.compare import compare_scheme_rows
from sim.reasons import ENGLISH, ENGLISH_LANGUAGE, WORDS, clause, english, render
from sim.scenario.resolve import scenario_of
from sim.schemes import names as scheme_names
from tests.dashboard.conftest import table_text
from tests.sim.test_reasons import example

EN, ID = Translator("en"), Translator("id")
SHARED = {"makespan", "kernel", "model", "head", "pcie", "ringsim", "calibrate", "cache", "host", "node", "rank",
          "shard", "switch", "token", "virtual", "zero", "pipeline", "optimizer", "gather", "reduce", "scatter",
          *scheme_names(),
          "folder", "batch", "metadata", "input", "kineto", "torch", "profiler", "json", "gzip", "parquet", "pyarrow",
          "nccl", "dtype", "traceevents", "distributedinfo", "profilerstep", "dims", "transfer"}
"""Words the Indonesian sentences keep: the scheduling term, loanwords Indonesian ML writing
keeps, a command, ZeRO's name, the collectives' names (all-gather, reduce-scatter), the
schemes' names (as the tables show them); of a profiled run, the tools', formats' and libraries'
names and a trace's own entries (traceEvents, distributedInfo, Input Dims, a dtype)."""


def _words(texts) -> set[str]:
    return {w.lower() for text in texts for w in re.findall(r"[A-Za-z]{4,}", re.sub(r"{\w+}", "", text))} - SHARED


ENGLISH_WORDS = _words([*ENGLISH.values(), *(text for words in WORDS.values() for text in words.values())])
"""Every word of sim.reasons' English that Indonesian does not keep."""


PAGE_ENGLISH = dataclasses.replace(ENGLISH_LANGUAGE, seconds=EN.time)
"""sim.reasons' English with times as the page writes every time (three significant digits,
µs), where the command line writes "413.013 us"."""


def _as_page(clauses) -> str:
    return render(clauses, PAGE_ENGLISH)


def test_a_reason_s_times_are_the_page_s():
    c = clause("bound.exposed", kind="kv", exposed_s=0.000413013, share=0.08,
               of_all=clause("bound.of-all", exposed_s=0.000462))
    assert english(c) == "K/V ring exposed 413.013 us of the 462.000 us exposed in all (8% of the makespan)"
    assert explain.say(EN, c) == "K/V ring exposed 413 µs of the 462 µs exposed in all (8% of the makespan)"
    assert explain.say(ID, c) == "cincin K/V terekspos 413 µs dari 462 µs yang terekspos seluruhnya (8% dari waktu " \
                                 "penyelesaian)"


def _english_left(text: str) -> list[str]:
    return sorted(w for w in ENGLISH_WORDS if re.search(rf"\b{w}\b", text, re.IGNORECASE))


def _indonesian_numbers(english: str, indonesian: str) -> None:
    """Each decimal number of the English sentence is in the Indonesian one with a comma,
    and no number there has a decimal point."""
    decimals = re.findall(r"\d+\.\d+", english)
    for number in decimals:
        assert number.replace(".", ",") in indonesian, number
    assert not re.search(r"\d\.\d", indonesian)


@pytest.mark.parametrize("key", ENGLISH)
def test_every_clause_in_both_languages(key):
    c = example(key)
    page = explain.say(EN, c)
    assert page == _as_page(c)
    indonesian = explain.say(ID, c)
    assert indonesian != page or not _words([ENGLISH[key]])
    assert _english_left(indonesian) == [], indonesian
    _indonesian_numbers(page, indonesian)


def test_every_word_in_both_languages():
    for field, words in WORDS.items():
        for word, text in words.items():
            assert EN(f"why.{field}.{word}") == text
            assert _english_left(ID(f"why.{field}.{word}")) == [], (field, word)
    assert explain.say(ID, clause("step.share", part="pp_bubble_s", share=0.25)) == "gelembung pipa 25% dari langkah"


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
        compared = compare_scheme_rows(scenario_of(values_from_args(parser.parse_args(args.split()))),
                                       schemes=[scheme])
        out[name] = next(r for r in compared if (r["scheme"], r["variant"]) == (scheme, variant))
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_what_bounds_a_run_in_each_language(rows, name):
    row = rows[name]
    assert [c["clause"] for c in row["explanation_clauses"]] == [f"bound.{key}" for key in SCENARIOS[name][3]]
    english_text, indonesian = explain.row_bound(EN, row), explain.row_bound(ID, row)
    assert english_text == _as_page(row["explanation_clauses"])
    assert _english_left(indonesian) == []
    _indonesian_numbers(english_text, indonesian)


def test_the_socket_link_by_its_indonesian_name(rows):
    indonesian = explain.row_bound(ID, rows["PCIe node, the socket link"])
    assert "dibatasi oleh tautan antar-soket PCIe (tautan soket 0->1 di simpul 0)" in indonesian


def test_link_names():
    link = clause("link.in-node", node=1, resource=clause("link.root", socket=0, direction="in"),
                  on_lane=clause("link.lane", lane=2))
    assert explain.say(ID, link) == "kompleks akar soket 0 arah masuk di simpul 1 jalur 2"
    assert explain.say(EN, link) == "node 1 socket 0 root complex in lane 2"
    uplink = clause("link.in-node", node=0, resource=clause("link.uplink", switch=3, direction="down"), on_lane=None)
    assert explain.say(ID, uplink) == "tautan naik sakelar 3 arah turun di simpul 0"
    memory = clause("link.in-node", node=0, resource=clause("link.memory", socket=1), on_lane=None)
    assert explain.say(ID, memory) == "memori inang soket 1 di simpul 0"


def test_a_refusal_sim_reasons_does_not_know_stays_as_the_simulator_wrote_it():
    text = "the trace's header has no ulysses and ring degrees"
    assert explain.refusal(ID, text, None) == text
    assert explain.variant(ID, None) == ""


# --- the plan ----------------------------------------------------------------------------------

PLANS = {
    "one node": {"plan-seq": "32k"},
    "two nodes, 12 heads": {"plan-seq": "20k", "plan-model": "custom", "plan-heads": 12, "plan-kv-heads": 4,
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
        page = explain.plan_why(EN, c)
        assert page == _as_page(c["why_clauses"])
        assert explain.variant(EN, c["variant_clause"]) == c["variant"]
        indonesian = explain.plan_why(ID, c)
        assert indonesian != page
        assert _english_left(indonesian) == [], indonesian
        _indonesian_numbers(page, indonesian)


def test_the_plans_say_each_kind_of_sentence(plans):
    said = {x["clause"] for data in plans.values() for c in data["candidates"] for x in c["why_clauses"]}
    assert {"plan.tie", "plan.fastest", "plan.no-fit", "plan.slower", "plan.times", "plan.holds-all"} <= said
    tie = explain.plan_why(ID, plans["two nodes, 12 heads"]["candidates"][0])
    assert tie.startswith("seri dengan berikutnya (") and "): selisih " in tie


def test_why_a_candidate_is_not_possible(plans):
    refused = plans["two nodes, 12 heads"]["not_possible"]
    assert refused
    for x in refused:
        assert explain.refusal(EN, x["reason"], x["reason_clause"]) == x["reason"]
        indonesian = explain.refusal(ID, x["reason"], x["reason_clause"])
        assert indonesian.startswith("derajat Ulysses ") and indonesian.endswith(" (jumlah kepala membatasi Ulysses)")
        assert _english_left(indonesian) == []
    assert explain.variant(ID, clause("variant.degree", degree=16)) == "derajat 16"
    assert explain.variant(ID, clause("variant.layout", layout="zigzag")) == "tata letak zigzag"
    assert explain.variant(ID, clause("variant.hybrid", ulysses=8, ring=2, placement="ring-inner",
                                      layout="zigzag")) == "8 x 2, cincin di dalam simpul, zigzag"


def test_other_refusals_in_indonesian():
    cases = [
        (clause("refused.chunks", seq=1000, chunks=16, layout="zigzag", ranks=8),
         "panjang urutan 1000 tidak terbagi menjadi 16 potongan untuk zigzag pada 8 proses"),
        (clause("refused.gather-chunks", seq=1000, chunks=16, gpus=8, multiple=16),
         "panjang urutan 1000 tidak terbagi menjadi 16 potongan sama besar (all-gather pada 8 GPU); pakai kelipatan 16"),
        # thousands grouped and decimals marked as Indonesian writes them: 131.072 is 131072
        (clause("refused.docs-exceed", total_tokens=140000, seq_tokens=131072),
         "dokumen (140.000 token) melebihi urutan 131.072 token"),
        (clause("refused.kv-heads", degree=16, kv_heads=12),
         "derajat Ulysses 16 dan 12 kepala K/V: salah satunya harus membagi habis yang lain (kepala K/V direplikasi "
         "bila derajatnya lebih besar)"),
    ]
    for c, indonesian in cases:
        assert explain.refusal(EN, "as the simulator wrote it", c) == english(c)
        assert explain.refusal(ID, "as the simulator wrote it", c) == indonesian


def test_a_refused_compared_variant_says_why_in_indonesian():
    """compare_scheme_rows's refused row carries the configuration's reason as a clause."""
    rows = compare_scheme_rows(scenario_of(values_from_args(simulate_parser().parse_args(
        "--gpus 8 --seq 16384 --heads 12 --kv-heads 4 --head-dim 64".split()))), schemes=["ulysses"])
    refused = [r for r in rows if "refused" in r]
    assert [r["refused_clause"] for r in refused] == [clause("refused.heads", degree=8, heads=12)]
    for r in refused:
        assert explain.refusal(EN, r["refused"], r["refused_clause"]) == r["refused"]
        assert _english_left(explain.refusal(ID, r["refused"], r["refused_clause"])) == []


# --- on the page ---------------------------------------------------------------------------------


def _texts(node) -> str:
    """The words a component tree shows (its string children), not its class names."""
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return " ".join(_texts(x) for x in node)
    if isinstance(node, dict) and node.get("type") == "Markdown":
        return table_text(node)
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
    assert "dari waktu penyelesaian" in shown and _english_left(shown) == []
    data = plans["two nodes, 12 heads"]
    status, out = client.call("plan-chart.figure", {"plan-result.data": data, "lang.value": "id",
                                                    "plan-top.value": 5}, ["plan-result.data"])
    assert status == 200
    shown = _texts(out["plan-table"]["children"]) + _texts(out["plan-summary"]["children"])
    assert "seri dengan berikutnya" in shown and "jumlah kepala membatasi Ulysses" in shown
    assert _english_left(shown) == []


def test_the_whole_step_plans_sentences_in_both_languages():
    """sim.training.plan's own sentence in English, said in Indonesian with a decimal comma,
    for the fastest, a tie, a slower one and one that does not fit."""
    from sim.planning.plan import request_from
    from sim.scenario.models import model_preset
    from sim.training.plan import label, plan_steps, request_hardware

    req = request_from(model_preset("llama3-8b"), seq="8k", nodes=2)
    hw, argv = request_hardware(req)
    plan = plan_steps(req.model, req.seq, 1 << 21, hw, req.n_gpus, hardware_argv=argv)
    cands = plan.candidates
    assert len(cands) > 3
    for c in cands:
        assert explain.step_why(EN, c) == c["why"]
        assert explain.step_split(EN, c) == label(c)
        text = explain.step_why(ID, c)
        assert text != c["why"]
        assert _english_left(text) == [] and _english_left(explain.step_split(ID, c)) == []
    slower = next(c for c in cands[1:] if "x the fastest" in c["why"])
    assert "," in explain.step_why(ID, slower).split("x")[0]


def test_the_compared_variants_in_both_languages():
    assert explain.variant(ID, clause("variant.one-gather")) == "satu pengumpulan"
    assert explain.variant(ID, clause("variant.head-groups", groups=8)) == "8 kelompok kepala"
    assert explain.variant(ID, clause("variant.degree", degree=8)) == "derajat 8"
    assert explain.variant(EN, clause("variant.degree", degree=8)) == "degree 8"
    assert explain.variant(ID, clause("variant.split-placed", ulysses=4, ring=2, placement="ring-inner")) == \
        "4 x 2 cincin di dalam simpul"
    assert explain.variant(ID, clause("variant.ring", layout="doc-contiguous")) == "berurutan per dokumen"


@pytest.mark.parametrize("lang, words", [("en", "2 GPUs a switch, 4 a socket, P2P under a switch"),
                                         ("id", "2 GPU per sakelar, 4 per soket, P2P di bawah satu sakelar")])
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
