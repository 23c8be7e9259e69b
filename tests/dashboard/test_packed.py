"""Packed documents on the page: the controls, the layout strip's documents, the block
map's token panel and the layouts' balance, against masks and layouts built here with
numpy from their definitions (docs/packed.md)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dashboard import compute, i18n
from dashboard.figures.block_map import block_map, mask_bins
from dashboard.figures.documents import document_balance
from dashboard.figures.layout_strip import layout_strip
from dashboard.i18n import LANGUAGES, Translator, catalog
from dashboard.state import (
    ControlError,
    defaults,
    message,
    query_from_values,
    scenario_from_values,
    shown_layouts,
    values_from_query,
)
from dashboard.views.language import page_texts
from sim.engine.play import simulate
from sim.layouts.packed import Packed, packed_of
from sim.scenario.config import Scenario, Workload
from tests.dashboard.conftest import controls, small_scenario

SMALL = {"gpus": 4, "seq": 16384, "heads": 8, "kv-heads": 2, "head-dim": 64}
NEW_KEYS = ("ctl.docs.label", "ctl.docs.help", "ctl.docs.placeholder", "ctl.seed.label", "ctl.seed.help",
            "ctl.window.label", "ctl.window.help", "ctl.window.placeholder", "opt.layout.doc-contiguous",
            "opt.layout.balanced", "strip.docs", "strip.first-packed", "strip.document", "strip.row.documents",
            "strip.row.gpus", "strip.row.positions", "docs.one", "docs.many", "docs.window", "docs.title",
            "docs.work", "docs.ratio", "docs.pairs", "docs.mean", "docs.worst", "docs.this")



def _store(**changes):
    return {"values": defaults() | SMALL | changes}



def _mask(bounds: list[int], causal: bool = True, window: int | None = None) -> np.ndarray:
    """(S, S) the pairs a query keeps: its own document, at or before it, within the window."""
    t = np.arange(bounds[-1])
    doc = np.searchsorted(np.asarray(bounds), t, side="right")
    keep = doc[:, None] == doc[None, :]
    if causal:
        keep &= t[None, :] <= t[:, None]
    if window is not None:
        keep &= np.abs(t[:, None] - t[None, :]) < window
    return keep


# --- the controls -------------------------------------------------------------------

def test_the_default_scenario_has_one_document():
    sc = scenario_from_values(defaults())
    assert not sc.packed and sc.workload.docs is None and sc.workload.window is None
    assert query_from_values(defaults()) == ""
    assert shown_layouts(None, None, "zigzag") == ("contiguous", "striped", "zigzag")


def test_the_controls_make_a_packed_scenario_and_a_link_to_it(client):
    values = defaults() | {"docs": " lognormal:median=4k,sigma=1.2 ", "seed": 3, "window": 2048,
                           "layout": "balanced"}
    sc = scenario_from_values(values)
    assert sc.packed and sc.layout == "balanced"
    assert (sc.workload.docs, sc.workload.seed, sc.workload.window) == ("lognormal:median=4k,sigma=1.2", 3, 2048)
    query = query_from_values(values)
    back, ignored = values_from_query(query)
    assert ignored == [] and scenario_from_values(back).describe() == sc.describe()
    # through the page: the store takes the values, the URL names them
    status, out = client.call("scenario.data", controls(docs="256,7392,544", seed=2), ["docs.value"])
    assert status == 200 and out["scenario"]["data"]["values"]["docs"] == "256,7392,544"
    assert "docs=256%2C7392%2C544" in out["url"]["search"] and "seed=2" in out["url"]["search"]
    assert "docs-msg" not in out                     # no message shown before, none now
    # a cleared text box is one document again, and no part of the link
    assert query_from_values(defaults() | {"docs": "  "}) == ""
    assert not scenario_from_values(defaults() | {"docs": ""}).packed


def test_the_layouts_offered_follow_the_documents():
    labels = {lang: [o["value"] for o in dict((cid, v) for cid, prop, v in page_texts(lang) if prop == "options")
                     ["layout"]] for lang in LANGUAGES}
    assert labels["en"] == labels["id"] == ["contiguous", "striped", "zigzag"]
    with_docs = dict((cid, v) for cid, prop, v in page_texts("id", shown_layouts("1k,3k", None, "zigzag"))
                     if prop == "options")["layout"]
    assert [o["value"] for o in with_docs][-2:] == ["doc-contiguous", "balanced"]
    assert [o["label"] for o in with_docs][-2:] == ["berurutan per dokumen", "seimbang"]
    assert "balanced" in shown_layouts(None, 512, "zigzag") and "balanced" in shown_layouts("", None, "balanced")


@pytest.mark.parametrize("changes, control", [
    ({"docs": "lognormal:median=abc,sigma=1"}, "docs"),
    ({"docs": "1000"}, "docs"),                     # does not fill 131,072 tokens
    ({"docs": "zipf:a=2"}, "docs"),
    ({"docs": "file:/etc/passwd"}, "docs"),
    ({"docs": "4k,-5"}, "docs"),
    ({"docs": "lognormal:median=4k,sigma=1.2", "seed": -1}, "seed"),
    ({"window": 0}, "window"),
])
def test_bad_documents_are_one_line_beside_their_control(client, changes, control):
    with pytest.raises(ControlError) as err:
        scenario_from_values(defaults() | changes)
    assert err.value.control == control and "\n" not in str(err.value)
    status, out = client.call("scenario.data", controls(**changes), [f"{control}.value"])
    assert status == 200
    assert out[f"{control}-msg"]["children"] == message(Translator("en"), err.value)
    assert "scenario" not in out                                # the views keep the last valid one
    assert "last valid scenario" in out["banner"]["children"]


# --- the layout strip ---------------------------------------------------------------

def test_the_strip_marks_the_documents_and_their_holders(client):
    docs, seq, n = [1024, 3072], SMALL["seq"], SMALL["gpus"]
    bounds = np.concatenate([[0], np.cumsum(np.tile(docs, seq // sum(docs)))])
    store = _store(docs="1024,3072", layout="doc-contiguous")
    status, out = client.call("layout-strip.figure", {"scenario.data": store, "lang.value": "en"}, ["scenario.data"])
    assert status == 200
    layout = out["layout-strip"]["figure"]["layout"]
    assert layout["meta"]["doc_bounds"] == bounds[1:-1].tolist()
    assert "; 8 documents, median 2,048, longest 3,072 tokens" in layout["title"]["text"]
    # the figure the callback draws: a line at every boundary, each token on its GPU
    sc = scenario_from_values(store["values"])
    split = compute.token_split(sc)
    owner, drawn_bounds = compute.token_holders(sc, split)
    fig = layout_strip(split["layout"], seq, split["n"], owner=owner, bounds=drawn_bounds)
    lines = [tr for tr in fig.data if tr.type == "scatter"][0]
    assert sorted(set(np.asarray(lines.x)[~np.isnan(lines.x)].tolist())) == bounds[1:-1].tolist()
    # doc-contiguous: each document cut into n consecutive pieces, piece r on GPU r
    want = np.empty(seq, dtype=np.int64)
    for s, e in zip(bounds[:-1], bounds[1:]):
        want[s:e] = np.arange(e - s) // ((e - s) // n)
    got = np.full(seq, -1)
    for start, last, rank in fig.data[0].customdata:
        got[int(start):int(last) + 1] = rank
    assert np.array_equal(got, want)


def test_one_document_keeps_the_strip_it_had(client):
    _, out = client.call("layout-strip.figure", {"scenario.data": _store(layout="striped"), "lang.value": "en"},
                         ["scenario.data"])
    fig = out["layout-strip"]["figure"]
    assert len(fig["data"]) == 1 and "doc_bounds" not in fig["layout"]["meta"]
    assert fig["layout"]["title"]["text"].endswith("(first 512 tokens; the pattern repeats)")


def test_the_strip_speaks_indonesian_about_documents(client):
    _, out = client.call("layout-strip.figure", {"scenario.data": _store(docs="1024,3072", layout="balanced"),
                                                 "lang.value": "id"}, ["scenario.data"])
    layout = out["layout-strip"]["figure"]["layout"]
    assert "8 dokumen, median 2.048, terpanjang 3.072 token" in layout["title"]["text"].replace("<br>", " ")
    assert layout["yaxis"]["ticktext"] == ["GPU", "dokumen"]


# --- the block map ------------------------------------------------------------------

@pytest.mark.parametrize("causal, window", [(True, None), (True, 300), (False, None), (False, 300)])
def test_the_token_panel_counts_the_pairs_the_mask_keeps(causal, window):
    bounds = [0, 700, 1000, 1500, 2048]
    edges, pairs = mask_bins(Packed(tuple(bounds), 4, "zigzag", window, causal), bins=10)
    keep = _mask(bounds, causal, window).astype(np.int64)
    want = np.add.reduceat(np.add.reduceat(keep, edges[:-1], axis=0), edges[:-1], axis=1)
    assert edges[0] == 0 and edges[-1] == 2048 and np.array_equal(pairs, want)


@pytest.mark.parametrize("scheme, changes", [("ring", {"layout": "balanced"}), ("allgather", {}),
                                             ("ulysses", {}), ("hybrid", {"ulysses_degree": 2, "ring_degree": 2})])
def test_the_block_map_of_a_packed_run_draws_the_document_mask(scheme, changes):
    sc = small_scenario(n_gpus=4, scheme=scheme, **changes)
    sc = sc.with_(workload=replace(sc.workload, docs="lognormal:median=512,sigma=1", seed=1))
    fig = block_map(simulate(sc))
    assert fig.layout.meta["packed"]
    token_panel = [tr for tr in fig.data if tr.type == "heatmap"][1]
    kept = token_panel.customdata[..., 2].astype(np.int64).sum()
    assert kept == _mask(list(packed_of(sc).bounds)).sum()


def test_a_packed_block_map_through_the_page(client):
    status, out = client.call("block-map.figure", {"scenario.data": _store(docs="1024,3072", layout="balanced"),
                                                   "profile.data": None, "tabs.value": "blocks"}, ["tabs.value"])
    assert status == 200 and out["block-map"]["figure"]["layout"]["meta"]["packed"]


# --- which layout balances the documents ----------------------------------------------

def test_the_work_per_gpu_is_the_pairs_each_gpus_queries_keep():
    # two documents, 3/4 and 1/4 of the sequence, on 2 GPUs
    seq = 64
    sc = small_scenario(seq=seq, n_gpus=2, layout="contiguous")
    sc = sc.with_(workload=replace(sc.workload, docs="48,16"))
    kept = _mask([0, 48, 64]).sum(axis=1)
    tokens = {"contiguous": [np.arange(32), np.arange(32, 64)],
              "striped": [np.arange(0, 64, 2), np.arange(1, 64, 2)],
              "doc-contiguous": [np.r_[0:24, 48:56], np.r_[24:48, 56:64]]}
    table = compute.document_balance(sc)
    fig = document_balance(table)
    lines = {tr.name: np.asarray(tr.y) for tr in fig.data if tr.type == "scatter"}
    for layout, held in tokens.items():
        want = [kept[t].sum() for t in held]
        assert lines[layout].tolist() == want
        assert table["imbalance"][layout] == pytest.approx(max(want) / np.mean(want))
    assert table["seeds"] == 0                      # a list of lengths draws nothing


def test_drawn_documents_show_their_spread_over_seeds(client):
    status, out = client.call("documents.figure", {"scenario.data": _store(docs="lognormal:median=1k,sigma=1.2"),
                                                   "tabs.value": "compare", "lang.value": "en"}, ["tabs.value"])
    assert status == 200 and out["documents-section"]["style"] == {}
    fig = out["documents"]["figure"]
    assert fig["layout"]["meta"]["seeds"] == compute.BALANCE_SEEDS
    worst = [tr for tr in fig["data"] if tr.get("name") == f"worst of {compute.BALANCE_SEEDS} seeds"][0]
    mean = [tr for tr in fig["data"] if tr.get("name") == f"mean over {compute.BALANCE_SEEDS} seeds"][0]
    assert all(w >= m >= 1 for w, m in zip(worst["y"], mean["y"]))
    # one document: the view stays hidden, folded to no height at its full width
    _, out = client.call("documents.figure", {"scenario.data": _store(), "tabs.value": "compare",
                                              "lang.value": "en"}, ["tabs.value"])
    style = out["documents-section"]["style"]
    assert style["visibility"] == "hidden" and style["height"] == 0 and "display" not in style


def test_the_layouts_compared_follow_the_documents():
    sc = small_scenario(n_gpus=2)
    assert [r["layout"] for r in compute.compare_table(sc)][::2] == ["contiguous", "striped", "zigzag"]


# --- both languages -----------------------------------------------------------------

def test_every_new_text_is_in_both_languages():
    assert i18n.missing_translations() == []
    for key in NEW_KEYS:
        assert key in catalog("en") and key in catalog("id"), key
        assert catalog("en")[key] != catalog("id")[key], key


def test_the_questions_explain_a_packed_scenario_as_one_document():
    from dashboard.i18n import Translator
    from dashboard.quiz_explain import EXPLAIN, explain

    sc = Scenario(workload=Workload(seq=65536, docs="lognormal:median=4k,sigma=1"), layout="balanced")
    for q in EXPLAIN:
        live = explain(q, sc, Translator("en")).live
        assert "unknown layout" not in live
    assert "zigzag layout" in explain(1, sc, Translator("en")).live
