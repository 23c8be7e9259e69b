"""The figure of questions 6 and 8 (dashboard/quiz_figures.causal_work): the contiguous
shards its right panel's title says are shaded are shaded, in that panel; its titles are
broken, not cut; and, in headless Chromium beside the question at each window size the
page is made for, none of its texts (the shards' labels included) meets another or runs
past the figure's edge."""

from __future__ import annotations

import json
import time

import pytest

from dashboard.app import create_app
from dashboard.i18n import Translator
from dashboard.quiz_explain import explain
from dashboard.state import defaults, scenario_from_values
from sim.scenario.config import Scenario, Workload
from tests.dashboard.test_browser_overlap import BOXES, SIZES, overlaps, settle

DEFAULT = scenario_from_values(defaults())
SMALL = Scenario(workload=Workload(seq=32768, heads=16, kv_heads=4, head_dim=64, dtype="fp16",
                                   causal=True),
                 n_gpus=4, layout="contiguous")
CASES = [pytest.param(sc, q, lang, id=f"{name}-q{q}-{lang}")
         for name, sc in (("default", DEFAULT), ("small", SMALL))
         for q in (6, 8) for lang in ("en", "id")]


def _keys_trace(fig, t: Translator):
    return next(d for d in fig.data if d.name == t("q6.fig.keys"))


@pytest.mark.parametrize("sc, q, lang", CASES)
def test_the_contiguous_shards_are_shaded_in_the_token_panel(sc, q, lang):
    t = Translator(lang)
    fig = explain(q, sc, t).figure
    n, seq = sc.n_gpus, sc.workload.seq
    shards = sorted((s for s in fig.layout.shapes if s.type == "rect"), key=lambda s: s.x0)
    assert len(shards) == n
    # the panel the keys-per-token line is drawn in, whose title promises the shading
    keys = _keys_trace(fig, t)
    assert {s.xref for s in shards} == {keys.xaxis}
    assert {s.yref for s in shards} == {keys.yaxis + " domain"}
    assert all((s.y0, s.y1) == (0, 1) for s in shards)          # the panel's full height
    # shard r holds tokens [r * seq / n, (r + 1) * seq / n): docs/design.md's contiguous layout
    assert [(s.x0, s.x1) for s in shards] == [(r * seq // n, (r + 1) * seq // n) for r in range(n)]
    assert len({s.fillcolor for s in shards}) == 2                # neighbours told apart
    assert all(s.fillcolor != shards[i + 1].fillcolor for i, s in enumerate(shards[:-1]))


@pytest.mark.parametrize("sc, q, lang", CASES)
def test_the_titles_are_broken_not_cut(sc, q, lang):
    t = Translator(lang)
    fig = explain(q, sc, t).figure
    title = fig.layout.title.text.split("<br><sup>")[0]
    assert title.replace("<br>", " ") == fig.layout.meta["title"]
    assert all(len(line) <= 76 for line in title.split("<br>"))   # ~550 px at 13 px a character
    panel = fig.layout.annotations[1].text
    assert panel.replace("<br>", " ") == t("q6.fig.per_token")
    assert all(len(line) <= 28 for line in panel.split("<br>"))   # ~200 px at 11 px


@pytest.mark.parametrize("lang", ["en", "id"])
def test_question_8_marks_first_and_last_token_below_the_line(lang):
    """The shards' labels sit above their points on the line keys = position + 1; the two
    notes' texts go below it, and the last one's text ends at the panel's right edge."""
    t = Translator(lang)
    n, seq = DEFAULT.n_gpus, DEFAULT.workload.seq
    fig = explain(8, DEFAULT, t).figure
    notes = [a for a in fig.layout.annotations if a.showarrow]
    assert [(a.x, a.y) for a in notes] == [(seq - 1, seq), (0, 1)]
    assert all(a.axref == a.xref == "x2" and a.ayref == a.yref == "y2" for a in notes)
    assert all(a.ay < a.ax + 1 for a in notes)                  # the tails under the line
    assert notes[0].xanchor == "right" and notes[0].ax == seq - 1
    labels = next(d for d in fig.data if d.name == t("q6.fig.shard_mean"))
    assert labels.textposition == "top center"
    assert list(labels.y) == pytest.approx([x + 0.5 for x in labels.x])   # on the line
    assert len(labels.x) == n


# --- in the browser ---------------------------------------------------------------------

TIMEOUT = 60
LABELS = BOXES.replace("return out;", "document.querySelectorAll('#quiz-figure .textpoint text')"
                       ".forEach(el => add(el, 'text'));\nreturn out;")
"""The overlap check's boxes and the texts drawn at points (the shards' labels)."""


@pytest.mark.browser
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("lang", ["en", "id"])
def test_no_two_texts_overlap_in_any_question_s_figure(dash_duo, lang, size):
    """The overlap check of the other views on each question's figure, which the page draws
    once a choice is made (the view's overlap check sees none): the ring's step under the
    toolbar, question 1's axis title, the merge's rescale title, questions 6 and 8's labels."""
    dash_duo.start_server(create_app())
    dash_duo.driver.set_window_size(*size)
    problems = {}
    for q in range(1, 9):
        dash_duo.driver.get(f"{dash_duo.server_url}/?view=questions&lang={lang}&q={q}")
        dash_duo.wait_for_element("#quiz-choice label", timeout=TIMEOUT)
        dash_duo.driver.find_elements("css selector", "#quiz-choice label")[0].click()
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and not dash_duo.driver.execute_script(
                "const g = document.querySelector('#quiz-figure .js-plotly-plot');"
                "return !!g && g.getBoundingClientRect().width > 0 && !!g.layout.meta"
                " && g.layout.meta.q === arguments[0];", q):
            time.sleep(0.3)
        settle(dash_duo, 1.5)
        boxes = dash_duo.driver.execute_script(LABELS)
        drawn = [b for b in boxes if b["chart"] == "quiz-figure"]
        assert drawn, f"question {q}: no figure drawn"
        if q in (6, 8):
            assert any(b["text"] == "GPU 0" for b in drawn), f"question {q}: the shards' labels not drawn"
        found = overlaps(boxes)
        if found:
            problems[q] = found[:6]
    assert problems == {}, json.dumps(problems, indent=1, ensure_ascii=False)
