"""The background callbacks' manager (dashboard/views/background.py): a job whose process
ends between Dash's check that it exists and the call on it is a job done, not an error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dashboard.views import background

psutil = pytest.importorskip("psutil")


@pytest.fixture()
def manager(tmp_path):
    m = background.manager(str(tmp_path / "jobs"))
    if m is None:
        pytest.skip("diskcache is not installed")
    return m


def _ended_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_job_that_ended_as_it_was_cancelled_is_not_an_error(manager, monkeypatch):
    pid = _ended_pid()
    # the race: the process is there when Dash looks, gone when it acts
    monkeypatch.setattr(psutil, "pid_exists", lambda _: True)
    with pytest.raises(psutil.NoSuchProcess):
        psutil.Process(pid)
    manager.terminate_job(pid)
    assert manager.job_running(pid) is False


def test_a_running_job_is_still_stopped(manager):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert manager.job_running(proc.pid)
    manager.terminate_job(proc.pid)        # killed and reaped (psutil waits on it)
    assert not manager.job_running(proc.pid) and not psutil.pid_exists(proc.pid)
    proc.wait(timeout=10)


def _values(tab: str, **changes):
    from dashboard.state import defaults

    return {"scenario.data": {"values": defaults() | {"gpus": 4, "seq": 8192} | changes}, "profile.data": None,
            "tabs.value": tab, "lang.value": "en", "schemes-mode.value": "schemes"}


def test_a_closed_view_starts_no_job(client):
    status, out = client._call("compare-asked.data", _values("timeline"), ["scenario.data"])
    assert status == 204 and out == {}


def test_a_comparison_made_once_is_drawn_in_the_request(client, tmp_path, monkeypatch):
    from dashboard import compute
    from dashboard.disk_cache import DiskCache

    monkeypatch.setattr(compute, "DISK", DiskCache(tmp_path / "shared"))   # nothing made before
    compute.clear_caches()
    values = _values("compare")
    _, first = client._call("compare-asked.data", values, ["scenario.data"])
    assert "compare-asked" in first and "compare" not in first     # not made yet: a job is asked for
    _, drawn = client.call("compare.figure", values, ["scenario.data"])
    assert drawn["compare"]["figure"]["data"]
    _, again = client._call("compare-asked.data", values, ["scenario.data"])
    assert "compare-asked" not in again                             # made: no job
    (figure,) = [v for k, v in again["compare"].items() if k.startswith("figure")]
    assert figure == drawn["compare"]["figure"]
    compute.clear_caches()


def test_a_comparisons_progress_shows_the_rows_done_so_far():
    """Before any run ends, the count alone; once one has run, the count and the view's table
    of the rows so far (a refused row alone is not a result yet)."""
    from dashboard.i18n import Translator
    from dashboard.views.background import RowsSoFar

    shown = []
    so_far = RowsSoFar(shown.append, Translator("en"), lambda rows: f"table of {len(rows)}")
    so_far.counted(1, 15)
    so_far.rows([{"scheme": "ulysses", "refused": "no"}])
    assert shown == ["Simulating: 1 of 15 runs done"]
    so_far.counted(2, 15)
    so_far.rows([{"scheme": "ulysses", "refused": "no"}, {"scheme": "ring"}])
    words, table = shown[-1]
    assert "2" in words.children and "15" in words.children
    assert table.children == "table of 2" and "busy-rows" in table.className


def test_a_new_job_starts_its_line_afresh(tmp_path, monkeypatch):
    """Asking for a job resets the busy line to "starting" in the page's language and shows
    it: the last job's count and rows do not show again until the new job's first word."""
    if background.manager(str(tmp_path / "probe")) is None:
        pytest.skip("diskcache is not installed")
    monkeypatch.setenv("RINGSIM_DASHBOARD_CACHE", str(tmp_path / "cache"))
    from dashboard.app import create_app
    from dashboard.client import CallbackClient
    from dashboard.state import defaults

    client = CallbackClient.for_app(create_app())
    values = {"scenario.data": {"values": defaults() | {"gpus": 64}}, "profile.data": None,
              "tabs.value": "schemes", "lang.value": "id", "schemes-mode.value": "schemes"}
    status, out = client._call("schemes-asked.data", values, ["scenario.data"])
    assert status == 200 and out["schemes-asked"]["data"]["inputs"]
    (progress,) = [v for k, v in out["schemes-progress"].items() if k.startswith("children")]
    assert progress == "Memulai…"
    # and the line shows now, not once the job's process has started
    (style,) = [v for k, v in out["schemes-busy"].items() if k.startswith("style")]
    assert style == {}
