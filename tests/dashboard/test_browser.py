"""Real-browser tests in headless Chromium (run with `pytest --headless`)."""

from __future__ import annotations

import time

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from dashboard import export, measured
from dashboard.app import create_app
from dashboard.i18n import Translator
from sim.engine.play import simulate
from tests.dashboard.conftest import measured_from, small_scenario, wait_settled

pytestmark = pytest.mark.browser

TIMEOUT = 30


def _start(dash_duo, query: str = ""):
    dash_duo.start_server(create_app())
    if query:
        dash_duo.driver.get(dash_duo.server_url + "/" + query)
    dash_duo.wait_for_element("#timeline .main-svg", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#timeline .gtitle", "makespan", timeout=TIMEOUT)


def _severe(dash_duo):
    return [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"]


def test_page_loads_without_console_errors(dash_duo):
    _start(dash_duo)
    dash_duo.wait_for_contains_text("#m-makespan", "ms", timeout=TIMEOUT)
    dash_duo.wait_for_element("#layout-strip .main-svg", timeout=TIMEOUT)
    assert "8 GPUs, ring, zigzag layout" in dash_duo.find_element("#timeline .gtitle").text
    assert _severe(dash_duo) == []


def test_changing_the_layout_redraws_the_timeline(dash_duo):
    _start(dash_duo)
    dash_duo.driver.find_element(By.XPATH, "//*[@id='layout']//label[contains(., 'contiguous')]").click()
    dash_duo.wait_for_contains_text("#timeline .gtitle", "contiguous layout", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#layout-strip .gtitle", "contiguous layout", timeout=TIMEOUT)
    assert "layout=contiguous" in dash_duo.driver.current_url        # the link reproduces it
    assert _severe(dash_duo) == []


def test_invalid_value_shows_a_message_beside_its_control(dash_duo):
    _start(dash_duo)
    box = dash_duo.find_element("#kv-heads")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("7", Keys.ENTER)
    dash_duo.wait_for_contains_text("#kv-heads-msg", "must divide Query heads", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#banner", "last valid scenario", timeout=TIMEOUT)
    assert "zigzag layout" in dash_duo.find_element("#timeline .gtitle").text   # page still there
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("8", Keys.ENTER)
    dash_duo.wait_for_text_to_equal("#kv-heads-msg", "", timeout=TIMEOUT)


def test_link_with_a_scenario_reproduces_it(dash_duo):
    _start(dash_duo, "?gpus=4&layout=striped&seq=8192")
    dash_duo.wait_for_contains_text("#timeline .gtitle", "4 GPUs, ring, striped layout", timeout=TIMEOUT)
    assert dash_duo.find_element("#gpus").get_attribute("value") == "4"


def _overlaps(a, b) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def test_the_measured_view_opens_on_an_example_and_an_upload_replaces_it(dash_duo, tmp_path):
    sim = simulate(small_scenario(layout="zigzag"))
    path = tmp_path / "measured.json"
    path.write_text(export.trace_json(measured_from(sim, factor=1.2, noise=0.05)))
    _start(dash_duo)
    dash_duo.driver.find_element(By.XPATH, "//*[@id='tabs']//*[normalize-space()='Measured vs simulated']").click()
    dash_duo.wait_for_contains_text("#overlay .gtitle", "Model vs measurement", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#trace-upload-status", "Example shipped with ringsim", timeout=TIMEOUT)
    # the legend covers neither the figure's title nor a subplot's
    legend = dash_duo.find_element("#overlay .legend").rect
    titles = dash_duo.driver.find_elements(By.CSS_SELECTOR, "#overlay .gtitle, #overlay .annotation-text")
    assert len(titles) >= 3 and legend["width"] > 0
    assert not [t.text for t in titles if _overlaps(legend, t.rect)]
    dash_duo.find_element("#trace-upload input[type=file]").send_keys(str(path))
    dash_duo.wait_for_contains_text("#trace-upload-status", "measured trace, 4 ranks", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#overlay .gtitle", "Model vs measurement", timeout=TIMEOUT)
    assert _severe(dash_duo) == []


def test_the_measured_view_opened_from_its_link_shows_the_example_it_draws(dash_duo):
    """Opened straight on the view (`?view=measured`), the Example run dropdown names the
    example the overlay draws, and its status line says so: a dropdown that mounted before
    its options came dropped its value and read "your uploaded trace"."""
    first = measured.examples()[0]
    dash_duo.start_server(create_app())
    dash_duo.driver.get(dash_duo.server_url + "/?view=measured")
    dash_duo.wait_for_contains_text("#overlay .gtitle", "Model vs measurement", timeout=TIMEOUT)
    label = measured.example_label(first, Translator("en"))
    dash_duo.wait_for_contains_text("#measured-example", label, timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#trace-upload-status", "Example shipped with ringsim", timeout=TIMEOUT)
    assert _severe(dash_duo) == []


def test_a_large_ring_draws_a_window_of_its_timeline(dash_duo):
    # 256 GPUs: the first GPUs whose marks fit the timeline's budget, drawn with WebGL. Marks
    # are spans, or spans merged where closer than a pixel: never more marks than spans, so
    # the window holds at least the GPUs whose spans fit
    import re

    import numpy as np

    from dashboard import compute
    from dashboard.figures.timeline import MAX_DRAWN_SPANS
    from dashboard.state import defaults, scenario_from_values

    rank = compute.run(scenario_from_values(defaults() | {"gpus": 256})).trace.columns.rank
    held = np.cumsum(np.bincount(rank, minlength=256))            # spans of GPUs 0..r
    last = int(np.searchsorted(held, MAX_DRAWN_SPANS, side="right")) - 1
    assert 0 < last < 31 and held[last] > 10_000                  # narrowed from 32, past the SVG bars
    _start(dash_duo, "?gpus=256")
    dash_duo.wait_for_contains_text("#timeline .gtitle", "of 256", timeout=TIMEOUT)
    hi = int(re.search(r"GPUs 0–(\d+) of 256", dash_duo.find_element("#timeline .gtitle").text).group(1))
    assert last <= hi < 31
    dash_duo.wait_for_element("#timeline .gl-canvas", timeout=TIMEOUT)
    assert _severe(dash_duo) == []


def test_picking_a_scheme_shows_its_settings_and_the_schemes_compared(dash_duo):
    _start(dash_duo, "?gpus=4&seq=8192")
    assert not dash_duo.find_element("#head-groups-field").is_displayed()
    dash_duo.driver.find_element(By.XPATH, "//*[@id='scheme']//label[contains(., 'all-gather')]").click()
    dash_duo.wait_for_contains_text("#timeline .gtitle", "all-gather, one gather", timeout=TIMEOUT)
    assert dash_duo.find_element("#head-groups-field").is_displayed()      # its setting appears,
    assert not dash_duo.find_element("#ring-section").is_displayed()       # the ring's go
    assert "scheme=allgather" in dash_duo.driver.current_url
    dash_duo.driver.find_element(By.XPATH, "//*[@id='tabs']//*[normalize-space()='Compare schemes']").click()
    dash_duo.wait_for_contains_text("#schemes .gtitle", "Which scheme wins", timeout=TIMEOUT)
    # 4.05% apart, within the model's stated error: the verdict is a tie (dashboard/views/schemes.py)
    dash_duo.wait_for_contains_text("#schemes-why", "A tie: ", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#schemes-table", "on screen", timeout=TIMEOUT)
    assert "view=schemes" in dash_duo.driver.current_url
    assert _severe(dash_duo) == []


def test_a_chart_drawn_narrower_than_its_box_is_drawn_again_at_its_width(dash_duo):
    """A figure that arrives while its part of the page is hidden is drawn at Plotly's default
    700 px, and a chart drawn so stayed so until a resize of the window
    (dashboard/assets/fit.js): here the state made directly, Compare layouts' chart drawn at
    700 px, then drawn again by a figure that fixes no width."""
    dash_duo.start_server(create_app())
    dash_duo.driver.set_window_size(1400, 1000)
    dash_duo.driver.get(dash_duo.server_url + "/?view=compare")
    dash_duo.wait_for_element("#compare-table td", timeout=TIMEOUT)
    wait_settled(dash_duo.driver, TIMEOUT)
    narrowed = dash_duo.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const gd = document.querySelector('#compare .js-plotly-plot');
        Plotly.relayout(gd, {width: 700}).then(() => {
            delete gd.layout.width;
            return Plotly.relayout(gd, {'title.text': gd.layout.title.text});
        }).then(() => done(gd._fullLayout.width), e => done(String(e)));""")
    assert narrowed == 700
    widths = "const gd = document.querySelector('#compare .js-plotly-plot'); return [gd.clientWidth, gd._fullLayout.width];"
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        box, drawn = dash_duo.driver.execute_script(widths)
        if abs(box - drawn) <= 1:
            break
        time.sleep(0.2)
    assert box > 900 and abs(box - drawn) <= 1, (box, drawn)


ASKED = """
window.__asked = [];
const fetched = window.fetch;
window.fetch = function(url, options) {
    try { window.__asked.push(JSON.parse(options.body).output); } catch (e) {}
    return fetched.apply(this, arguments);
};
"""
"""Notes the outputs of every callback the page asks the server for."""
VIEW_FIGURES = {"timeline": "timeline.figure", "blocks": "block-map.figure", "compare": "compare.figure",
                "schemes": "schemes.figure", "sweep": "sweep.figure", "memory": "memory.figure",
                "merge": "merge.figure", "measured": "overlay.figure", "questions": "quiz-bw.marks"}
"""A callback of each view that follows the scenario (dashboard.views.common.SHOWN_VIEWS)."""


def _asked(dash_duo) -> list[str]:
    """The outputs asked for since the last call, once the page has no callback pending."""
    wait_settled(dash_duo.driver, TIMEOUT)
    return dash_duo.driver.execute_script("const a = window.__asked; window.__asked = []; return a;")


def test_a_change_of_the_scenario_asks_the_server_for_the_open_view_alone(dash_duo):
    from dashboard.views.common import SHOWN_VIEWS

    assert set(VIEW_FIGURES) == set(SHOWN_VIEWS)
    dash_duo.start_server(create_app())
    dash_duo.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ASKED})
    dash_duo.driver.get(dash_duo.server_url + "/?view=memory&gpus=4")
    dash_duo.wait_for_element("#memory .main-svg", timeout=TIMEOUT)
    first = _asked(dash_duo)
    assert any(VIEW_FIGURES["memory"] in o for o in first)
    # the address changes, as the back button changes it
    dash_duo.driver.execute_script("window.history.pushState({}, '', '?view=memory&gpus=8');"
                                   "window.dispatchEvent(new PopStateEvent('popstate'));")
    dash_duo.wait_for_contains_text("#scenario-line", "8 × ", timeout=TIMEOUT)
    asked = " ".join(_asked(dash_duo))
    assert VIEW_FIGURES["memory"] in asked and "m-makespan.children" in asked
    for view, output in VIEW_FIGURES.items():
        assert view == "memory" or output not in asked, (view, asked)
    # a view opened draws the scenario as it is now
    dash_duo.find_element("#tab-sweep").click()
    asked = " ".join(_asked(dash_duo))
    assert VIEW_FIGURES["sweep"] in asked and VIEW_FIGURES["memory"] not in asked
    dash_duo.wait_for_element("#sweep .main-svg", timeout=TIMEOUT)
    assert _severe(dash_duo) == []
