"""Where the reader is, in the URL: the open view, the question and the language.

`/?view=questions&q=5&lang=id` opens the Questions view on question 5 in Bahasa
Indonesia; defaults (the timeline, question 1, English) are left out of the URL. These
keys sit beside the scenario's (dashboard/state.py), and each side keeps the other's
keys when it rewrites the query. An unreadable value is ignored and named in a line at
the top of the page.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlencode

from dash import Input, Output, State

from dashboard.contents import TABS
from dashboard.i18n import DEFAULT_LANG, LANGUAGES, Translator
from dashboard.views.common import changed

N_QUESTIONS = 8
DEFAULT_VIEW = "timeline"
NAV_KEYS = ("view", "q", "lang")


def views() -> tuple[str, ...]:
    """The tabs' values (dashboard.contents.TABS)."""
    return tuple(value for value, _ in TABS)


def parse_nav(search: str | None) -> tuple[dict[str, Any], list[str]]:
    """(view, q, lang) from a URL query, defaults for what is missing, and what was unreadable."""
    nav: dict[str, Any] = {"view": DEFAULT_VIEW, "q": 1, "lang": DEFAULT_LANG}
    ignored: list[str] = []
    for key, raw in parse_qsl((search or "").lstrip("?"), keep_blank_values=True):
        if key not in NAV_KEYS:
            continue
        value = raw.strip().lower()
        if key == "view" and value in views():
            nav["view"] = value
        elif key == "lang" and value in LANGUAGES:
            nav["lang"] = value
        elif key == "q" and value.isdigit() and 1 <= int(value) <= N_QUESTIONS:
            nav["q"] = int(value)
        else:
            ignored.append(f"{key}={raw[:40]}")
    return nav, ignored


def with_nav(query: str, search: str | None, **nav: Any) -> str:
    """`query` (the scenario's part) followed by the view/question/language keys: those
    of `nav` where given, else those already in `search`."""
    current, _ = parse_nav(search)
    current.update({k: v for k, v in nav.items() if v is not None})
    items = [(k, v) for k, v in parse_qsl((query or "").lstrip("?"), keep_blank_values=True)
             if k not in NAV_KEYS]
    if current["view"] != DEFAULT_VIEW:
        items.append(("view", current["view"]))
        if current["view"] == "questions":
            items.append(("q", str(current["q"])))
    if current["lang"] != DEFAULT_LANG:
        items.append(("lang", current["lang"]))
    return "?" + urlencode(items) if items else ""


def register_callbacks(app) -> None:
    # The page's place follows the URL: when the page loads, and when the browser's back
    # and forward buttons change the query. The callback below writes the query from the
    # same controls; each side returns no_update where the other already agrees, so a
    # change made on the page does not come back to it.
    @app.callback(Output("tabs", "value"), Output("quiz-q", "value"), Output("lang", "value"),
                  Output("nav-msg", "children"),
                  Input("url", "pathname"), Input("url", "search"),
                  State("tabs", "value"), State("quiz-q", "value"), State("lang", "value"), State("nav-msg", "children"))
    def nav_from_url(_, search, view, q, lang, shown_msg):
        nav, ignored = parse_nav(search)
        msg = (Translator(nav["lang"])("nav.ignored", params=", ".join(ignored))
               if ignored else None)
        return tuple(changed(new, now) for new, now in ((nav["view"], view), (nav["q"], q), (nav["lang"], lang),
                                                         (msg, shown_msg)))

    # in the browser, as the click is handled: an address written a server round trip
    # later may come after the click's user activation has lapsed (about 5 s in Chromium),
    # and back skips the entry before one pushed without it
    app.clientside_callback(TO_URL_JS, Output("url", "search", allow_duplicate=True),
                            Input("tabs", "value"), Input("quiz-q", "value"), Input("lang", "value"),
                            State("url", "search"), prevent_initial_call=True)


TO_URL_JS = """
function(view, q, lang, search) {
    const spec = %s;
    const decode = (s) => {
        try { return decodeURIComponent(s.replace(/\\+/g, " ")); } catch (e) { return s; }
    };
    const now = {view: spec.view, q: 1, lang: spec.lang};
    const kept = [];
    for (const part of (search || "").replace(/^\\?/, "").split("&")) {
        if (!part) { continue; }
        const at = part.indexOf("=");
        const key = decode(at < 0 ? part : part.slice(0, at));
        const value = decode(at < 0 ? "" : part.slice(at + 1)).trim().toLowerCase();
        if (!spec.keys.includes(key)) { kept.push(part); continue; }
        if (key === "view" && spec.views.includes(value)) { now.view = value; }
        else if (key === "lang" && spec.languages.includes(value)) { now.lang = value; }
        else if (key === "q" && /^[0-9]+$/.test(value) && +value >= 1 && +value <= spec.questions) { now.q = +value; }
    }
    if (spec.views.includes(view)) { now.view = view; }
    if (Number.isInteger(q) && q >= 1 && q <= spec.questions) { now.q = q; }
    if (spec.languages.includes(lang)) { now.lang = lang; }
    if (now.view !== spec.view) {
        kept.push("view=" + now.view);
        if (now.view === "questions") { kept.push("q=" + now.q); }
    }
    if (now.lang !== spec.lang) { kept.push("lang=" + now.lang); }
    const out = kept.length ? "?" + kept.join("&") : "";
    return out === (search || "") ? window.dash_clientside.no_update : out;
}
""" % json.dumps({"views": list(views()), "languages": list(LANGUAGES), "questions": N_QUESTIONS,
                  "keys": list(NAV_KEYS), "view": DEFAULT_VIEW, "lang": DEFAULT_LANG})
"""The query with the page's view, question and language: `with_nav(search, search, view=,
q=, lang=)` (an invalid one taken from the query, else the default), the query's other keys
kept as they are written; no update where it is the query already."""
