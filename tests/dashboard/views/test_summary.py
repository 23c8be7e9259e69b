"""The summary cards' numbers."""

from __future__ import annotations

from dashboard.i18n import Translator
from dashboard.views.summary import _fmt_s


def test_a_card_s_time_in_the_page_s_decimals():
    assert _fmt_s(Translator("en"), 0.0508312) == "50.83 ms"
    assert _fmt_s(Translator("id"), 0.0508312) == "50,83 ms"
    assert _fmt_s(Translator("en"), 3.2e-5) == "32 µs"
    assert _fmt_s(Translator("en"), None) == "–"


def test_a_long_run_s_time_is_whole_and_grouped_not_in_exponents():
    """26,995 s, as the timeline's title says it, and grouped as the page's language groups."""
    assert _fmt_s(Translator("en"), 26995.3) == "26,995 s"
    assert _fmt_s(Translator("id"), 26995.3) == "26.995 s"
    assert _fmt_s(Translator("en"), 9999.4) == "9999 s"
    assert "e+" not in _fmt_s(Translator("en"), 3.1e7)
