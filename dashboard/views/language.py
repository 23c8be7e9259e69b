"""The language switch at the top of the page and the page's texts in the language chosen:
which component property shows which catalog message (`page_texts`: the controls' labels,
help lines, placeholders and options, the tabs', cards' and headings' names, the buttons),
set in English in the page as it is served (`with_texts`, so that no label waits on a
callback) and all rewritten when the language changes, and the document's own `lang` (for
screen readers, hyphenation and the bandwidth control's tooltip). The layouts offered
follow the documents (dashboard.state.shown_layouts).
"""

from __future__ import annotations

from typing import Any

from dash import Input, Output, dcc, html
from dash.development.base_component import Component

from dashboard.contents import HELP, SUMMARY_CARDS, TABS
from dashboard.i18n import DEFAULT_LANG, LANGUAGES, Translator, catalog, layout_label, scheme_label
from dashboard.state import CONTROL_IDS, NO_CLUSTER, SAME_LINK, SCHEMES_MODES, defaults, shown_layouts
from sim.hardware.pcie import P2P_MODES
from sim.hardware.presets import CLUSTER_PRESETS, LINK_PRESETS
from sim.scenario.config import PASSES
from sim.scenario.schema import scenario_option
from sim.schemes import names as scheme_names


def _page_texts() -> list[tuple[str, str, str]]:
    """(component id, property, message key) of every fixed text; the options lists are
    built by _options below."""
    texts = [(f"{cid}-label", "children", f"ctl.{cid}.label") for cid in CONTROL_IDS]
    texts += [(f"{cid}-help", "children", f"ctl.{cid}.help") for cid in HELP]
    texts += [(f"tab-{value}", "label", f"tab.{value}") for value, _ in TABS]
    texts += [(f"{cid}-label", "children", f"card.{cid}") for cid, _ in SUMMARY_CARDS]
    texts += [(f"h-{h}", "children", f"heading.{h}")
              for h in ("scheme", "ring", "workload", "hardware", "counting")]
    texts += [
        ("tagline", "children", "page.tagline"),
        ("lang-label", "children", "page.language"),
        ("profile-label", "children", "ctl.profile.label"),
        ("profile-clear", "children", "ctl.profile.clear"),
        ("dl-trace-btn", "children", "btn.trace"),
        ("dl-chrome-btn", "children", "btn.chrome"),
        ("dl-csv-btn", "children", "btn.csv"),
        ("ranks-label", "children", "ctl.ranks.label"),
        ("merge-row-label", "children", "ctl.merge-row.label"),
        ("schemes-mode-label", "children", "ctl.schemes-mode.label"),
        ("measured-example-label", "children", "measured.example.label"),
        ("measured-example", "placeholder", "measured.example.placeholder"),
        ("docs", "placeholder", "ctl.docs.placeholder"),
        ("window", "placeholder", "ctl.window.placeholder"),
        *((cid, "placeholder", f"ctl.{cid}.placeholder") for cid in PLACEHOLDERS),
        ("timeline-ring-label", "children", "ring.caption"),
        ("quiz-nav-label", "children", "quiz.nav"),
        ("quiz-next", "children", "quiz.next"),
        ("quiz-restart", "children", "quiz.restart"),
        ("quiz-bw-label", "children", "quiz.bandwidth"),
        ("quiz-row-label", "children", "quiz.row"),
    ]
    for prefix in ("timeline", "quiz"):
        texts += [(f"{prefix}-ring-play", "title", "ring.play"),
                  (f"{prefix}-ring-step-label", "children", "ring.slider")]
    return texts


PLACEHOLDERS = ("ulysses-degree", "ring-degree", "tflops", "efficiency", "overhead-us", "link-gbps",
                "link-latency-us", "nics-per-node", "nic-gbps")
"""Number controls whose blank stands for a value the page names in the box (ctl.<id>.placeholder)."""


def _upload_children(t: Translator, key: str) -> list[Any]:
    before, _, after = t(key).partition("{choose}")
    return [html.Div([before, html.A(t("upload.choose")), after])]


def _options(t: Translator, layouts: tuple[str, ...]) -> list[tuple[str, str, Any]]:
    onoff = [{"label": t("opt.on"), "value": True}, {"label": t("opt.off"), "value": False}]
    return [
        ("scheme", "options", [{"label": scheme_label(t, s), "value": s} for s in scheme_names()]),
        ("placement", "options", [{"label": t(f"opt.placement.{p}"), "value": p}
                                  for p in scenario_option("placement").choices]),
        ("impl", "options", [{"label": t(f"opt.impl.{x}"), "value": x} for x in scenario_option("impl").choices]),
        ("schemes-mode", "options", [{"label": t(f"opt.schemes-mode.{x}"), "value": x} for x in SCHEMES_MODES]),
        ("layout", "options", [{"label": layout_label(t, x), "value": x} for x in layouts]),
        ("p2p", "options", [{"label": t(f"opt.p2p.{x}"), "value": x} for x in ("preset", *P2P_MODES)]),
        ("cluster", "options", [{"label": t("opt.cluster.none"), "value": NO_CLUSTER},
                                *[{"label": x, "value": x} for x in CLUSTER_PRESETS]]),
        ("overlap", "options", onoff),
        ("causal", "options", onoff),
        ("sync", "options", [{"label": t("opt.sync.step"), "value": "step"},
                             {"label": t("opt.sync.buffered"), "value": "buffered"}]),
        ("granularity", "options", [{"label": t(f"opt.granularity.{x}"), "value": x}
                                    for x in scenario_option("granularity").choices]),
        ("pass", "options", [{"label": t(f"opt.pass.{p}"), "value": p} for p in PASSES]),
        ("inter-link", "options", [{"label": t("opt.inter-link.same"), "value": SAME_LINK},
                                   *[{"label": x, "value": x} for x in LINK_PRESETS]]),
        ("profile-upload", "children", _upload_children(t, "upload.profile")),
        ("trace-upload", "children", _upload_children(t, "upload.trace")),
    ]


def page_texts(lang: Any, layouts: tuple[str, ...] | None = None) -> list[tuple[str, str, Any]]:
    """Every translated (component id, property, value) of the page in `lang`; the layout
    control offers `layouts` (those of the page's first scenario when None)."""
    t = Translator(lang)
    if layouts is None:
        d = defaults()
        layouts = shown_layouts(d["docs"], d["window"], d["layout"])
    return [(cid, prop, t(key)) for cid, prop, key in _page_texts()] + _options(t, layouts)


def with_texts(root: Any, lang: str = DEFAULT_LANG) -> Any:
    """`root` (the page) with every text of page_texts set in `lang`: the page is whole
    before its first callback, whichever control that comes from."""
    texts = {}
    for cid, prop, value in page_texts(lang):
        texts.setdefault(cid, {})[prop] = value
    for component in _components(root):
        for prop, value in texts.get(getattr(component, "id", None), {}).items():
            setattr(component, prop, value)
    return root


def _components(component: Any):
    """`component` and every component under it (its children, theirs, ...)."""
    yield component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children]:
        if isinstance(child, Component):
            yield from _components(child)


def language_bar() -> html.Div:
    """The language switch (autonyms from each catalog) and a line for unreadable links."""
    return html.Div(className="lang-bar", children=[
        html.Label(Translator(DEFAULT_LANG)("page.language"), id="lang-label", htmlFor="lang"),
        dcc.RadioItems(id="lang", value=DEFAULT_LANG, inline=True, className="radio lang",
                       options=[{"label": catalog(x)["language.name"], "value": x} for x in LANGUAGES]),
        dcc.Store(id="lang-html"),
        html.Span(id="nav-msg", className="nav-msg", role="alert"),
    ])


def register_callbacks(app) -> None:
    outputs = [(cid, prop) for cid, prop, _ in page_texts(DEFAULT_LANG) if (cid, prop) != ("layout", "options")]

    # every text follows the language alone, so that whichever control the page's first
    # call comes from, every label is drawn (the layout holds them in English until then)
    @app.callback([Output(cid, prop) for cid, prop in outputs], Input("lang", "value"))
    def translate_page(lang):
        texts = {(cid, prop): v for cid, prop, v in page_texts(lang)}
        return [texts[out] for out in outputs]

    # the layouts offered follow the documents (dashboard.state.shown_layouts)
    @app.callback(Output("layout", "options"), Input("lang", "value"), Input("docs", "value"),
                  Input("window", "value"), Input("layout", "value"))
    def layout_options(lang, docs, window, layout):
        t = Translator(lang)
        return [{"label": layout_label(t, x), "value": x} for x in shown_layouts(docs, window, layout)]

    # the document's language, for screen readers and hyphenation
    app.clientside_callback(
        "function(lang) { document.documentElement.lang = lang || 'en'; return lang; }",
        Output("lang-html", "data"), Input("lang", "value"))
