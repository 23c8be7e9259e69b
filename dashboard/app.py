"""The Dash app: `create_app()` makes it, sets its page (dashboard/layout.py) and registers
each view's callbacks (dashboard/views/, one module per view) and the URL's
(dashboard/nav.py) on it, over what they share on the server (dashboard/served.py).

Callbacks are thin: they turn control values into a scenario (dashboard/state.py), get
results through the simulator's public functions (dashboard/compute.py, cached), and
hand them to the pure figure builders (dashboard/figures/). A user's mistake is a
`RingsimError`, shown as a message beside its control or in place of a figure; the
views keep the last valid scenario meanwhile. Views compute only while their tab is open.
"""

from __future__ import annotations

import gc
import importlib
import os
import pkgutil

import dash
import plotly.graph_objects as go
import plotly.io

from dashboard import compute, nav
from dashboard.disk_cache import DiskCache
from dashboard.i18n import LANGUAGES, Translator
from dashboard.layout import page
from dashboard.served import MAX_UPLOAD_BYTES, Served
from dashboard.views import (
    background,
    blocks,
    compare,
    inference,
    language,
    measured,
    memory,
    merge,
    plan,
    questions,
    scenario,
    schemes,
    summary,
    sweep,
    timeline,
    traces,
)
from dashboard.views.common import register_shown


def create_app(profile_path: str | None = None, traces_dir: str | None = None,
               background_jobs: bool = True) -> dash.Dash:
    """The dashboard app; `profile_path` preloads a calibrated hardware profile, `traces_dir`
    is the folder whose profiler traces the Profiler traces view may open by path (None: none).
    With `background_jobs` (and diskcache installed) the long views compute in jobs of
    their own (dashboard/views/background.py); without, in the request."""
    app = dash.Dash(__name__, title="ringsim", update_title=None,
                    assets_folder=os.path.join(os.path.dirname(__file__), "assets"))
    # base64 inflates an upload by 4/3; refuse bodies well past the upload cap outright
    app.server.config["MAX_CONTENT_LENGTH"] = MAX_UPLOAD_BYTES * 3 // 2
    # results shared by every server process (gunicorn's workers fork after this) and by
    # the background callbacks' jobs, which keep their own results beside them
    disk = DiskCache()
    compute.use_disk(disk)
    served = Served(profile_path, background.manager(str(disk.folder / "jobs")) if background_jobs else None)
    app.layout = lambda: page(served.initial_profile, served.initial_example)
    for view in (scenario, summary, timeline, blocks, compare, schemes, sweep, memory, merge, measured, inference):
        view.register_callbacks(app, served)
    traces.register_callbacks(app, served, traces_dir=traces_dir)
    background.register_texts(app, ("compare", "schemes"))
    register_shown(app)
    for part in (language, nav, questions, plan):
        part.register_callbacks(app)

    import_ahead()
    # Dash, Plotly and the page live as long as the server: freezing them keeps the cycle
    # collector, which a large trace sets off many times, from walking them again and again
    gc.freeze()
    return app


PLOTLY_KINDS = ("bar", "scatter", "scattergl", "heatmap", "layout")
"""The Plotly objects the figures are made of, whose classes Plotly imports on first use."""


def import_ahead() -> None:
    """Import now what the views would otherwise import on first use: every module of
    ringsim's own, Plotly's classes of the figures' objects, the languages' number formats
    (Babel's locale data) and the serializer's. A background job (dashboard/views/background.py)
    is a process forked from a server process whose other threads go on answering requests;
    a thread that was importing a module at the fork holds that module's import lock in the
    job for ever, and the job waits for ever on its first use of the module (seen: a Compare
    layouts job stopped in Plotly's import of a bar's parts, which a request thread was
    importing). With nothing left to import, no thread holds such a lock."""
    for root in ("dashboard", "sim"):
        package = importlib.import_module(root)
        for module in pkgutil.walk_packages(package.__path__, root + "."):
            importlib.import_module(module.name)
    for kind in PLOTLY_KINDS:
        package = importlib.import_module(f"plotly.graph_objs.{kind}")
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    for lang in LANGUAGES:
        t = Translator(lang)
        t.num(1234.5), t.int(1234), t.separators()
    plotly.io.to_json(go.Figure(go.Bar(x=[1], y=[1])))
