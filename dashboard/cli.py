"""`ringsim dashboard`: serve the browser app.

Loopback by default (127.0.0.1:8050), debug off. The app is served by waitress, a
production WSGI server with a fixed pool of request threads (`--threads`); `--workers`
above 1 runs that many server processes under gunicorn (Unix), each with its own
threads and caches. Flask's development server is used only for `--debug` (its reloader
and dev tools) or when asked for with `--dev-server`. Dash is imported only when the
command runs, so that the rest of the CLI does not pay for it.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys

from sim.errors import RingsimError

DEFAULT_THREADS = 8
"""Request threads of a single server process; with several, each gets 4."""
MAX_AUTO_WORKERS = 8


def default_workers() -> int:
    """One server process per CPU core (at most MAX_AUTO_WORKERS) where gunicorn runs (Unix,
    installed): figures are built in Python, so threads of one process share one core.
    Otherwise one waitress process."""
    try:
        import gunicorn  # noqa: F401  (installed?)
    except ModuleNotFoundError:
        return 1
    if os.name != "posix":
        return 1
    return max(1, min(MAX_AUTO_WORKERS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "dashboard", help="serve the interactive dashboard in a browser",
        description="Serve the dashboard (loopback only unless --host says otherwise) through "
                    "waitress, or gunicorn with --workers above 1. Open "
                    "/?view=questions&lang=id for the questions in Bahasa Indonesia.")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to listen on (default 127.0.0.1; 0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=int, default=8050, help="(default 8050)")
    p.add_argument("--threads", type=int, default=None,
                   help=f"request threads per server process (default {DEFAULT_THREADS} with one "
                        "process, 4 with several)")
    p.add_argument("--workers", type=int, default=None,
                   help="server processes (default: one per CPU core under gunicorn where it is "
                        "installed (Unix), else 1; 1: waitress; each process has its own caches)")
    p.add_argument("--runners", type=int, default=None,
                   help="processes kept for the comparisons' large runs, shared by the server processes "
                        "(default: one per CPU core where there are two or more, else 0; 0: a comparison "
                        "starts its own)")
    p.add_argument("--dev-server", action="store_true",
                   help="Flask's development server instead (for development and comparison)")
    p.add_argument("--debug", action="store_true",
                   help="Dash debug mode: reloader and dev tools, on the development server (off by default)")
    p.add_argument("--profile", default=None,
                   help="calibrated hardware profile (from `ringsim calibrate`) to start with: it "
                        "replaces the GPU and link presets, and the page opens on a scenario within "
                        "what it measured (its dtype, GPUs and block sizes)")
    p.add_argument("--traces-dir", default=None, metavar="DIR",
                   help="let the Profiler traces view open torch.profiler traces by their path on this "
                        "server, only under DIR (default: uploads only)")
    p.set_defaults(func=cmd_dashboard)


def _serve_waitress(app, host: str, port: int, threads: int) -> None:
    from waitress import serve

    serve(app.server, host=host, port=port, threads=threads, ident="ringsim",
          # a figure of a large ring is several MB: send it in large writes
          send_bytes=1 << 16, outbuf_overflow=1 << 24)


def _set_up(app) -> None:
    """Dash builds its page's script list and registers the files it may serve on its
    first request (dash.Dash._setup_server, a before-request hook). Under a threaded
    server the first burst of requests races it: a request for a component's script can
    find its path not yet registered and fail ("is registered but the path requested is
    not valid"), leaving the page at "Loading...". One request here, before any server
    thread starts or worker forks from this process, does it once for all of them."""
    app.server.test_client().get("/")


def _start_runners(count: int | None, reloading: bool) -> None:
    """Start the comparisons' runners (dashboard/runners.py) before the server forks, so that
    every server process and background job shares them; one per core by default, none under
    the reloader (it runs this command twice), on one core (a comparison's large runs then
    run one after another in its own process) or off Unix; where they cannot start, the page
    goes on without them."""
    from dashboard import runners
    from sim.engine.threads import cores

    if count is None:
        count = 0 if reloading or cores() < 2 or os.name != "posix" else min(cores(), MAX_AUTO_WORKERS)
    elif count and os.name != "posix":
        raise RingsimError("--runners needs a Unix system (its runners listen on Unix sockets); use --runners 0")
    if count:
        try:
            runners.start(count)
        except OSError as e:
            # the page works without them: each comparison starts its own processes
            print(f"ringsim: warning: the comparisons' runners did not start ({e.strerror or e}); "
                  "each comparison starts its own processes", file=sys.stderr)
            return
        atexit.register(runners.stop)


def _serve_gunicorn(app, host: str, port: int, workers: int, threads: int) -> None:
    try:
        from gunicorn.app.base import BaseApplication
    except ModuleNotFoundError:
        raise RingsimError("--workers above 1 needs gunicorn (pip install gunicorn; Unix only)") from None

    class _Server(BaseApplication):
        def load_config(self) -> None:
            for key, value in {"bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
                               "workers": workers, "threads": threads,
                               "worker_class": "gthread", "timeout": 120,
                               "accesslog": None}.items():
                self.cfg.set(key, value)

        def load(self):
            return app.server

    _Server().run()


def cmd_dashboard(a: argparse.Namespace) -> int:
    dev = a.debug or a.dev_server
    if a.workers is None:
        a.workers = 1 if dev else default_workers()
    if a.threads is None:
        a.threads = DEFAULT_THREADS if a.workers == 1 else 4
    if not 0 < a.port < 65536:
        raise RingsimError(f"--port must be in 1..65535, got {a.port}")
    if not 1 <= a.threads <= 256:
        raise RingsimError(f"--threads must be in 1..256, got {a.threads}")
    if not 1 <= a.workers <= 64:
        raise RingsimError(f"--workers must be in 1..64, got {a.workers}")
    if a.runners is not None and not 0 <= a.runners <= 64:
        raise RingsimError(f"--runners must be in 0..64, got {a.runners}")
    if dev and a.workers > 1:
        raise RingsimError("--workers needs the production server: drop --debug/--dev-server")
    if a.traces_dir is not None and not os.path.isdir(a.traces_dir):
        raise RingsimError(f"--traces-dir {a.traces_dir}: no such folder")
    try:
        from dashboard.app import create_app
    except ModuleNotFoundError as e:
        raise RingsimError(f"the dashboard needs {e.name}; install ringsim with its dependencies") from None
    try:
        app = create_app(profile_path=a.profile, traces_dir=a.traces_dir)
    except OSError as e:
        raise RingsimError(f"cannot read profile {a.profile}: {e.strerror or e}") from None
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"ringsim: warning: serving on {a.host}: anyone who can reach port {a.port} can use "
              "the dashboard and run simulations on this machine", file=sys.stderr)
    server = ("Flask development server" if dev else
              f"gunicorn, {a.workers} workers x {a.threads} threads" if a.workers > 1 else
              f"waitress, {a.threads} threads")
    print(f"ringsim dashboard on http://{a.host}:{a.port}/ ({server}; Ctrl-C to stop)", file=sys.stderr)
    if not dev:
        _set_up(app)
    _start_runners(a.runners, reloading=a.debug)
    try:
        if dev:
            app.run(host=a.host, port=a.port, debug=a.debug)
        elif a.workers > 1:
            _serve_gunicorn(app, a.host, a.port, a.workers, a.threads)
        else:
            _serve_waitress(app, a.host, a.port, a.threads)
    except OSError as e:
        raise RingsimError(f"cannot serve on {a.host}:{a.port}: {e.strerror or e}") from None
    return 0
