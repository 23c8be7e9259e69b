"""Real-browser test of the implementation control and Compare schemes' implementations side by
side in headless Chromium (run with `pytest --headless`)."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from tests.dashboard.test_browser import TIMEOUT, _severe, _start

pytestmark = pytest.mark.browser


def test_a_link_sets_the_implementation_and_compare_schemes_sets_them_side_by_side(dash_duo):
    _start(dash_duo, "?gpus=4&seq=8192&impl=rfa")
    dash_duo.wait_for_contains_text("#timeline .gtitle", "as rfa runs it", timeout=TIMEOUT)
    assert "rfa" in dash_duo.find_element("#impl").text
    dash_duo.driver.find_element(By.XPATH, "//*[@id='tabs']//*[normalize-space()='Compare schemes']").click()
    dash_duo.wait_for_contains_text("#schemes-why", "Fastest:", timeout=TIMEOUT)
    dash_duo.driver.find_element(By.XPATH, "//*[@id='schemes-mode']//label[contains(., 'each library')]").click()
    dash_duo.wait_for_contains_text("#schemes-table", "torch", timeout=TIMEOUT)     # none of the schemes' rows
    rows = dash_duo.find_elements("#schemes-table tbody tr")
    assert len(rows) == 5
    assert "rfa" in dash_duo.find_element("#schemes-table tr.current").text
    assert _severe(dash_duo) == []
