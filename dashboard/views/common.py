"""What the views share: a graph with its loading indicator, the style of a hidden part
(and of one that holds a chart), the rule that a view computes only while its tab is open
(`only_on`, `shown`), a value left alone where the page shows it already (`changed`) and a
table as one component (`table`).

A view's callbacks read the scenario, the profile, the language and the tab as State and
fire on the view's own store, `shown-<view>`, which a callback in the browser
(`register_shown`) writes when one of those changes and the view's tab is open, or as the
tab opens. A change of the scenario thus asks the server for the open view alone, not for
every view (each request the page makes, even one a closed view answers with nothing,
costs the page's renderer about as much as drawing a small figure: it walks every
component on the page for each of its steps).
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from dash import Input, Output, dcc, no_update
from dash.exceptions import PreventUpdate

HIDDEN = {"display": "none"}

FOLDED = {"height": 0, "overflow": "hidden", "visibility": "hidden"}
"""The style of a hidden part that holds a chart: folded to no height, it keeps its width, so a
figure that arrives with the part's showing is drawn at the width it is shown at (Plotly draws
a chart in a part hidden with `display: none` at its default 700 px, and fit.js must ask again)."""


def graph(gid: str, height: int = 400) -> dcc.Loading:
    return dcc.Loading(dcc.Graph(id=gid, config={"displaylogo": False, "scrollZoom": False},
                                 style={"minHeight": f"{height}px"}), type="dot", delay_show=300)


def only_on(tab: str, current: str) -> None:
    if current != tab:
        raise PreventUpdate


def changed(new: Any, shown: Any) -> Any:
    """`new`, or no_update where the page shows it already (an empty line is None or "")."""
    return no_update if (new or None) == (shown or None) else new


SHOWN_VIEWS = ("questions", "timeline", "blocks", "compare", "schemes", "sweep", "memory", "merge", "measured")
"""The views whose callbacks follow the scenario, the profile and the language (`shown`)."""

SHOWN_INPUTS = (("scenario", "data"), ("profile", "data"), ("lang", "value"), ("tabs", "value"))
"""The values whose change makes the open view draw again; the tab last."""

_SHOWN_JS = """
function(...args) {
    const tab = args[args.length - 1];
    const views = %s;
    // a view's callbacks fire on any write to its store: the time makes each one new to a reader
    return views.map(v => v === tab ? Date.now() : window.dash_clientside.no_update);
}
"""


def shown(view: str) -> Input:
    """The input a callback of `view` fires on: its store, written when the scenario, the
    profile, the language or the tab changes and `view` is the tab open."""
    assert view in SHOWN_VIEWS, view
    return Input(f"shown-{view}", "data")


def shown_stores() -> list[dcc.Store]:
    return [dcc.Store(id=f"shown-{view}") for view in SHOWN_VIEWS]


def register_shown(app) -> None:
    """The callback, run in the browser, that writes the open view's store (`shown`); the
    tab is its last input."""
    app.clientside_callback(_SHOWN_JS % json.dumps(list(SHOWN_VIEWS)),
                            [Output(f"shown-{view}", "data") for view in SHOWN_VIEWS],
                            *[Input(i, p) for i, p in SHOWN_INPUTS])


class Cell(str):
    """A table cell's HTML (`cell`)."""


def cell(*parts: str | tuple[str, str], cls: str | None = None, colspan: int | None = None) -> Cell:
    """A cell of `table`: its parts, each a text or (text, class), a span of that class."""
    inner = "".join(_text(p) if isinstance(p, str) else f'<span class="{escape(p[1])}">{_text(p[0])}</span>'
                    for p in parts)
    attrs = (f' class="{escape(cls)}"' if cls else "") + (f' colspan="{int(colspan)}"' if colspan else "")
    return Cell(f"<td{attrs}>{inner}</td>")


def table(head: list[str], rows: list[tuple[list[Any], str | None]]) -> dcc.Markdown:
    """A table of `rows` ((cells, the row's class or None); a cell is a text or a `cell`) as
    one component: its HTML, every text escaped. An html.Table of a comparison's fifteen rows
    is some 150 components, and the page's renderer walks every component on the page at
    each step of every update (a warm Compare schemes at 1,024 GPUs took about 0.3 s longer)."""
    def row(cells: list[Any], cls: str | None) -> str:
        attr = f' class="{escape(cls)}"' if cls else ""
        return f"<tr{attr}>" + "".join(c if isinstance(c, Cell) else cell(str(c)) for c in cells) + "</tr>"

    body = "".join(row(cells, cls) for cells, cls in rows)
    head_row = "".join(f"<th>{_text(h)}</th>" for h in head)
    return dcc.Markdown(f"<table><thead><tr>{head_row}</tr></thead><tbody>{body}</tbody></table>",
                        dangerously_allow_html=True)


def _text(s: str) -> str:
    # one line: a blank line would end the HTML block the Markdown reads as it is
    return escape(str(s).replace("\r", " ").replace("\n", " "))
