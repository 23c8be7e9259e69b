"""The timeline as a trace viewer and the first visit, in headless Chromium (run with
`pytest --headless`): the start-here path leads to its views and stays hidden once closed; a
comparison computing in the background shows its busy line with a cancel button, then its
chart; a click on a span lists its record (the callback alone: tests/dashboard/test_honest_views.py)."""

from __future__ import annotations

import time

import pytest

from dashboard.app import create_app
from dashboard.views import background
from tests.dashboard.conftest import wait_settled

pytestmark = pytest.mark.browser

TIMEOUT = 60


def test_the_start_here_path_leads_and_stays_closed(dash_duo):
    dash_duo.start_server(create_app())
    dash_duo.wait_for_element("#start-here", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#start-here", "Questions", timeout=TIMEOUT)
    dash_duo.find_element("#start-schemes").click()
    dash_duo.wait_for_element("#schemes .main-svg", timeout=TIMEOUT)
    dash_duo.find_element("#start-here-close").click()
    deadline = time.time() + TIMEOUT
    while dash_duo.find_element("#start-here").is_displayed() and time.time() < deadline:
        time.sleep(0.2)
    assert not dash_duo.find_element("#start-here").is_displayed()
    dash_duo.driver.refresh()                       # remembered by the browser
    dash_duo.wait_for_element("#schemes .main-svg", timeout=TIMEOUT)
    wait_settled(dash_duo.driver, TIMEOUT)          # its callback has answered: hidden, not yet shown
    assert not dash_duo.find_element("#start-here").is_displayed()


@pytest.mark.skipif(background.manager("/tmp/ringsim-manager-probe") is None, reason="diskcache is not installed")
def test_a_comparison_computing_in_the_background_shows_its_progress(dash_duo):
    dash_duo.start_server(create_app())
    dash_duo.driver.get(f"{dash_duo.server_url}/?view=compare&gpus=64&latency_us=1.37")
    dash_duo.wait_for_element("#compare-busy", timeout=TIMEOUT)
    dash_duo.wait_for_element("#compare .main-svg", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#compare-table", "zigzag", timeout=TIMEOUT)
    assert dash_duo.find_element("#compare-cancel").get_attribute("textContent") == "Cancel"
    assert not dash_duo.find_element("#compare-busy").is_displayed()      # done: the line goes


@pytest.mark.parametrize("lang, title, step", [("en", "The span clicked", "ring step"),
                                              ("id", "Rentang yang diklik", "langkah cincin")])
def test_a_click_on_a_span_lists_its_record(dash_duo, lang, title, step):
    """A real click on a drawn bar (not an event sent to the chart) lists that span's record:
    its operation, GPU, step, start and duration, in the page's language."""
    from selenium.webdriver.common.action_chains import ActionChains

    dash_duo.start_server(create_app())
    dash_duo.driver.get(f"{dash_duo.server_url}/?view=timeline&lang={lang}")
    dash_duo.wait_for_element("#timeline .barlayer .point path", timeout=TIMEOUT)
    dash_duo.wait_for_element("#timeline-details .help", timeout=TIMEOUT)     # the hint, before a click
    bars = dash_duo.driver.find_elements("css selector", "#timeline .barlayer .point path")
    widest = max(bars, key=lambda b: b.rect["width"])
    assert widest.rect["width"] > 4
    ActionChains(dash_duo.driver).move_to_element(widest).click().perform()
    dash_duo.wait_for_element("#timeline-details table", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#timeline-details", title, timeout=TIMEOUT)
    rows = dash_duo.driver.find_elements("css selector", "#timeline-details tr")
    fields = {r.find_element("css selector", "th").text: r.find_element("css selector", "td").text for r in rows}
    assert step in fields and fields[step].isdigit()
    assert len(fields) >= 5 and all(v.strip() for v in fields.values())


def _meta(dash_duo) -> dict:
    return dash_duo.driver.execute_script(
        "const g = document.querySelector('#timeline .js-plotly-plot');"
        "return g && g.layout && g.layout.meta ? g.layout.meta : null;") or {}


def _until(condition, what: str):
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_enter_in_the_gpus_shown_box_applies_it(dash_duo):
    """A number typed into "GPUs shown" and Enter pressed: the timeline draws that window
    (dashboard/assets/enter.js; Dash's own box applies it only on leaving it)."""
    from selenium.webdriver.common.keys import Keys

    dash_duo.start_server(create_app())
    dash_duo.driver.get(f"{dash_duo.server_url}/?view=timeline&gpus=16")
    _until(lambda: _meta(dash_duo).get("ranks") == [0, 15], "the sixteen GPUs drawn")
    box = dash_duo.find_element("#ranks .dash-range-slider-max-input")
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("5", Keys.ENTER)
    _until(lambda: _meta(dash_duo).get("ranks") == [0, 5], "GPUs 0-5 drawn")
    assert dash_duo.driver.switch_to.active_element != box


def test_a_drag_across_time_zooms_in_span_by_span_and_autoscale_zooms_out(dash_duo):
    """512 GPUs: the whole run draws each GPU's spans merged; a real drag across a tenth of the
    time axis draws that stretch again span by span; the chart's Autoscale the whole run."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    dash_duo.start_server(create_app())
    dash_duo.driver.set_window_size(1400, 1000)
    dash_duo.driver.get(f"{dash_duo.server_url}/?view=timeline&gpus=512")
    whole = _until(lambda: (m := _meta(dash_duo)).get("merged") and m, "the whole run, merged")
    assert whole["time_range_s"] is None and whole["marks"] < whole["spans"] / 20
    # the chart is taller than the window: the pointer moves in the window's coordinates
    drag = dash_duo.find_element("#timeline .nsewdrag")
    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", drag)
    left, top, width = dash_duo.driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.left, r.top, r.width];", drag)
    x, y = int(left + 0.4 * width), int(top + 60)
    drag_across = ActionBuilder(dash_duo.driver)
    drag_across.pointer_action.move_to_location(x, y).pointer_down().move_to_location(x + int(0.1 * width), y) \
        .pointer_up()
    drag_across.perform()
    near = _until(lambda: (m := _meta(dash_duo)).get("time_range_s") and m, "the zoomed stretch")
    a, b = near["time_range_s"]
    assert near["merged"] == 0 and 0.05 < (b - a) / whole["run_s"] < 0.15
    assert near["marks"] == near["spans"] > 0
    # the whole run again, from the chart's own Autoscale button (a double-click does the
    # same, but two clicks of a loaded machine may fall further apart than Plotly's 300 ms)
    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})",
                                   dash_duo.find_element("#timeline .modebar"))
    dash_duo.find_element("#timeline .modebar-btn[data-title='Autoscale']").click()
    again = _until(lambda: (m := _meta(dash_duo)).get("time_range_s") is None and m.get("merged") and m,
                   "the whole run again")
    assert again["marks"] == whole["marks"]


@pytest.mark.skipif(background.manager("/tmp/ringsim-manager-probe") is None, reason="diskcache is not installed")
def test_a_long_comparison_shows_its_rows_done_so_far(dash_duo, tmp_path, monkeypatch):
    """Compare schemes at 512 GPUs (fifteen runs, seconds each): while the rest compute, the
    busy line shows the table of the runs done so far, in the page's language; then the chart
    and the whole table."""
    from dashboard import compute
    from dashboard.state import defaults, scenario_from_values
    from sim.planning.compare import scheme_variants

    every = len(scheme_variants(compute.scheme_base(scenario_from_values(defaults() | {"gpus": 512}))))
    monkeypatch.setenv("RINGSIM_DASHBOARD_CACHE", str(tmp_path))      # nothing computed before
    dash_duo.start_server(create_app())
    dash_duo.driver.get(f"{dash_duo.server_url}/?view=schemes&gpus=512&lang=id")
    rows = _until(lambda: dash_duo.driver.find_elements("css selector", "#schemes-busy .busy-rows tbody tr"),
                  "the rows done so far")
    assert 1 <= len(rows) < every
    assert "Menyimulasikan" in dash_duo.find_element("#schemes-progress").text
    _until(lambda: len(dash_duo.driver.find_elements("css selector", "#schemes-table tbody tr")) == every,
           "the whole table")
    dash_duo.wait_for_element("#schemes .main-svg", timeout=TIMEOUT)
