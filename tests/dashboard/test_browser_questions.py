"""The Questions view, the language switch and the ring animation in headless Chromium
(run with `pytest --headless`)."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from dashboard.app import create_app
from dashboard.contents import TABS
from dashboard.i18n import Translator
from dashboard.views.questions import ANSWERS, choice_text

pytestmark = pytest.mark.browser

TIMEOUT = 30

_FIGURE_Q = """
const gd = document.querySelector('#quiz-figure .js-plotly-plot');
if (!gd || !gd.data || !gd.data.length || !gd.layout.meta) return null;
const points = (gd.calcdata || []).reduce((n, cd) => n + cd.length, 0);
return points > 0 ? gd.layout.meta.q : null;
"""


def _open(dash_duo, query: str) -> None:
    dash_duo.start_server(create_app())
    dash_duo.driver.get(dash_duo.server_url + "/" + query)


def _until(dash_duo, condition, message: str = ""):
    return WebDriverWait(dash_duo.driver, TIMEOUT).until(condition, message)


def _click_label(dash_duo, selector: str, index: int) -> None:
    _until(dash_duo, lambda d: len(d.find_elements(By.CSS_SELECTOR, selector)) > index)
    dash_duo.driver.find_elements(By.CSS_SELECTOR, selector)[index].click()


def _switch_language(dash_duo, lang: str) -> None:
    _click_label(dash_duo, "#lang label", ["en", "id"].index(lang))


def _severe(dash_duo):
    return [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"]


def test_every_question_right_and_wrong_in_both_languages(dash_duo):
    _open(dash_duo, "?view=questions")
    for lang in ("en", "id"):
        t = Translator(lang)
        if lang == "id":
            _switch_language(dash_duo, "id")
            dash_duo.find_element("#quiz-restart").click()
        for q in sorted(ANSWERS):
            _click_label(dash_duo, "#quiz-q label", q - 1)
            dash_duo.wait_for_text_to_equal("#quiz-title", t("quiz.title", n=q, total=8), timeout=TIMEOUT)
            dash_duo.wait_for_text_to_equal("#quiz-text", t(f"q{q}.text"), timeout=TIMEOUT)
            wrong = (ANSWERS[q] + 1) % 4
            _click_label(dash_duo, "#quiz-choice label", wrong)
            dash_duo.wait_for_text_to_equal(
                "#quiz-verdict", "✗ " + t("quiz.wrong", answer=choice_text(t, q, ANSWERS[q])),
                timeout=TIMEOUT)
            assert _until(dash_duo, lambda d: d.execute_script(_FIGURE_Q) == q,
                          f"question {q}'s figure has no data")
            assert dash_duo.find_element("#quiz-live").text.strip()
            _click_label(dash_duo, "#quiz-choice label", ANSWERS[q])
            dash_duo.wait_for_text_to_equal("#quiz-verdict", "✓ " + t("quiz.right"), timeout=TIMEOUT)
            dash_duo.wait_for_text_to_equal("#quiz-why", t(f"q{q}.why"), timeout=TIMEOUT)
        dash_duo.wait_for_text_to_equal("#quiz-final", t("quiz.final", right=0, total=8), timeout=TIMEOUT)
        dash_duo.wait_for_text_to_equal(
            "#quiz-score", t("quiz.score", right=0, answered=8, total=8), timeout=TIMEOUT)
    assert _severe(dash_duo) == []


def test_switching_language_keeps_the_question_and_the_answer(dash_duo):
    _open(dash_duo, "?view=questions&q=5")
    en, id_ = Translator("en"), Translator("id")
    dash_duo.wait_for_text_to_equal("#quiz-title", en("quiz.title", n=5, total=8), timeout=TIMEOUT)
    _click_label(dash_duo, "#quiz-choice label", ANSWERS[5])
    dash_duo.wait_for_text_to_equal("#quiz-verdict", "✓ " + en("quiz.right"), timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#quiz-figure .gtitle", "One block's compute", timeout=TIMEOUT)
    _switch_language(dash_duo, "id")
    dash_duo.wait_for_text_to_equal("#quiz-title", id_("quiz.title", n=5, total=8), timeout=TIMEOUT)
    dash_duo.wait_for_text_to_equal("#quiz-verdict", "✓ " + id_("quiz.right"), timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#quiz-figure .gtitle", "Komputasi satu blok", timeout=TIMEOUT)
    checked = dash_duo.find_element("#quiz-choice input:checked")
    assert checked.get_attribute("value") == str(ANSWERS[5])
    assert dash_duo.find_element("#tab-questions").text == "Pertanyaan"
    assert dash_duo.find_element("#seq-label").text == "Panjang urutan"
    _until(dash_duo, lambda d: "lang=id" in d.current_url)
    assert "view=questions" in dash_duo.driver.current_url and "q=5" in dash_duo.driver.current_url
    _switch_language(dash_duo, "en")
    dash_duo.wait_for_text_to_equal("#quiz-verdict", "✓ " + en("quiz.right"), timeout=TIMEOUT)
    _until(dash_duo, lambda d: "lang=" not in d.current_url)


def test_the_url_reproduces_view_question_and_language(dash_duo):
    _open(dash_duo, "?view=questions&q=6&lang=id&gpus=4")
    id_ = Translator("id")
    dash_duo.wait_for_text_to_equal("#quiz-title", id_("quiz.title", n=6, total=8), timeout=TIMEOUT)
    dash_duo.wait_for_text_to_equal("#quiz-text", id_("q6.text"), timeout=TIMEOUT)
    assert dash_duo.find_element("#gpus").get_attribute("value") == "4"
    assert "Pertanyaan" in dash_duo.find_element("#tabs .tab--selected").text
    _click_label(dash_duo, "#quiz-q label", 6)
    _until(dash_duo, lambda d: "q=7" in d.current_url)
    url = dash_duo.driver.current_url
    assert "gpus=4" in url and "lang=id" in url and "view=questions" in url
    # the same link in a fresh page alone the same place
    dash_duo.driver.get(url)
    dash_duo.wait_for_text_to_equal("#quiz-title", id_("quiz.title", n=7, total=8), timeout=TIMEOUT)
    _click_label(dash_duo, "#tabs .tab", 1)                      # the timeline
    dash_duo.wait_for_contains_text("#timeline .gtitle", "4 GPU", timeout=TIMEOUT)
    _until(dash_duo, lambda d: "view=" not in d.current_url and "q=" not in d.current_url)
    assert "lang=id" in dash_duo.driver.current_url
    assert _severe(dash_duo) == []


def test_an_unreadable_link_is_named_and_ignored(dash_duo):
    _open(dash_duo, "?view=nope&q=99&lang=xx")
    dash_duo.wait_for_contains_text("#nav-msg", "view=nope, q=99, lang=xx", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#timeline .gtitle", "makespan", timeout=TIMEOUT)
    assert dash_duo.find_element("#tab-questions").text == "Questions"
    assert _severe(dash_duo) == []


_RING_STEP = """
const gd = document.querySelector('#%s .js-plotly-plot');
if (!gd || !gd.layout || !gd.layout.title) return null;
const m = /(Step|Langkah) (\\d+)/.exec(gd.layout.title.text);
return m ? Number(m[2]) : null;
"""


def test_the_ring_animation_advances(dash_duo):
    _open(dash_duo, "")
    _until(dash_duo, lambda d: d.execute_script(_RING_STEP % "timeline-ring") == 0)
    dash_duo.find_element("#timeline-ring-play").click()
    _until(dash_duo, lambda d: (d.execute_script(_RING_STEP % "timeline-ring") or 0) >= 2,
           "the timeline's ring did not step")
    # question 2 draws it too, in the language on screen
    _switch_language(dash_duo, "id")
    _click_label(dash_duo, "#tabs .tab", 0)
    _click_label(dash_duo, "#quiz-q label", 1)
    _click_label(dash_duo, "#quiz-choice label", ANSWERS[2])
    dash_duo.wait_for_contains_text("#quiz-figure .gtitle", "Langkah 0", timeout=TIMEOUT)
    dash_duo.find_element("#quiz-ring-play").click()
    _until(dash_duo, lambda d: (d.execute_script(_RING_STEP % "quiz-figure") or 0) >= 1,
           "question 2's ring did not step")
    assert _severe(dash_duo) == []


def test_back_and_forward_restore_the_open_view(dash_duo):
    """The browser's history holds the view: back returns to the view before, forward to
    the one after, each drawn, the URL and the selected tab agreeing."""
    _open(dash_duo, "")
    dash_duo.wait_for_contains_text("#timeline .gtitle", "makespan", timeout=TIMEOUT)
    tabs = [value for value, _ in TABS]

    def select(view):
        _click_label(dash_duo, "#tabs .tab", tabs.index(view))
        _until(dash_duo, lambda d: f"view={view}" in d.current_url, f"the URL did not take view={view}")

    def selected():
        return dash_duo.find_element("#tabs .tab--selected").get_attribute("id")

    select("memory")
    select("compare")
    dash_duo.driver.back()
    _until(dash_duo, lambda d: "view=memory" in d.current_url and selected() == "tab-memory",
           "back did not reopen the Memory view")
    dash_duo.driver.back()
    _until(dash_duo, lambda d: "view=" not in d.current_url and selected() == "tab-timeline",
           "back did not reopen the timeline")
    dash_duo.driver.forward()
    _until(dash_duo, lambda d: "view=memory" in d.current_url and selected() == "tab-memory",
           "forward did not reopen the Memory view")
    assert _severe(dash_duo) == []


NAV_CASES = [
    ("questions", 6, "id", "?gpus=16"),
    ("memory", 1, "en", "?gpus=16&view=questions&q=6&lang=id"),
    ("timeline", 1, "en", "?gpus=16&view=memory"),
    ("timeline", 1, "en", "?gpus=16"),
    ("timeline", 1, "en", ""),
    ("questions", 3, "en", ""),
    ("compare", 1, "id", "?layout=striped&gpus=64&lang=id"),
    (None, None, None, "?view=memory&q=2&lang=id"),
    ("nowhere", 99, "klingon", "?view=questions&q=4&gpus=8"),
    ("schemes", 2, "en", "?view=klingon&q=zero&lang=&gpus=8"),
    ("questions", 8, "id", "?VIEW=memory&gpus=8&seq=131072"),
]


def test_the_view_question_and_language_reach_the_url_as_the_server_writes_them(dash_duo):
    """The address the browser writes on a change of view, question or language
    (dashboard.nav.TO_URL_JS) is the server's own (dashboard.nav.with_nav): the other keys
    kept, defaults left out, an invalid value taken from the address; nothing where the
    address says it already."""
    from dashboard.i18n import LANGUAGES
    from dashboard.nav import N_QUESTIONS, TO_URL_JS, views, with_nav

    _open(dash_duo, "")
    dash_duo.wait_for_contains_text("#timeline .gtitle", "makespan", timeout=TIMEOUT)
    script = ("const to_url = " + TO_URL_JS + ";\n const out = to_url(...arguments);"
              "\n return out === window.dash_clientside.no_update ? null : out;")
    for view, q, lang, search in NAV_CASES:
        want = with_nav(search, search, view=view if view in views() else None,
                        q=q if isinstance(q, int) and 1 <= q <= N_QUESTIONS else None,
                        lang=lang if lang in LANGUAGES else None)
        got = dash_duo.driver.execute_script(script, view, q, lang, search)
        assert got == (None if want == search else want), (view, q, lang, search)
    # the other keys as they are written: not decoded and encoded again
    assert dash_duo.driver.execute_script(script, "memory", 1, "en", "?note=a%20b") == "?note=a%20b&view=memory"


def test_the_page_shows_the_quiz_as_its_author_wrote_it(dash_duo):
    """Every question and its four choices, in the author's order, in both languages: the
    author's own words where the page speaks the language the author wrote them in
    (tests/data/quiz.txt), the catalog's translation otherwise."""
    from tests.dashboard.views.test_quiz_as_written import AUTHOR_LANGUAGE, OTHER_LANGUAGE, written

    quiz = written()
    _open(dash_duo, "?view=questions")
    seen_author = 0
    for lang in ("en", "id"):
        t = Translator(lang)
        if lang == "id":
            _switch_language(dash_duo, "id")
        for q in sorted(quiz):
            _click_label(dash_duo, "#quiz-q label", q - 1)
            dash_duo.wait_for_text_to_equal("#quiz-title", t("quiz.title", n=q, total=8), timeout=TIMEOUT)
            text, choices = quiz[q]
            dash_duo.wait_for_text_to_equal("#quiz-text", t(f"q{q}.text"), timeout=TIMEOUT)
            if AUTHOR_LANGUAGE[q] == lang:
                assert dash_duo.find_element("#quiz-text").text == text
            shown = [e.text for e in dash_duo.find_elements("#quiz-choice label")]
            assert shown == [choice_text(t, q, i) for i in range(4)]
            for i, choice in enumerate(choices):
                if OTHER_LANGUAGE.get((q, i), AUTHOR_LANGUAGE[q]) == lang:
                    assert shown[i] == f"{'ABCD'[i]}. {choice}"
                    seen_author += 1
    assert seen_author == 32                 # each choice once, in the language it was written in
    assert _severe(dash_duo) == []
