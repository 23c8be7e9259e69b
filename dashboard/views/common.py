"""What the views share: a graph with its loading indicator, the style of a hidden part,
and the rule that a view computes only while its tab is open (`only_on`)."""

from __future__ import annotations

from dash import dcc
from dash.exceptions import PreventUpdate

HIDDEN = {"display": "none"}


def graph(gid: str, height: int = 400) -> dcc.Loading:
    return dcc.Loading(dcc.Graph(id=gid, config={"displaylogo": False, "scrollZoom": False},
                                 style={"minHeight": f"{height}px"}), type="dot", delay_show=300)


def only_on(tab: str, current: str) -> None:
    if current != tab:
        raise PreventUpdate
