"""`ringsim dashboard`: serve the browser app.

Loopback by default (127.0.0.1:8050), debug off. Dash is imported only when the
command runs, so that the rest of the CLI does not pay for it.
"""

from __future__ import annotations

import argparse
import sys

from sim.errors import RingsimError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("dashboard", help="serve the interactive dashboard in a browser",
                              description="Serve the dashboard (loopback only unless --host says otherwise).")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to listen on (default 127.0.0.1; 0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=int, default=8050, help="(default 8050)")
    p.add_argument("--debug", action="store_true", help="Dash debug mode: reloader and dev tools (off by default)")
    p.add_argument("--profile", default=None,
                   help="calibrated hardware profile (from `ringsim calibrate`) to start with")
    p.set_defaults(func=cmd_dashboard)


def cmd_dashboard(a: argparse.Namespace) -> int:
    if not 0 < a.port < 65536:
        raise RingsimError(f"--port must be in 1..65535, got {a.port}")
    try:
        from dashboard.app import create_app
    except ModuleNotFoundError as e:
        raise RingsimError(f"the dashboard needs {e.name}; install ringsim with its dependencies") from None
    try:
        app = create_app(profile_path=a.profile)
    except OSError as e:
        raise RingsimError(f"cannot read profile {a.profile}: {e.strerror or e}") from None
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"ringsim: warning: serving on {a.host}: anyone who can reach port {a.port} can use "
              "the dashboard and run simulations on this machine", file=sys.stderr)
    print(f"ringsim dashboard on http://{a.host}:{a.port}/ (Ctrl-C to stop)", file=sys.stderr)
    try:
        app.run(host=a.host, port=a.port, debug=a.debug)
    except OSError as e:
        raise RingsimError(f"cannot serve on {a.host}:{a.port}: {e.strerror or e}") from None
    return 0
