"""Every view in Bahasa Indonesia, in headless Chromium (run with `pytest --headless`): no
English word on the page, in its charts (their SVG text, legends, and the hovers they would
show) or in its controls, but proper names, units and the words Indonesian shares with
English.

What counts as English: the words of the English catalog, less ALLOWED. Commands, flags,
file names and code names are set aside first (they are typed as they are in any language).
"""

from __future__ import annotations

import re
import time

import pytest

from dashboard.app import create_app
from dashboard.contents import TABS
from dashboard.i18n import Translator, catalog
from dashboard.nav import N_QUESTIONS
from dashboard.views.questions import ANSWERS
from tests.dashboard.test_browser_overlap import GRAPH_OF

pytestmark = pytest.mark.browser

TIMEOUT = 90

ALLOWED = set("""
ring attention ulysses deepspeed llama nvlink pcie nccl nic nics gpu gpus cpu transformerengine
ring-flash-attention long-context-attention context_parallel perfetto chrome holistic trace analysis ringsim torch
te rfa usp english arxiv zero zero- gqa mqa tp cp pp dp p2p k v q kv dk dv dq dout dqkv fwd bwd
gb gib mib kib tib mb b ms s µs us tflop tflops
data model total ideal per transfer global virtual simulator tensor kernel token batch softmax median sigma
lognormal sample zigzag all-gather all-to-all reduce-scatter server folder valid context parallel float exp mod
m' m port profiler csv json npz parquet fp pass-kv pass-q
""".split())
"""Proper names (of methods, libraries, hardware, tools, the paper archive; the language switch's "English"),
units, and words Indonesian writes as English does."""

_CODE = re.compile(r"ringsim(?: [a-z][\w-]*){1,2}(?: --[\w-]+(?: [^\s,;)]+)?)*|--[\w-]+|\S+\.(?:json|gz|parquet|npz|"
                   r"csv|py|md)\b|\w+\.\w+|%\{[^}]*\}|<[^>]*>|\{\w*\}")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")


def english_words() -> set[str]:
    """The English catalog's words (lower case), less ALLOWED."""
    words = {w.lower() for text in catalog("en").values() for w in _WORD.findall(_CODE.sub(" ", text))}
    return words - ALLOWED


def english_in(text: str, english: set[str]) -> list[str]:
    """The English words of `text` (a letter alone is a symbol: a choice's letter, N, x)."""
    return sorted({w for w in _WORD.findall(_CODE.sub(" ", text)) if len(w) > 1 and w.lower() in english})


_SHOWN = r"""
const out = [];
const shown = el => {
  for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
    const s = getComputedStyle(e);
    if (s.display === 'none' || s.visibility === 'hidden') return false;
  }
  return true;
};
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  const text = n.textContent.trim();
  if (text && n.parentElement && n.parentElement.tagName !== 'SCRIPT' && shown(n.parentElement)) {
    out.push(text);
  }
}
document.querySelectorAll('input[placeholder]').forEach(e => { if (shown(e)) out.push(e.placeholder); });
document.querySelectorAll('[title]').forEach(e => { if (shown(e)) out.push(e.title); });
// what a chart's hovers and legend would say
document.querySelectorAll('.js-plotly-plot').forEach(gd => {
  if (!shown(gd)) return;
  (gd.data || []).forEach(tr => {
    [].concat(tr.hovertemplate || []).slice(0, 3).forEach(h => out.push(String(h)));
    if (tr.name) out.push(String(tr.name));
    if (typeof tr.text === 'string') out.push(tr.text);
    else if (Array.isArray(tr.text)) tr.text.slice(0, 3).forEach(x => out.push(String(x)));
  });
});
return out;
"""


def _settled(dash_duo) -> list[str]:
    """The page's texts once two readings a second apart agree (the callbacks are done)."""
    before = None
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        now = dash_duo.driver.execute_script(_SHOWN)
        if now == before:
            return now
        before = now
        time.sleep(1.0)
    return before or []


def _open_view(dash_duo, view: str, more: str = "") -> None:
    id_ = Translator("id")
    dash_duo.driver.get(f"{dash_duo.server_url}/?view={view}&lang=id{more}")
    dash_duo.wait_for_text_to_equal("#tab-questions", id_("tab.questions"), timeout=TIMEOUT)
    dash_duo.wait_for_element(f"#{GRAPH_OF[view]} .main-svg", timeout=TIMEOUT)


def test_the_english_wordlist_is_the_catalog_s_english():
    english = english_words()
    # words the page used to leave in English on the Indonesian page
    assert {"run", "striped", "contiguous", "idle", "send", "receive", "load", "fits", "makespan", "shard"} <= english
    assert not english & {"gpu", "gib", "ulysses", "token"}
    assert english_in("tata letak striped, 4 GPU, ringsim hw run --out run.npz", english) == ["striped"]


def test_every_view_in_indonesian_has_no_english_word(dash_duo):
    english = english_words()
    dash_duo.start_server(create_app())
    found = {}
    for view, _ in TABS:
        if view == "questions":
            continue
        _open_view(dash_duo, view)
        left = english_in(" | ".join(_settled(dash_duo)), english)
        if left:
            found[view] = left
    # every question answered, its explanation and live figure shown
    _open_view(dash_duo, "questions")
    for q in range(1, N_QUESTIONS + 1):
        dash_duo.find_elements("#quiz-q label")[q - 1].click()
        dash_duo.wait_for_text_to_equal("#quiz-title", Translator("id")("quiz.title", n=q, total=8), timeout=TIMEOUT)
        dash_duo.find_elements("#quiz-choice label")[ANSWERS[q]].click()
        dash_duo.wait_for_text_to_equal("#quiz-why", Translator("id")(f"q{q}.why"), timeout=TIMEOUT)
        left = english_in(" | ".join(_settled(dash_duo)), english)
        if left:
            found[f"questions {q}"] = left
    assert found == {}
    assert [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"] == []


def test_hovers_use_the_indonesian_decimal_comma(dash_duo):
    """The charts' separators are the language's, so a hover's number reads as the tables do."""
    dash_duo.start_server(create_app())
    for view in ("timeline", "memory", "plan"):
        _open_view(dash_duo, view)
        separators = dash_duo.driver.execute_script(
            f"return document.querySelector('#{GRAPH_OF[view]} .js-plotly-plot').layout.separators;")
        assert separators == ",.", view
