"""Every view at 1400 x 1000 in both languages, in headless Chromium: no two boxes of
text overlap (chart titles, axis titles, legend entries, annotations, the plot toolbar,
tab labels, control labels, buttons, table cells), and the browser's back button
restores the view that was open (run with `pytest --headless`)."""

from __future__ import annotations

import json
import time

import pytest

from dashboard.app import create_app
from dashboard.contents import TABS
from dashboard.nav import N_QUESTIONS

pytestmark = pytest.mark.browser

TIMEOUT = 60
WIDTH, HEIGHT = 1400, 1000
GRAPH_OF = {"timeline": "timeline", "blocks": "block-map", "compare": "compare", "schemes": "schemes",
            "sweep": "sweep", "memory": "memory", "merge": "merge", "measured": "overlay", "plan": "plan-chart",
            "questions": "quiz-figure", "traces": "traces-lanes", "inference": "inf-prefill"}
"""The chart each view draws, whose drawing means the view is there."""

BOXES = r"""
const out = [];
const seen = new Set();
function add(el, kind) {
  if (seen.has(el)) return;
  seen.add(el);
  const r = el.getBoundingClientRect();
  if (r.width < 1 || r.height < 1) return;
  let e = el;
  while (e && e.nodeType === 1) {
    const s = getComputedStyle(e);
    if (s.display === 'none' || s.visibility === 'hidden' || s.opacity === '0') return;
    e = e.parentElement;
  }
  const text = (el.textContent || '').trim().slice(0, 60);
  if (kind === 'text' && !text) return;
  out.push({kind: kind, text: text, x0: r.left, y0: r.top, x1: r.right, y1: r.bottom,
            chart: (el.closest('.dash-graph') || {}).id || ''});
}
// chart texts: titles, axis titles, legend entries, annotations (not tick labels of one axis)
document.querySelectorAll('.gtitle, .xtitle, .ytitle, .legendtext, .annotation-text, .g-xtitle text, '
                          + '.g-ytitle text, .legendtitletext, .cbtitle text').forEach(el => add(el, 'text'));
document.querySelectorAll('.modebar').forEach(el => add(el, 'toolbar'));
// page texts: leaf elements with text of their own
document.querySelectorAll('label, button, th, td, h1, h2, h3, .tab, .help, .msg, p, li').forEach(el => {
  const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
  if (own) add(el, 'text');
});
return out;
"""


def overlaps(boxes: list[dict], slack: float = 1.5) -> list[tuple[str, str]]:
    """Pairs of boxes that overlap by more than `slack` pixels both ways; a chart's own
    title, axis titles and legend only with each other and the toolbar."""
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            w = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
            h = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
            if w > slack and h > slack:
                found.append((f"{a['kind']} {a['text']!r} ({a['chart']})", f"{b['kind']} {b['text']!r} ({b['chart']})"))
    return found


@pytest.mark.parametrize("lang", ["en", "id"])
def test_no_two_texts_overlap_on_any_view(dash_duo, lang):
    dash_duo.start_server(create_app())
    dash_duo.driver.set_window_size(WIDTH, HEIGHT)
    problems = {}
    pages = [(view, "") for view, _ in TABS if view != "questions"]
    pages += [("questions", f"&q={q}") for q in range(1, N_QUESTIONS + 1)]
    for view, more in pages:
        dash_duo.driver.get(f"{dash_duo.server_url}/?view={view}&lang={lang}{more}")
        dash_duo.wait_for_element(f"#{GRAPH_OF[view]} .main-svg", timeout=TIMEOUT)
        time.sleep(1.5)                                     # the last callbacks and the fonts
        found = overlaps(dash_duo.driver.execute_script(BOXES))
        if found:
            problems[view + more] = found[:6]
    assert problems == {}, json.dumps(problems, indent=1, ensure_ascii=False)


def test_back_restores_the_open_view(dash_duo):
    dash_duo.start_server(create_app())
    dash_duo.driver.get(f"{dash_duo.server_url}/?view=memory")
    dash_duo.wait_for_element("#memory .main-svg", timeout=TIMEOUT)
    dash_duo.find_element("#tab-schemes").click()
    dash_duo.wait_for_element("#schemes .main-svg", timeout=TIMEOUT)
    dash_duo.driver.back()
    dash_duo.wait_for_element("#memory .main-svg", timeout=TIMEOUT)
    deadline = time.time() + TIMEOUT
    while "view=memory" not in dash_duo.driver.current_url and time.time() < deadline:
        time.sleep(0.2)
    assert "view=memory" in dash_duo.driver.current_url
    assert dash_duo.find_element("#memory").is_displayed()


@pytest.mark.parametrize("lang", ["en", "id"])
def test_no_two_texts_overlap_with_packed_documents(dash_duo, lang):
    """The views that draw documents (the strip, the block map's three panels, the layouts'
    balance) on drawn documents in the balanced layout."""
    dash_duo.start_server(create_app())
    dash_duo.driver.set_window_size(WIDTH, HEIGHT)
    packed = "docs=lognormal%3Amedian%3D4k%2Csigma%3D1.2&seed=3&layout=balanced"
    problems = {}
    for view in ("timeline", "blocks", "compare"):
        dash_duo.driver.get(f"{dash_duo.server_url}/?view={view}&lang={lang}&{packed}")
        dash_duo.wait_for_element(f"#{GRAPH_OF[view]} .main-svg", timeout=TIMEOUT)
        time.sleep(2.5)
        assert "balanced" in dash_duo.driver.current_url
        found = overlaps(dash_duo.driver.execute_script(BOXES))
        if found:
            problems[view] = found[:6]
    assert problems == {}, json.dumps(problems, indent=1, ensure_ascii=False)
