"""The page, assembled from its views' components: the stores the callbacks share, the
header with the language switch, the controls on the left, and on the right a line for
what is wrong, the summary and a tab per view (dashboard/contents.TABS, each built by
dashboard/views/<its value>.py).
"""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from dashboard.contents import TABS
from dashboard.views import (
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
from dashboard.views.common import shown_stores


def main(first_example: str | None = None) -> html.Div:
    """The right of the page: a line for what is wrong, the summary and the tabs; the
    Measured view opens on the example run `first_example` (its token)."""
    tab_children = {
        "timeline": timeline.view(),
        "questions": [questions.view()],
        "blocks": blocks.view(),
        "compare": compare.view(),
        "schemes": schemes.view(),
        "sweep": sweep.view(),
        "memory": memory.view(),
        "merge": merge.view(),
        "measured": measured.view(first_example),
        "traces": traces.view(),
        "plan": [plan.view()],
        "inference": inference.view(),
    }
    return html.Div(className="main", children=[
        html.Div(id="banner", className="banner", role="alert"),
        *summary.view(),
        dcc.Tabs(id="tabs", value="timeline", children=[
            dcc.Tab(label=label, value=value, id=f"tab-{value}", children=tab_children[value])
            for value, label in TABS
        ]),
    ])


def page(profile_note: dict[str, Any] | None = None,
         example_note: dict[str, Any] | None = None) -> html.Div:
    """The page; `profile_note` names a profile loaded at start, `example_note` the
    measured run the Measured view opens on (the store's data)."""
    return language.with_texts(html.Div(className="page", children=[
        dcc.Location(id="url", refresh=False),
        dcc.Store(id="scenario"),
        dcc.Store(id="profile", data=profile_note),
        dcc.Store(id="measured", data=example_note),
        *questions.stores(),
        *shown_stores(),
        html.Header(className="header", children=[
            html.H1("ringsim"),
            html.Span("Ring Attention and sequence parallelism, simulated: how K/V blocks travel, "
                      "when transfers hide, which layout wins.", className="tagline", id="tagline"),
            language.language_bar(),
        ]),
        html.Div(className="body", children=[scenario.controls(), main((example_note or {}).get("token"))]),
    ]))
