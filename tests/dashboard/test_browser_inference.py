"""The Inference view in a real browser (run with `pytest --headless`), in both languages."""

from __future__ import annotations

import pytest

from dashboard.app import create_app
from dashboard.i18n import Translator

pytestmark = pytest.mark.browser

TIMEOUT = 60


@pytest.mark.parametrize("lang", ["en", "id"])
def test_the_inference_view_opens_in_each_language(dash_duo, lang):
    t = Translator(lang)
    dash_duo.start_server(create_app())
    dash_duo.driver.get(f"{dash_duo.server_url}/?view=inference&lang={lang}")
    for chart in ("inf-prefill", "inf-crossover", "inf-decode"):
        dash_duo.wait_for_element(f"#{chart} .main-svg", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#inf-prefill .gtitle", t("inf.timeline.title"), timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#inf-crossover .gtitle", t("inf.cross.title"), timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#tab-inference", t("tab.inference"), timeout=TIMEOUT)
    assert [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"] == []
