"""The page keeps its state, in headless Chromium (run with `pytest --headless`): a plan's
candidate opens on the timeline without reloading the page, twice, the language and the
page kept; every label is drawn on the first render whichever control moves first; a link
the page cannot simulate falls back to the defaults and says so."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from dashboard.app import create_app
from dashboard.i18n import Translator
from dashboard.state import values_from_query
from dashboard.views.plan import DEFAULTS as PLAN_DEFAULTS
from dashboard.views.plan import plan_data

pytestmark = pytest.mark.browser

TIMEOUT = 60


def _open(dash_duo, query: str) -> None:
    dash_duo.start_server(create_app())
    dash_duo.driver.get(dash_duo.server_url + "/" + query)


def _until(dash_duo, condition, message: str = ""):
    return WebDriverWait(dash_duo.driver, TIMEOUT).until(condition, message)


def _selected(dash_duo) -> str:
    return dash_duo.find_element("#tabs .tab--selected").get_attribute("id")


def _severe(dash_duo):
    return [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"]


def _load_row(dash_duo, index: int) -> None:
    buttons = _until(dash_duo, lambda d: d.find_elements(By.CSS_SELECTOR, "#plan-table button") or None,
                     "the plan's table has no buttons")
    button = buttons[index]
    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
    button.click()


def test_a_plan_candidate_opens_twice_keeping_language_and_page(dash_duo):
    id_ = Translator("id")
    _open(dash_duo, "?view=plan&lang=id")
    dash_duo.wait_for_element("#plan-table table", timeout=TIMEOUT)
    # a page that reloads loses this
    dash_duo.driver.execute_script("window.__samePage = true;")
    candidates = plan_data(dict(PLAN_DEFAULTS))["candidates"]
    for index in (0, 1):
        if index:
            dash_duo.find_element("#tab-plan").click()
            _until(dash_duo, lambda d: _selected(dash_duo) == "tab-plan", "the Plan view did not open again")
            dash_duo.wait_for_element("#plan-table table", timeout=TIMEOUT)
        _load_row(dash_duo, index)
        _until(dash_duo, lambda d: _selected(dash_duo) == "tab-timeline", f"row {index} did not open the timeline")
        dash_duo.wait_for_contains_text("#timeline .gtitle", "GPU", timeout=TIMEOUT)
        url = dash_duo.driver.current_url
        assert "lang=id" in url and "view=" not in url
        values, ignored = values_from_query(url[url.index("?"):])
        assert not ignored
        settings = candidates[index]["settings"]
        if "layout" in settings:
            assert values["layout"] == settings["layout"]
        assert values["scheme"] == candidates[index]["scheme"]
        assert dash_duo.find_element("#tab-timeline").text == id_("tab.timeline")
        assert dash_duo.find_element("#seq-label").text == id_("ctl.seq.label")
        assert dash_duo.driver.execute_script("return window.__samePage === true;"), "the page reloaded"
    assert _severe(dash_duo) == []


_LABELS = {"questions": {"#quiz-next": "quiz.next", "#quiz-restart": "quiz.restart",
                         "#quiz-bw-label": "quiz.bandwidth", "#quiz-row-label": "quiz.row",
                         "#quiz-ring-step-label": "ring.slider", "#quiz-nav-label": "quiz.nav"},
           "timeline": {"#timeline-ring-label": "ring.caption", "#timeline-ring-step-label": "ring.slider",
                        "#ranks-label": "ctl.ranks.label"}}
"""Labels, by the view that shows them, that a translation pass once left blank when its first
call came from another control."""


@pytest.mark.parametrize("lang", ["en", "id"])
def test_every_label_is_drawn_whichever_control_moves_first(dash_duo, lang):
    t = Translator(lang)
    _open(dash_duo, "?view=questions" + ("&lang=id" if lang == "id" else ""))
    # Next, before anything else has settled
    dash_duo.wait_for_element("#quiz-next", timeout=TIMEOUT).click()
    _until(dash_duo, lambda d: "q=2" in d.current_url, "Next did not move to question 2")
    dash_duo.wait_for_text_to_equal("#quiz-title", t("quiz.title", n=2, total=8), timeout=TIMEOUT)

    def labelled(view):
        for selector, key in _LABELS[view].items():
            _until(dash_duo, lambda d: d.find_element(By.CSS_SELECTOR, selector).get_attribute("textContent").strip()
                   == t(key), f"{selector} is not {t(key)!r}")

    labelled("questions")
    # the bandwidth control of question 5 first: its label is there with it
    dash_duo.find_elements("#quiz-q label")[4].click()
    dash_duo.find_elements("#quiz-choice label")[0].click()
    dash_duo.wait_for_text_to_equal("#quiz-bw-label", t("quiz.bandwidth"), timeout=TIMEOUT)
    # the timeline's, drawn when its view first opens
    dash_duo.find_element("#tab-timeline").click()
    labelled("timeline")
    assert _severe(dash_duo) == []


def test_a_link_the_page_cannot_simulate_shows_the_defaults_and_says_so(dash_duo):
    en = Translator("en")
    _open(dash_duo, "?gpus=2000")
    # the line at the top names the control and says what is wrong with it
    dash_duo.wait_for_contains_text("#banner", en("banner.defaults", control=en("ctl.gpus.label"), message="").strip(),
                                    timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#banner", "1,024", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#gpus-msg", "1,024", timeout=TIMEOUT)
    assert dash_duo.find_element("#gpus").get_attribute("value") == "2000"
    # the views are drawn, of the default scenario (8 GPUs)
    dash_duo.wait_for_contains_text("#timeline .gtitle", "8 GPUs", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#scenario-line", "8 ×", timeout=TIMEOUT)
    # the message is under the control it names, in the page's language
    dash_duo.find_elements("#lang label")[1].click()
    dash_duo.wait_for_contains_text("#gpus-msg", "1.024", timeout=TIMEOUT)
    id_ = Translator("id")
    dash_duo.wait_for_contains_text("#banner", id_("banner.defaults", control=id_("ctl.gpus.label"), message="").strip(),
                                    timeout=TIMEOUT)
    # fixing the value draws it and clears the banner
    box = dash_duo.find_element("#gpus")
    box.clear()
    box.send_keys("16\n")
    dash_duo.wait_for_contains_text("#timeline .gtitle", "16 GPU", timeout=TIMEOUT)
    _until(dash_duo, lambda d: not d.find_element(By.ID, "banner").text.strip(), "the banner stayed")
    assert _severe(dash_duo) == []


def test_a_number_is_typed_as_the_page_s_language_writes_it(dash_duo):
    """In Bahasa Indonesia 1.000 is a thousand and 0,6 six tenths: the box shows the number it
    was read as and the run takes it (a browser's number box took 1.000 for 1); text that is
    no number stays in its box, refused under it, the last valid run kept."""
    _open(dash_duo, "?lang=id")
    dash_duo.wait_for_contains_text("#scenario-line", "8 ×", timeout=TIMEOUT)
    for cid, typed, read, in_url in (("link-gbps", "1.000", "1000", "link_gbps=1000"),
                                     ("efficiency", "0,6", "0.6", "eff=0.6")):
        box = dash_duo.find_element(f"#{cid}")
        dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
        box.clear()
        box.send_keys(typed + "\n")
        _until(dash_duo, lambda d: d.find_element(By.ID, cid).get_attribute("value") == read,
               f"{cid}: the box does not show {read}")
        _until(dash_duo, lambda d: in_url in d.current_url, f"the address does not carry {in_url}")
    box = dash_duo.find_element("#seq")
    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
    box.clear()
    box.send_keys("12x\n")
    dash_duo.wait_for_contains_text("#seq-msg", "'12x'", timeout=TIMEOUT)
    assert dash_duo.find_element("#seq").get_attribute("value") == "12x"
    dash_duo.wait_for_contains_text("#banner", Translator("id")("ctl.seq.label"), timeout=TIMEOUT)
    assert _severe(dash_duo) == []
