"""`ringsim dashboard` serves through a production WSGI server; `ringsim --version`."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time

import pytest
import requests

from dashboard.cli import default_workers
from sim.cli.main import main


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("ringsim ") and out.split()[1][0].isdigit()


@pytest.mark.parametrize("flags", [["--threads", "0"], ["--threads", "1000"], ["--workers", "0"], ["--runners", "-1"],
                                   ["--workers", "2", "--dev-server"], ["--workers", "2", "--debug"]])
def test_bad_server_flags_are_one_line(flags, capsys):
    assert main(["dashboard", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringsim: error:") and err.count("\n") == 1


def test_help_names_the_server_options(capsys):
    with pytest.raises(SystemExit):
        main(["dashboard", "--help"])
    out = capsys.readouterr().out
    assert "--threads" in out and "--workers" in out and "waitress" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(*flags: str):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli.main", "dashboard", "--port", str(port), *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            r = requests.get(base + "/", timeout=2)
            return proc, base, r
        except requests.ConnectionError:
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read())
            time.sleep(0.1)
    proc.terminate()
    raise AssertionError("the dashboard did not start")


AUTO = "gunicorn" if default_workers() > 1 else "ringsim"   # one process per core where gunicorn runs


@pytest.mark.slow
@pytest.mark.parametrize("flags, server", [
    ((), AUTO),
    (("--workers", "1"), "ringsim"),                    # waitress, named by its ident
    (("--workers", "1", "--threads", "2"), "ringsim"),
    (("--dev-server",), "Werkzeug"),
    pytest.param(("--workers", "2", "--threads", "2"), "gunicorn", marks=pytest.mark.skipif(
        importlib.util.find_spec("gunicorn") is None, reason="gunicorn is not installed")),
])
def test_the_dashboard_serves(flags, server):
    proc, base, r = _serve(*flags)
    try:
        assert r.status_code == 200 and "ringsim" in r.text
        assert server in r.headers.get("Server", "")
        deps = requests.get(base + "/_dash-dependencies", timeout=10).json()
        assert any("quiz-verdict.children" in d["output"] for d in deps)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if server == "ringsim":
        assert "waitress" in proc.stderr.read()


def test_the_app_is_set_up_before_any_request_is_served():
    """A fresh app registers the component files it may serve only on its first request;
    _set_up makes that request before the server starts, so that a burst of first
    requests on several threads cannot ask for a file not yet registered."""
    from dashboard.app import create_app
    from dashboard.cli import _set_up

    app = create_app()
    assert not any(path.startswith("deps/react-dom") for path in app.registered_paths["dash"])
    _set_up(app)
    assert any(path.startswith("deps/react-dom") for path in app.registered_paths["dash"])
    # every script the page names is now served, from a client that made no request before
    page = app.server.test_client().get("/").get_data(as_text=True)
    scripts = [s.split('"')[0] for s in page.split('<script src="')[1:]]
    assert scripts and all(app.server.test_client().get(s).status_code == 200 for s in scripts)


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append((int(entry), cmd))
    return out


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@pytest.mark.parametrize("flags", [("--workers", "1"), pytest.param(("--workers", "2"), marks=pytest.mark.skipif(
    importlib.util.find_spec("gunicorn") is None, reason="gunicorn is not installed"))])
def test_the_server_keeps_its_runners_and_ends_them(flags):
    """`ringsim dashboard --runners 2` starts two comparison runners before it serves; they
    end with it, their folder gone."""
    proc, base, r = _serve(*flags, "--runners", "2")
    try:
        runners = [(pid, cmd) for pid, cmd in _children(proc.pid) if "-m dashboard.runner " in cmd]
        assert len(runners) == 2
        folder = runners[0][1].split("--folder ")[1].split()[0]
        assert os.path.isdir(folder)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while (any(os.path.exists(f"/proc/{pid}") for pid, _ in runners) or os.path.exists(folder)) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(os.path.exists(f"/proc/{pid}") for pid, _ in runners) and not os.path.exists(folder)


def test_runners_that_cannot_start_leave_the_page_to_start_its_own(monkeypatch, capsys):
    from dashboard import cli, runners

    def fail(count):
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(runners, "start", fail)
    cli._start_runners(2, reloading=False)
    err = capsys.readouterr().err
    assert err.startswith("ringsim: warning: the comparisons' runners did not start (Too many open files)")
    assert err.count("\n") == 1 and runners.RUNNERS is None
