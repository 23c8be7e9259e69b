"""The texts the views' figures and tables take in the page's language: a figure's labels
from the catalogs (a figure module's English LABELS, translated as the messages
`<prefix>.<name>`) and a compared run's name.
"""

from __future__ import annotations

from typing import Any

from dashboard import explain
from dashboard.figures.block_map import LABELS as BLOCK_MAP_TEXTS
from dashboard.figures.comparison import LABELS as COMPARISON_TEXTS
from dashboard.figures.documents import LABELS as DOCUMENT_TEXTS
from dashboard.figures.memory import LABELS as MEMORY_TEXTS
from dashboard.figures.merge import LABELS as MERGE_TEXTS
from dashboard.figures.overlay import LABELS as OVERLAY_TEXTS
from dashboard.figures.schemes import LABELS as SCHEME_TEXTS
from dashboard.figures.sweep import LABELS as SWEEP_TEXTS
from dashboard.figures.timeline import LABELS as TIMELINE_TEXTS
from dashboard.i18n import Translator, scheme_name

FIGURE_TEXTS = {"memory": MEMORY_TEXTS, "sweep": SWEEP_TEXTS, "blocks": BLOCK_MAP_TEXTS, "merge.view": MERGE_TEXTS,
                "overlay": OVERLAY_TEXTS, "schemes": SCHEME_TEXTS, "cmp": COMPARISON_TEXTS, "docs": DOCUMENT_TEXTS,
                "tl": TIMELINE_TEXTS}
"""The figures whose English texts live in their module (LABELS) and whose translations
are the catalogs' messages `<prefix>.<name>`, by prefix."""


def figure_labels(t: Translator, prefix: str) -> dict[str, Any]:
    """The texts of a figure of FIGURE_TEXTS in the page's language, with Plotly's
    `separators` and how its numbers read."""
    return {name: t(f"{prefix}.{name}") for name in FIGURE_TEXTS[prefix] if name != "separators"} | {
        "separators": t.separators(), "digits": t.digits, "int": t.int, "pct": lambda v: t.pct(v, 1)}


def compared_run(t: Translator, scheme: str, variant: dict[str, Any] | None) -> str:
    """A compared run's name (figures.schemes.run_name: the scheme, its variant in brackets), the
    scheme and the variant (its sim.reasons clause) in the page's language."""
    name = scheme_name(t, scheme)
    return f"{name} ({explain.variant(t, variant)})" if variant else name
