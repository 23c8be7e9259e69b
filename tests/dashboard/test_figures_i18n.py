"""The views' charts in the page's language: memory, when transfers hide, the block map,
the exact merge, measured vs simulated and the schemes' comparison. In English each
says what it said before it had translations, word for word; in Indonesian none of its
English words is left, and its numbers have a decimal comma (Plotly's `separators`
too, for the ticks and hovers)."""

from __future__ import annotations

import re

import pytest

from dashboard import measured
from dashboard.state import defaults

STORE = {"values": dict(defaults(), gpus=4, seq=8192)}
EXAMPLE = measured.examples()[0]
VIEWS = {
    "memory": ("memory.figure", {"scenario.data": STORE, "tabs.value": "memory"}),
    "sweep": ("sweep.figure", {"scenario.data": STORE, "profile.data": None, "tabs.value": "sweep"}),
    "block-map": ("block-map.figure", {"scenario.data": STORE, "profile.data": None, "tabs.value": "blocks"}),
    "merge": ("merge.figure", {"scenario.data": STORE, "merge-row.value": None, "tabs.value": "merge"}),
    "overlay": ("overlay.figure", {"measured.data": {"token": EXAMPLE.token, "name": EXAMPLE.file},
                                   "scenario.data": STORE, "profile.data": None, "tabs.value": "measured"}),
    "schemes": ("schemes.figure", {"scenario.data": STORE, "profile.data": None, "tabs.value": "schemes"}),
}
ENGLISH_TITLES = {
    # a scheme's memory items in words since (dashboard/figures/memory.py LABELS "item.<name>")
    "memory": "The full K/V would take 0.0312 GiB; the ring holds 0.0234 GiB of it per GPU, all-gather 0.0312 GiB "
              "(the whole K/V) — ring: 0.0864 GiB per GPU now<br><sup>ring now: Q 0.0156 GiB, own K/V shard 0.00781 GiB, "
              "K/V blocks in flight 0.0156 GiB, output 0.0156 GiB, output accumulator 0.0312 GiB, softmax statistics "
              "0.000488 GiB</sup>",
    "sweep": "When transfers hide (zigzag, overlap on, simulated on 4 GPUs)<br><sup>dashed: a full block's compute "
             "equals its transfer over the ring's slowest hop; orange: the current scenario</sup>",
    "block-map": ("Who computes which block when: zigzag, causal, 4 GPUs<br>work imbalance (FLOPs) max/mean 1.000; "
                  "the cards' load imbalance is of time"),
    "merge": "Why the merge is exact: query token 31 on GPU 0 (zigzag, 4 GPUs, 32 tokens, head dim 16)<br>"
             "max |ring − full attention| = 6.66e-16 (float64)",
    "overlay": "Model vs measurement: makespan simulated ",
    "schemes": "Which scheme wins: ",
}
"""The titles as the views drew them in English before they had translations (the
measured and schemes' ones up to their timings)."""
ENGLISH_WORDS = {
    "memory": ["would take", "holds", "against", "sequence", "length", "count", "tokens", "item", "peak", "held",
               "whole", "gathered", "own shard", "memory", "the rest", "now"],
    "sweep": ["When", "hide", "overlap", "simulated", "against", "tokens", "link", "full block", "time",
              "efficiency", "exposed", "block compute", "at", "per direction", "dashed", "orange"],
    "block-map": ["Who computes", "which", "causal", "work", "imbalance", "mean", "query", "key", "chunk", "token order",
                  "ring step", "computed"],
    "merge": ["Why", "merge", "exact", "query", "token on", "tokens", "head dim", "ring", "full attention",
              "running", "maximum", "normalizer", "rescale", "factor", "below", "masked", "step"],
    "overlay": ["Model vs measurement", "simulated", "measured", "median over", "step", "error", "compute",
                "exposed", "communication", "bars", "red", "time", "each run"],
    "schemes": ["Which scheme wins", "a tie", "runs", "within", "error", "one gather", "exposed", "worst", "sent",
                "peak memory", "full K/V on one"],
}
"""Words of each chart's English that its Indonesian must not keep (not the loanword it keeps:
kernel)."""



def _draw(client, view: str, lang: str) -> tuple[dict, dict]:
    output, values = VIEWS[view]
    status, out = client.call(output, dict(values, **{"lang.value": lang}), ["lang.value"])
    assert status == 200
    return out[output.split(".")[0]]["figure"], out


def _shown(fig: dict) -> list[str]:
    """The chart's words: its title, subplot titles and annotations, axis titles, and
    its traces' names."""
    layout = fig["layout"]
    texts = [layout["title"]["text"]] + [a["text"] for a in layout.get("annotations", [])]
    texts += [v["title"]["text"] for k, v in layout.items()
              if k.startswith(("xaxis", "yaxis")) and "text" in v.get("title", {})]
    return texts + [t["name"] for t in fig["data"] if t.get("name")]


@pytest.mark.parametrize("view", VIEWS)
def test_each_chart_in_english_and_indonesian(client, view):
    english, _ = _draw(client, view, "en")
    indonesian, _ = _draw(client, view, "id")
    title = english["layout"]["title"]["text"]
    assert title == ENGLISH_TITLES[view] if view not in ("overlay", "schemes") else \
        title.startswith(ENGLISH_TITLES[view])
    assert english["layout"]["separators"] == ".," and indonesian["layout"]["separators"] == ",."
    shown = " | ".join(_shown(indonesian))
    left = [w for w in ENGLISH_WORDS[view] if re.search(rf"\b{re.escape(w)}\b", shown)]
    assert left == [], shown
    # the decimal numbers of the English title and annotations, with a decimal comma; none
    # with a decimal point in the Indonesian title (a point there groups thousands)
    decimals = re.findall(r"\d+\.\d+", " | ".join(_shown(english)[:len(english["layout"]["annotations"]) + 1]))
    # the sweep's annotations are its break-even points to three figures, whole numbers
    # in this scenario (97.1 GB/s; every block size hides at 4 GPUs): nothing there to put a comma in
    assert decimals or view == "sweep"
    for number in decimals:
        assert number.replace(".", ",") in shown, number
    assert not re.search(r"\d\.\d", indonesian["layout"]["title"]["text"])


def test_the_charts_are_cached_per_language(client):
    """A chart drawn in one language is not served in the other: back and forth."""
    titles = [_draw(client, "block-map", lang)[0]["layout"]["title"]["text"] for lang in ("en", "id", "en", "id")]
    assert titles[0] == titles[2] != titles[1] == titles[3]


def test_the_merge_note_and_the_block_maps_words_in_indonesian(client):
    _, out = _draw(client, "merge", "id")
    note = out["merge-note"]["children"]
    assert note.startswith("Masukan kecil: 32 token pada 4 GPU (zigzag, kausal)") and "tokens" not in note
    _, out = _draw(client, "merge", "en")
    assert out["merge-note"]["children"].startswith("Small inputs: 32 tokens on 4 GPUs (zigzag, causal), one head")
    # another scheme's words for the map's values, with its numbers
    store = {"values": dict(defaults(), gpus=4, seq=8192, scheme="hybrid")}
    for lang, words in (("en", "ring step (2 rings side by side, 1/2 of the heads each)"),
                        ("id", "langkah cincin (2 cincin berdampingan, masing-masing 1/2 kepala)")):
        _, out = client.call("block-map.figure", {"scenario.data": store, "profile.data": None, "tabs.value": "blocks",
                                                  "lang.value": lang}, ["lang.value"])
        assert words in out["block-map"]["figure"]["layout"]["annotations"][0]["text"]


def test_the_measured_views_messages_in_indonesian(client):
    status, out = client.call("overlay.figure", {"measured.data": None, "scenario.data": STORE, "profile.data": None,
                                                 "tabs.value": "measured", "lang.value": "id"}, ["lang.value"])
    assert status == 200
    text = out["overlay"]["figure"]["layout"]["annotations"][0]["text"]
    assert text.startswith("Unggah jejak terukur") and "Upload" not in text
