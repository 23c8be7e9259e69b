"""Views whose first draw may take seconds (the comparisons of a large ring: a simulation
per run) run as Dash background callbacks where the app has a manager for them
(`manager`: diskcache and Dash's DiskcacheManager), in a process of their own: the page
shows a line saying how many of the runs are done and a button that cancels the rest,
and the other views stay live meanwhile. Without a manager the same callback runs in the
request, silently. What a job computes reaches the other processes through the shared
folder (dashboard/disk_cache.py), so a view revisited does not compute again.

A job is a process started for the request (about a second of a core before it does
anything), so a request callback asks first: a view whose tab is not open starts nothing
(every change of the scenario would otherwise start a job per such view, taking the cores
from the view on screen), and a view whose result is already made draws it in the request;
only the rest becomes a job.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from dash import Input, Output, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard.i18n import Translator
from dashboard.views.common import HIDDEN

POLL_MS = 250
"""How often the page asks for a background job's progress and result: a revisited view
(its runs kept) answers within about this."""


def manager(folder: str) -> Any | None:
    """A DiskcacheManager keeping its jobs' results in `folder`, or None where diskcache
    is not installed (the callbacks then run in the request)."""
    try:
        import diskcache
        import psutil
        from dash import DiskcacheManager
    except ModuleNotFoundError:
        return None

    class Manager(DiskcacheManager):
        """Dash's manager, where a job that ends between Dash's check that its process exists
        and the call on that process is a job done, not a failed request (the page cancels
        its last job each time its inputs change, often just as the job finishes)."""

        def terminate_job(self, job):
            try:
                super().terminate_job(job)
            except psutil.NoSuchProcess:
                pass

        def job_running(self, job):
            try:
                return super().job_running(job)
            except psutil.NoSuchProcess:
                return False

    # results are read once by the page that asked: an hour is plenty
    return Manager(diskcache.Cache(folder), expire=3600)


def busy_line(name: str) -> html.Div:
    """The line shown while view `name` computes: its progress and a cancel button."""
    t = Translator(None)
    return html.Div(id=f"{name}-busy", className="busy", style=HIDDEN, role="status", children=[
        html.Div(t("busy.starting"), id=f"{name}-progress", className="busy-progress"),
        html.Button(t("busy.cancel"), id=f"{name}-cancel", n_clicks=0, className="busy-cancel"),
        dcc.Store(id=f"{name}-asked")])


def progress_words(t: Translator, done: int, total: int) -> str:
    return t("busy.runs", done=t.int(done), total=t.int(total))


class RowsSoFar:
    """A comparison's progress as it runs: how many runs are done and, once one has run, the
    view's table of the rows done so far (`table(rows)`), so that a long comparison shows its
    first answers while the rest compute. `counted` and `rows` are the callbacks the
    comparison's computation calls (dashboard.compute's `progress` and `partial`)."""

    def __init__(self, progress: Callable[[Any], None], t: Translator, table: Callable[[list], Any]):
        self.progress, self.t, self.table = progress, t, table
        self.done, self.total = 0, 0

    def counted(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        self.progress(progress_words(self.t, done, total))

    def rows(self, rows: list[dict[str, Any]]) -> None:
        if any("refused" not in r for r in rows):
            self.progress([html.Div(progress_words(self.t, self.done, self.total)),
                           html.Div(self.table(rows), className="table busy-rows")])


def long_callback(app, background: Any | None, name: str, outputs: list, inputs: list,
                  ready: Callable[..., bool] | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Register `fn(progress, *inputs)` on `outputs` for the view whose tab is `name` (one of
    `inputs` is the tabs' value): as a background callback with the view's busy line when
    `background` is a manager, else in the request with a progress that says nothing.
    `progress(text)` sets the line. With a manager, a request callback asks first (module
    docstring): nothing while the tab is closed, `fn` in the request where `ready(*inputs)`
    says its result is made, else a job."""
    def decorate(fn: Callable[..., Any]) -> Any:
        if background is None:
            return app.callback(*outputs, *inputs)(lambda *args: fn(_quiet, *args))
        tab_at = [i for i, x in enumerate(inputs) if x.component_id == "tabs"]
        lang_at = [i for i, x in enumerate(inputs) if x.component_id == "lang"]
        drawn = [Output(o.component_id, o.component_property, allow_duplicate=True) for o in outputs]

        @app.callback(*drawn, Output(f"{name}-asked", "data"),
                      Output(f"{name}-progress", "children", allow_duplicate=True),
                      Output(f"{name}-busy", "style", allow_duplicate=True), *inputs,
                      prevent_initial_call="initial_duplicate")
        def ask(*args):
            if tab_at and args[tab_at[0]] != name:
                raise PreventUpdate
            if ready is not None and ready(*args):
                out = fn(_quiet, *args)
                return (*(out if len(outputs) > 1 else [out]), no_update, no_update, no_update)
            # a new job's line starts afresh: not the last job's progress and rows, shown
            # again until the new job's first word; it shows now, not once the job's process
            # has started (a second or more on a busy server). The time makes each ask new:
            # asking again for the same inputs starts a job again
            starting = Translator(args[lang_at[0]] if lang_at else None)("busy.starting")
            return (*[no_update] * len(outputs), {"inputs": list(args), "at": time.time()}, starting, {})

        def job(set_progress, asked):
            if not asked:
                raise PreventUpdate
            return fn(lambda text: set_progress([text]), *asked["inputs"])

        return app.callback(
            *outputs, Input(f"{name}-asked", "data"), background=True, manager=background, interval=POLL_MS,
            progress=[Output(f"{name}-progress", "children")],
            running=[(Output(f"{name}-busy", "style"), {}, HIDDEN)],
            cancel=[Input(f"{name}-cancel", "n_clicks")], prevent_initial_call=True)(job)

    return decorate


def register_texts(app, names: tuple[str, ...]) -> None:
    """The busy lines' button in the page's language."""
    @app.callback([Output(f"{n}-cancel", "children") for n in names], Input("lang", "value"))
    def busy_texts(lang):
        return [Translator(lang)("busy.cancel")] * len(names)


def _quiet(_: str) -> None:
    pass
