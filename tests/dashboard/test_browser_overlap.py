"""Every view at 1280 x 800, 1400 x 1000 and 1920 x 1080 in both languages, in headless
Chromium: no two boxes of text overlap (chart titles, axis titles, tick labels, legend
entries, annotations, colour bar titles, the plot toolbar, tab labels, control labels,
buttons, table cells), no chart text is cut by its chart's edge, and no chart text set
outside the plots (a title, a panel's title, an axis title) reaches into one; and the
browser's back button restores the view that was open (run with `pytest --headless`)."""

from __future__ import annotations

import json
import time

import pytest

from dashboard.app import create_app
from dashboard.contents import TABS
from dashboard.nav import N_QUESTIONS
from tests.dashboard.conftest import wait_settled

pytestmark = pytest.mark.browser

TIMEOUT = 60
WIDTH, HEIGHT = 1400, 1000
SIZES = [(1280, 800), (1400, 1000), (1920, 1080)]
"""The windows people open the page in: a small laptop, the size it was designed at, a desktop."""
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
  if (kind !== 'toolbar' && !text) return;
  const graph = el.closest('.dash-graph');
  const svg = graph && graph.querySelector('.main-svg');
  const c = svg ? svg.getBoundingClientRect() : null;
  out.push({kind: kind, text: text, x0: r.left, y0: r.top, x1: r.right, y1: r.bottom,
            chart: (graph || {}).id || '',
            box: c ? [c.left, c.top, c.right, c.bottom] : null});
}
// chart texts: titles, axis titles, legend entries, annotations (not tick labels of one axis)
document.querySelectorAll('.gtitle, .xtitle, .ytitle, .legendtext, .annotation-text, .g-xtitle text, '
                          + '.g-ytitle text, .legendtitletext, .cbtitle text').forEach(el => add(el, 'text'));
// tick labels: each against the chart's other texts (two of one axis never meet: Plotly spaces them)
document.querySelectorAll('.xtick text, .ytick text, .cbaxis text').forEach(el => add(el, 'tick'));
document.querySelectorAll('.modebar').forEach(el => add(el, 'toolbar'));
// each panel's plot area (its drag layer's rectangle)
document.querySelectorAll('.nsewdrag').forEach(el => {
  const graph = el.closest('.dash-graph');
  const r = el.getBoundingClientRect();
  if (graph && r.width >= 1 && r.height >= 1 && el.closest('svg').getBoundingClientRect().width > 0)
    out.push({kind: 'plot', text: '', x0: r.left, y0: r.top, x1: r.right, y1: r.bottom, chart: graph.id, box: null});
});
// page texts: leaf elements with text of their own
document.querySelectorAll('label, button, th, td, h1, h2, h3, .tab, .help, .msg, p, li').forEach(el => {
  const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
  if (own) add(el, 'text');
});
return out;
"""


def settle(dash_duo, pause_s: float) -> None:
    """Wait until no comparison computes (its busy line, which grows with the rows done so far,
    moves the charts under it as it comes and goes), no callback is pending and every chart is
    drawn at its width (a check that runs sooner reads a chart's texts where they were before
    its last drawing), then `pause_s` for the fonts."""
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and dash_duo.driver.execute_script(
            "return Array.from(document.querySelectorAll('.busy')).some(e => e.offsetParent !== null);"):
        time.sleep(0.3)
    wait_settled(dash_duo.driver, max(deadline - time.time(), 5.0))
    time.sleep(pause_s)


def _apart(a: dict, b: dict, slack: float) -> bool:
    return (min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]) <= slack
            or min(a["y1"], b["y1"]) - max(a["y0"], b["y0"]) <= slack)


def overlaps(boxes: list[dict], slack: float = 1.5) -> list[tuple[str, str]]:
    """Pairs of boxes that overlap by more than `slack` pixels both ways (two tick labels
    never: an axis's own labels may touch where Plotly packs them), each chart text cut
    by its chart's edge (paired with "clipped"), and each chart text whose middle is outside
    every plot of its chart that reaches into one of them (a panel's title over the panel
    above; a text placed on a plot, as an annotation marking a point, is the plot's own)."""
    plots = [b for b in boxes if b["kind"] == "plot"]
    boxes = [b for b in boxes if b["kind"] != "plot"]
    found = []
    for a in boxes:
        if a["kind"] != "text" or not a["chart"]:
            continue
        mine = [p for p in plots if p["chart"] == a["chart"]]
        x, y = (a["x0"] + a["x1"]) / 2, (a["y0"] + a["y1"]) / 2
        if any(p["x0"] <= x <= p["x1"] and p["y0"] <= y <= p["y1"] for p in mine):
            continue
        if any(not _apart(a, p, slack) for p in mine):
            found.append((f"{a['kind']} {a['text']!r} ({a['chart']})", "reaches into a plot"))
    for a in boxes:
        if a["kind"] != "toolbar" and a.get("box"):
            left, top, right, bottom = a["box"]
            if a["x0"] < left - slack or a["y0"] < top - slack or a["x1"] > right + slack or a["y1"] > bottom + slack:
                found.append((f"{a['kind']} {a['text']!r} ({a['chart']})", "clipped by the chart's edge"))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a["kind"] == "tick" and b["kind"] == "tick":
                continue
            if not _apart(a, b, slack):
                found.append((f"{a['kind']} {a['text']!r} ({a['chart']})", f"{b['kind']} {b['text']!r} ({b['chart']})"))
    return found


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("lang", ["en", "id"])
def test_no_two_texts_overlap_on_any_view(dash_duo, lang, size):
    dash_duo.start_server(create_app())
    dash_duo.driver.set_window_size(*size)
    problems = {}
    pages = [(view, "") for view, _ in TABS if view != "questions"]
    pages += [("questions", f"&q={q}") for q in range(1, N_QUESTIONS + 1)]
    for view, more in pages:
        dash_duo.driver.get(f"{dash_duo.server_url}/?view={view}&lang={lang}{more}")
        dash_duo.wait_for_element(f"#{GRAPH_OF[view]} .main-svg", timeout=TIMEOUT)
        settle(dash_duo, 1.5)
        found = overlaps(dash_duo.driver.execute_script(BOXES))
        if found:
            problems[view + more] = found[:6]
    assert problems == {}, json.dumps(problems, indent=1, ensure_ascii=False)


def test_back_restores_the_open_view(dash_duo):
    dash_duo.start_server(create_app())
    dash_duo.driver.get(f"{dash_duo.server_url}/?view=memory")
    dash_duo.wait_for_element("#memory .main-svg", timeout=TIMEOUT)
    wait_settled(dash_duo.driver, TIMEOUT)
    dash_duo.find_element("#tab-schemes").click()
    dash_duo.wait_for_element("#schemes .main-svg", timeout=TIMEOUT)
    wait_settled(dash_duo.driver, TIMEOUT)          # the address written for the tab opened
    dash_duo.driver.back()
    # the Memory chart drawn before is still in the page: wait for the address and the tab
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not ("view=memory" in dash_duo.driver.current_url
                                          and dash_duo.find_element("#memory").is_displayed()):
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
        settle(dash_duo, 2.5)
        assert "balanced" in dash_duo.driver.current_url
        found = overlaps(dash_duo.driver.execute_script(BOXES))
        if found:
            problems[view] = found[:6]
    assert problems == {}, json.dumps(problems, indent=1, ensure_ascii=False)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_no_two_texts_overlap_on_a_larger_ring(dash_duo, lang):
    """64 GPUs at the smallest window: the hybrids' longer names (32 x 2) in Compare schemes,
    the layouts and the timeline of a wider ring."""
    dash_duo.start_server(create_app())
    dash_duo.driver.set_window_size(*SIZES[0])
    problems = {}
    drawn = {"schemes": ("#schemes .ytick text", "32 x 2"), "compare": ("#compare-table td", ""),
             "timeline": ("#timeline .gtitle", "64")}
    for view, (selector, text) in drawn.items():
        dash_duo.driver.get(f"{dash_duo.server_url}/?view={view}&lang={lang}&gpus=64")
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and not dash_duo.driver.execute_script(
                "return Array.from(document.querySelectorAll(arguments[0]))"
                ".some(e => e.textContent.includes(arguments[1]));", selector, text):
            time.sleep(0.3)
        settle(dash_duo, 2.5)
        found = overlaps(dash_duo.driver.execute_script(BOXES))
        if found:
            problems[view] = found[:6]
    assert problems == {}, json.dumps(problems, indent=1, ensure_ascii=False)
