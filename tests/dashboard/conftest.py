"""Independent references for the dashboard tests: token ownership from the layout
definitions of docs/design.md (fact 8) and a measured-looking trace built by hand; and the
browser the browser tests share.

A browser test asks for `dash_duo` as with Dash's own fixture and starts its own
`create_app()`; what it does not pay for again is the browser and the server. One headless
Chromium and one HTTP server live as long as the test process (one per pytest-xdist
worker); each test gets a fresh tab (its own history and session storage), the origin's
stored data cleared, the window at its first size and the console read empty, and the
server hands every request to the app that test started. Starting Chromium and a server
for each test cost about 2 s a test, and each test's first page fetched and compiled Dash's
and Plotly's scripts again.
"""

from __future__ import annotations

import threading
import time
from dataclasses import fields
from html.parser import HTMLParser

import numpy as np
import pytest
from dash._configs import get_combined_config
from dash.testing.browser import Browser
from werkzeug.serving import make_server

from dashboard.app import create_app
from dashboard.client import CallbackClient
from dashboard.state import CONTROL_IDS, defaults
from sim.engine.play import simulate
from sim.scenario.config import Scenario, Workload
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.trace.format import Span, Trace
from tests.reference import token_owner as owner  # noqa: F401  (the figure tests use it)
from tests.sim.reference import run_by


class _HtmlTable(HTMLParser):
    """A table the page shows as HTML (dashboard.views.common.table, as Dash serializes it),
    read by the standard library's HTML parser: its column titles, its body rows (each
    row's class and its cells' texts) and every text it holds."""

    def __init__(self, component):
        super().__init__()
        assert component["type"] == "Markdown" and component["props"]["dangerously_allow_html"]
        self.head, self.rows, self.texts = [], [], []
        self._in_body, self._cell = False, None
        self.feed(component["props"]["children"])

    def handle_starttag(self, tag, attrs):
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append((dict(attrs).get("class"), []))
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            text = "".join(self._cell)
            if tag == "th":
                self.head.append(text)
            elif self._in_body:
                self.rows[-1][1].append(text)
            self._cell = None

    def handle_data(self, data):
        self.texts.append(data)
        if self._cell is not None:
            self._cell.append(data)


def table_rows(component) -> list[tuple[str | None, list[str]]]:
    """The body rows of a table the page shows as HTML: each row's class and its cells' texts."""
    return _HtmlTable(component).rows


def table_head(component) -> list[str]:
    """The column titles of a table the page shows as HTML."""
    return _HtmlTable(component).head


def table_text(component) -> str:
    """Every text a table the page shows as HTML holds, its head's among them."""
    return " ".join(_HtmlTable(component).texts)


def chunk_tokens(layout: str, seq: int, n: int, chunk: int) -> np.ndarray:
    """The tokens of one chunk id as the trace numbers them."""
    if layout == "striped":
        return np.arange(chunk, seq, n)
    size = seq // (2 * n if layout == "zigzag" else n)
    return np.arange(chunk * size, (chunk + 1) * size)


def small_scenario(**kw) -> Scenario:
    """A small scenario; the scheme's own settings given by their fields' names."""
    w = dict(seq=kw.pop("seq", 4096), heads=8, kv_heads=2, head_dim=64, dtype="bf16",
             causal=kw.pop("causal", True), pass_=kw.pop("pass_", "fwd"))
    own = fields(get_scheme(kw.get("scheme", DEFAULT_SCHEME)).settings_type)
    settings = {f.name: kw.pop(f.name) for f in own if f.name in kw}
    return Scenario(workload=Workload(**w), n_gpus=kw.pop("n_gpus", 4),
                    **run_by(kw.pop("scheme", DEFAULT_SCHEME), **settings), **kw)


def measured_from(sim: Trace, factor: float, offset_s: float = 0.5, noise: float = 0.0,
                  seed: int = 0) -> Trace:
    """A 'measured' trace: the simulated one, slower by `factor`, started at `offset_s`."""
    rng = np.random.default_rng(seed)
    t0 = min(s.start_s for s in sim.spans)
    spans = []
    for s in sim.spans:
        jitter = 1.0 + noise * rng.standard_normal() if noise else 1.0
        start = offset_s + (s.start_s - t0) * factor
        end = start + (s.end_s - s.start_s) * factor * max(jitter, 0.1)
        spans.append(Span(s.rank, s.stream, s.kind, s.step, start, end, s.flops, s.bytes,
                          s.q_chunks, s.kv_chunks, s.peer))
    return Trace("measured", sim.n_gpus, spans, dict(sim.config),
                 {"kind": "measured", "device": "cpu"}, {"runs": 1})


@pytest.fixture(scope="session")
def small_trace() -> Trace:
    return simulate(small_scenario(layout="zigzag"))


@pytest.fixture(scope="module")
def client() -> CallbackClient:
    """The app's callbacks, called as the page calls them (one app per test module)."""
    return CallbackClient.for_app(create_app())


def controls(**changes) -> dict:
    """Every control's value as the page sends it: the defaults with `changes`."""
    vals = defaults() | changes
    return {f"{cid}.value": vals[cid] for cid in CONTROL_IDS}


class _CurrentApp:
    """The WSGI application of whichever Dash app the running test started."""

    def __init__(self):
        self.app = None

    def __call__(self, environ, start_response):
        app = self.app
        if app is None:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"no app started"]
        return app.server(environ, start_response)


class _SharedServer:
    """One threaded HTTP server on a free loopback port, serving `_CurrentApp`."""

    def __init__(self):
        self.current = _CurrentApp()
        self._server = make_server("127.0.0.1", 0, self.current, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join()


class SharedDuo(Browser):
    """Dash's `dash_duo` on a browser and a server that outlive the test."""

    def __init__(self, server: _SharedServer, **kwargs):
        super().__init__(**kwargs)
        self.server = server
        self._first_size = self.driver.get_window_size()
        self._first_wait_timeout = self.wait_timeout

    def start_server(self, app, navigate: bool = True):
        """Serve `app` (as Dash's threaded runner prepares it) and, with `navigate`,
        open its page."""
        app.scripts.config.serve_locally = True
        app.css.config.serve_locally = True
        # what `app.run` sets before it serves: dev tools off unless DASH_DEBUG says
        app.config.update({"hide_all_callbacks": False})
        app.enable_dev_tools(get_combined_config("debug", None, False), dev_tools_disable_version_check=True)
        self.server.current.app = app
        if navigate:
            self.server_url = self.server.url   # opens the page and waits for Dash

    def fresh_page(self) -> None:
        """What a test would find in a browser of its own: one blank tab, nothing stored
        for the server's origin, the first window size, no console messages."""
        driver = self.driver
        driver.switch_to.new_window("tab")
        tab = driver.current_window_handle
        for handle in driver.window_handles:
            if handle != tab:
                driver.switch_to.window(handle)
                driver.close()
        driver.switch_to.window(tab)
        driver.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": self.server.url, "storageTypes": "all"})
        driver.set_window_size(self._first_size["width"], self._first_size["height"])
        driver.implicitly_wait(2)
        self.wait_timeout = self._first_wait_timeout
        driver.get_log("browser")
        self._last_ts = 0
        self._url = ""
        self._window_idx = 0

    def leave_page(self) -> None:
        """Stop the page's timers and requests before the next test's app is served."""
        self.server.current.app = None
        if self.alive():
            self.driver.get("about:blank")

    def alive(self) -> bool:
        try:
            return bool(self.driver.window_handles)
        except Exception:
            return False


class _BrowserKeeper:
    """The shared browser, made when a test first asks for it and again if one died."""

    def __init__(self, make):
        self._make = make
        self._duo = None

    def get(self):
        if self._duo is not None and not self._duo.alive():    # a test crashed it
            self.close()
        if self._duo is None:
            self._duo = self._make()
        return self._duo

    def close(self) -> None:
        if self._duo is not None:
            self._duo.__exit__(None, None, None)
            self._duo = None


SETTLED = """
const s = window.store && window.store.getState();
if (!s) return false;
const cb = Object.assign({}, s.callbacks); delete cb.stored; delete cb.completed;
if ([].concat(...Object.values(cb)).length) return false;
// every chart drawn at its box's width (dashboard/assets/fit.js), one that fixes its own excepted
return Array.from(document.querySelectorAll('.js-plotly-plot')).every(gd =>
    !gd._fullLayout || (gd.layout && gd.layout.width) || gd.clientWidth < 1
    || Math.abs(gd._fullLayout.width - gd.clientWidth) <= 1);
"""
"""True once the page has no callback pending and every chart shown is drawn at its width."""


def wait_settled(driver, timeout_s: float) -> None:
    """Wait until the page reads as settled (`SETTLED`) twice, 0.3 s apart: a callback's
    reply may ask for the next one."""
    deadline = time.time() + timeout_s
    for _ in range(2):
        while not driver.execute_script(SETTLED) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)


@pytest.fixture(scope="session")
def _shared_browser(request, tmp_path_factory):
    """A browser made as Dash's `dash_duo` makes its own, on a server of the session's."""
    config = request.config
    server = _SharedServer()
    keeper = _BrowserKeeper(lambda: SharedDuo(
        server,
        browser=config.getoption("webdriver"),
        remote=config.getoption("remote"),
        remote_url=config.getoption("remote_url"),
        headless=config.getoption("headless"),
        options=config.hook.pytest_setup_options(),
        download_path=str(tmp_path_factory.mktemp("download")),
        percy_assets_root=config.getoption("percy_assets"),
        percy_finalize=config.getoption("nopercyfinalize"),
        pause=config.getoption("pause"),
    ))
    yield keeper
    keeper.close()
    server.close()


@pytest.fixture
def dash_duo(_shared_browser):
    """Dash's `dash_duo` (a browser with `start_server(app)`) on the shared browser and
    server, with a fresh page."""
    duo = _shared_browser.get()
    duo.fresh_page()
    yield duo
    duo.leave_page()
