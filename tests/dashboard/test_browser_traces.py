"""The Profiler traces view in headless Chromium (run with `pytest --headless`): a ring recorded
under torch.profiler on gloo, both ranks uploaded together, drawn measured beside simulated
with its breakdown table and a what-if."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboard.app import create_app
from dashboard.views.traces import MAX_TRACES_UPLOAD_BYTES

pytestmark = pytest.mark.browser

TIMEOUT = 60
ZIGZAG = Path(__file__).resolve().parents[1] / "data" / "traces" / "cpu" / "ring-zigzag-causal-fwd-2r"


def _severe(dash_duo):
    return [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"]


def test_an_uploaded_trace_shows_its_timelines_table_and_what_if(dash_duo):
    dash_duo.start_server(create_app())
    dash_duo.driver.get(dash_duo.server_url + "/?view=traces")
    dash_duo.wait_for_contains_text("#traces-lanes", "Upload a torch.profiler trace", timeout=TIMEOUT)
    files = "\n".join(str(p) for p in sorted(ZIGZAG.iterdir()))
    dash_duo.find_element("#traces-upload input[type=file]").send_keys(files)
    dash_duo.wait_for_contains_text("#traces-status", "2 of 2 ranks", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#traces-lanes .gtitle", "Model vs measurement", timeout=TIMEOUT)
    ticks = dash_duo.find_element("#traces-lanes").text
    assert "GPU 0 sim" in ticks and "GPU 1 meas" in ticks
    dash_duo.wait_for_contains_text("#traces-breakdown-table", "comm-comp overlap", timeout=TIMEOUT)
    rows = dash_duo.driver.find_elements("css selector", "#traces-breakdown-table tbody tr")
    assert len(rows) == 2
    assert "Attention phase per iteration" in dash_duo.find_element("#traces-replay").text
    dash_duo.wait_for_contains_text("#traces-whatif .gtitle", "What if", timeout=TIMEOUT)
    assert _severe(dash_duo) == []


def test_an_upload_over_the_limit_is_refused_with_a_message(dash_duo, tmp_path):
    big = tmp_path / "rank0.json"
    big.write_bytes(b" " * (MAX_TRACES_UPLOAD_BYTES + 1024 * 1024))
    dash_duo.start_server(create_app())
    dash_duo.driver.get(dash_duo.server_url + "/?view=traces")
    dash_duo.wait_for_contains_text("#traces-lanes", "Upload a torch.profiler trace", timeout=TIMEOUT)
    dash_duo.find_element("#traces-upload input[type=file]").send_keys(str(big))
    dash_duo.wait_for_contains_text("#traces-msg", "over the 50 MB limit", timeout=TIMEOUT)
    # then a trace under it opens as ever (the file input emptied first: WebDriver adds to a
    # multiple input's files)
    box = dash_duo.find_element("#traces-upload input[type=file]")
    dash_duo.driver.execute_script("arguments[0].value = '';", box)
    box.send_keys(str(ZIGZAG / "rank0.json.gz"))
    dash_duo.wait_for_contains_text("#traces-status", "1 of 2 ranks", timeout=TIMEOUT)
    assert dash_duo.find_element("#traces-msg").text == ""
    assert _severe(dash_duo) == []
