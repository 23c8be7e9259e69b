"""The dashboard's languages: message catalogs, number formats, and the names of schemes,
layouts and runs for people.

Texts live in gettext catalogs, one per language (`dashboard/locale/<lang>/LC_MESSAGES/
ringsim.po`), read with Babel at start-up; the code names a message by a key such as
`q5.text` or `ctl.gpus.label`, never by its wording. A placeholder in a message is a
`str.format` field (`{tokens}`) filled with a number already formatted for the language
(Babel's CLDR data: `16,384` in English, `16.384` in Indonesian).

A message missing from a language falls back to English, so that a page never breaks;
the tests fail on it (tests/dashboard/test_i18n.py). Which component of the page shows
which message, and the switch that rewrites them, are the language view's
(dashboard/views/language.py).
"""

from __future__ import annotations

import math
import os
import re
from functools import lru_cache
from typing import Any

from babel.messages.pofile import read_po
from babel.numbers import format_decimal, format_scientific, get_decimal_symbol, get_group_symbol

from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names

LANGUAGES = ("en", "id")
"""English (the default) and Bahasa Indonesia."""
DEFAULT_LANG = "en"
LOCALE_DIR = os.path.join(os.path.dirname(__file__), "locale")
DOMAIN = "ringsim"


def catalog_path(lang: str) -> str:
    return os.path.join(LOCALE_DIR, lang, "LC_MESSAGES", f"{DOMAIN}.po")


@lru_cache(maxsize=None)
def catalog(lang: str) -> dict[str, str]:
    """Key -> translated text of one language (empty and fuzzy entries left out)."""
    with open(catalog_path(lang), "rb") as f:
        po = read_po(f, locale=lang)
    return {m.id: m.string for m in po if m.id and m.string and not m.fuzzy}


_FIELD = re.compile(r"{(\w*)}")
_DECIMAL = re.compile(r"(?<![\w.])(\d+)\.(\d+)(?![\d.])")


def missing_translations(catalogs: dict[str, dict[str, str]] | None = None) -> list[str]:
    """What keeps the catalogs from matching: a key some language lacks (or leaves empty
    or fuzzy), or a translation whose {placeholders} differ from the English ones."""
    cats = catalogs if catalogs is not None else {lang: catalog(lang) for lang in LANGUAGES}
    keys = set().union(*cats.values())
    problems = []
    for lang, cat in cats.items():
        for key in sorted(keys - set(cat)):
            problems.append(f"{lang}: no translation of {key}")
        for key in sorted(set(cat) & set(cats[DEFAULT_LANG])):
            if set(_FIELD.findall(cat[key])) != set(_FIELD.findall(cats[DEFAULT_LANG][key])):
                problems.append(f"{lang}: {key} has other placeholders than {DEFAULT_LANG}")
    return problems


def lang_or_default(lang: Any) -> str:
    return lang if lang in LANGUAGES else DEFAULT_LANG


PCT_NOISE = 1e-12
"""A fraction this close to nought is rounding, not a value (Translator.pct)."""


class Translator:
    """Messages and numbers in one language: `t("q5.text")`, `t.num(0.123)`."""

    def __init__(self, lang: Any):
        self.lang = lang_or_default(lang)
        self._own = catalog(self.lang)
        self._fallback = catalog(DEFAULT_LANG)

    def __call__(self, key: str, **fields: Any) -> str:
        text = self._own.get(key)
        if text is None:
            text = self._fallback[key]         # an unknown key is a programming error
        return text.format(**fields) if fields else text

    def has(self, key: str) -> bool:
        return key in self._own or key in self._fallback

    # --- numbers, in the language's format ---------------------------------------------
    def num(self, x: float, sig: int = 3) -> str:
        """`x` with `sig` significant digits (whole numbers keep all of theirs)."""
        if x is None or not math.isfinite(x):
            return "–"
        if x == int(x) and abs(x) >= 10 ** (sig - 1):
            return format_decimal(int(x), locale=self.lang)
        decimals = max(0, sig - 1 - math.floor(math.log10(abs(x)))) if x else 0
        pattern = "#,##0" + ("." + "0" * decimals if decimals else "")
        return format_decimal(x, format=pattern, locale=self.lang)

    def int(self, x: float) -> str:
        return format_decimal(int(round(x)), locale=self.lang)

    def separators(self) -> str:
        """Plotly's `separators` for the language: its decimal sign, then its grouping sign."""
        return get_decimal_symbol(self.lang) + get_group_symbol(self.lang)

    def pct(self, frac: float, sig: int = 3) -> str:
        """A fraction as a percentage; one within float rounding of nought (a difference of
        equal sums, as 1 - exposed / comm with overlap off) is 0%, not -2.22e-14%."""
        if frac is not None and abs(frac) < PCT_NOISE:
            frac = 0.0
        return self.num(frac * 100, sig) + "%"

    def time(self, seconds: float, sig: int = 3) -> str:
        a = abs(seconds)
        if a >= 1:
            return f"{self.num(seconds, sig)} s"
        if a >= 1e-3:
            return f"{self.num(seconds * 1e3, sig)} ms"
        return f"{self.num(seconds * 1e6, sig)} µs"

    def bytes(self, n: float, sig: int = 3) -> str:
        for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
            if abs(n) >= size:
                return f"{self.num(n / size, sig)} {unit}"
        return f"{self.int(n)} B"

    def sci(self, x: float) -> str:
        """Scientific notation with two significant digits: 1.2E-16."""
        return format_scientific(x, "0.0E0", locale=self.lang)

    def gbps(self, x: float) -> str:
        return f"{self.num(x, 3)} GB/s"

    def digits(self, text: str) -> str:
        """Every number in `text` as Python writes it (`15.631 ms`, `93%`, `1.86`: no
        grouping) in the language's decimal sign, digit for digit: what the simulator's
        own sentences say, in the language's format."""
        point = get_decimal_symbol(self.lang)
        return _DECIMAL.sub(lambda m: m.group(1) + point + m.group(2), text)


def scheme_label(t: Translator, scheme: str) -> str:
    """A scheme's name for people (its module name when the catalogs have none: a scheme
    added since)."""
    key = f"opt.scheme.{scheme}"
    return t(key) if t.has(key) else scheme


def run_words(t: Translator, config: dict[str, Any]) -> str:
    """A run's scheme and what sets it apart, in the page's language, from its trace header:
    the scheme's own terms (sim.schemes.base.Scheme.run_terms) in its catalog entry
    run.<scheme>[.<form>], with the ring's layout and overlap (`ring`: run.ring-part) and an
    option's value in that option's words (opt.<option>.<value>), then a library's
    implementation (run.impl); a scheme the catalogs do not know by its name."""
    name = config.get("scheme", DEFAULT_SCHEME)
    if name not in scheme_names():
        return str(name)
    form, values = get_scheme(name).run_terms(config)
    key = f"run.{name}" + (f".{form}" if form else "")
    if not t.has(key):
        return name
    layout = config.get("layout")
    overlap = t("opt.on" if config.get("overlap") else "opt.off")
    ring = t("run.ring-part", layout=layout_label(t, layout), overlap=overlap) if layout else ""
    words = {k: t(f"opt.{k}.{v}") if t.has(f"opt.{k}.{v}") else v for k, v in values.items()}
    said = t(key, layout=layout_label(t, layout), overlap=overlap, ring=ring, **words)
    # a library's implementation (sim.implementations); the ideal one is left unsaid
    return said + (t("run.impl", impl=config["impl"]) if config.get("impl") else "")


def scheme_name(t: Translator, scheme: Any) -> str:
    """A scheme's short name inside a sentence or a legend, in the page's language: in English
    as the command line spells it (so that the page says what `ringsim compare` prints), in
    another language in its words; its module name where the catalogs have none."""
    key = f"name.scheme.{scheme}"
    return t(key) if t.has(key) else str(scheme)


def name_of(t: Translator, field: str, value: Any) -> str:
    """A name as the command line spells it (sim.reasons.NAMES: a scheme, a layout, a
    placement, an implementation) as the page writes it: a scheme, layout or placement in the
    page's words, a library by its own name."""
    if field == "layout":
        return layout_label(t, value)
    if field == "scheme":
        return scheme_name(t, value)
    key = f"name.{field}.{value}"
    return t(key) if t.has(key) else str(value)


def layout_label(t: Translator, layout: Any) -> str:
    """A layout's name in the page's language (its own name where the catalogs have none)."""
    key = f"opt.layout.{layout}"
    return t(key) if t.has(key) else str(layout)
