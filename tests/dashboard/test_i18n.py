"""The message catalogs: every message in every language, the same placeholders, every
key the code names present, and numbers in each language's format."""

from __future__ import annotations

import pathlib
import re

import pytest

from dashboard import i18n
from dashboard.i18n import LANGUAGES, Translator, catalog, missing_translations
from dashboard.state import SCHEMES_MODES
from dashboard.views import language
from dashboard.views.labels import FIGURE_TEXTS
from dashboard.views.language import page_texts
from dashboard.views.questions import ANSWERS, N_CHOICES
from dashboard.views.schemes import SCHEME_TABLE_COLUMNS
from sim.hardware.cluster import Hardware
from sim.hardware.pcie import P2P_MODES
from sim.planning.compare import scheme_variants
from sim.reasons import ENGLISH, JOINERS, WORDS
from sim.scenario.config import LAYOUTS, Scenario, Workload
from sim.scenario.resolve import vary
from sim.scenario.schema import scenario_option
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names

DASHBOARD = pathlib.Path(i18n.__file__).parent
CODE = ("*.py", "views/*.py")
"""The dashboard's modules that name messages (the figures take theirs as labels)."""


def test_every_message_has_every_translation():
    assert missing_translations() == []
    assert set(catalog("en")) == set(catalog("id"))
    assert len(catalog("en")) > 150


def test_a_missing_or_mismatched_translation_is_reported():
    cats = {"en": {"a": "one {n}", "b": "two"}, "id": {"a": "satu {x}"}}
    problems = missing_translations(cats)
    assert "id: no translation of b" in problems
    assert "id: a has other placeholders than en" in problems


def _keys_named_in_code() -> set[str]:
    keys = set()
    for path in (p for pattern in CODE for p in DASHBOARD.glob(pattern)):
        text = path.read_text()
        # t("key"...), Translator(lang)("key"...) and ("component", "prop", "key") entries
        keys |= set(re.findall(r'\bt\(\s*"([a-z0-9_.\-]+)"', text))
        keys |= set(re.findall(r'\)\(\s*"([a-z0-9_.\-]+)"', text))
    return keys


def _run_keys() -> set[str]:
    """The words of a run of each scheme (dashboard.i18n.run_words: run.<scheme>[.<form>]),
    for every variant a comparison runs (sim.schemes.base.Scheme.run_terms)."""
    base = Scenario(workload=Workload(seq=4096, heads=8, kv_heads=4), hardware=Hardware(gpus_per_node=4), n_gpus=8)
    out = set()
    for scheme, variant in scheme_variants(base):
        form, _ = get_scheme(scheme).run_terms(vary(base, scheme, variant.values).describe())
        out.add(f"run.{scheme}" + (f".{form}" if form else ""))
    return out


def _key_families() -> set[str]:
    """Keys the code makes from a name: a scheme's, a placement's, an implementation's and a
    Compare schemes mode's label, the words of a
    run, a column of the schemes' table, a sim.reasons clause, word and joiner
    (dashboard/explain.py), a text of a view's chart (dashboard.views.labels.FIGURE_TEXTS)."""
    return ({f"opt.scheme.{s}" for s in scheme_names()} | _run_keys()
            | {f"name.scheme.{s}" for s in scheme_names()}
            | {f"opt.granularity.{g}" for g in scenario_option("granularity").choices}
            | {f"name.placement.{p}" for p in scenario_option("placement").choices}
            | {f"opt.placement.{p}" for p in scenario_option("placement").choices}
            | {f"opt.impl.{x}" for x in scenario_option("impl").choices}
            | {f"opt.schemes-mode.{x}" for x in SCHEMES_MODES}
            | {f"opt.layout.{x}" for x in LAYOUTS} | {f"opt.p2p.{x}" for x in ("preset", *P2P_MODES)}
            | {f"sch.col.{c}" for c in SCHEME_TABLE_COLUMNS} | set(_reason_messages())
            | {f"line.pcie.p2p.{m}" for m in P2P_MODES}
            | {f"{prefix}.{name}" for prefix, texts in FIGURE_TEXTS.items() for name in texts if name != "separators"})


def _reason_messages() -> dict[str, str]:
    """sim.reasons' English by the catalogs' key: `why.<clause>`, `why.<field>.<word>`,
    `why.join.<field>`."""
    return ({f"why.{key}": text for key, text in ENGLISH.items()}
            | {f"why.{field}.{word}": text for field, words in WORDS.items() for word, text in words.items()}
            | {f"why.join.{field}": text for field, text in JOINERS.items()})


def test_the_reasons_english_is_the_simulators():
    """The English catalog says sim.reasons' clauses, words and joiners word for word (so the
    English page says what the command line says), and has no other `why.` message."""
    en = catalog("en")
    assert {k: v for k, v in en.items() if k.startswith("why.")} == _reason_messages()


def test_the_charts_english_is_their_own():
    """A chart's English messages are the texts its module draws without labels, word for word."""
    en = catalog("en")
    for prefix, texts in FIGURE_TEXTS.items():
        for name, text in texts.items():
            if name != "separators":
                assert en[f"{prefix}.{name}"] == text, f"{prefix}.{name}"


def test_every_key_the_code_names_is_in_the_catalogs():
    keys = _keys_named_in_code()
    assert {"quiz.right", "q5.live", "ring.step", "nav.ignored", "sch.fastest"} <= keys
    keys |= _key_families()
    keys |= {f"q{q}.{part}" for q in ANSWERS for part in ("text", "why")}
    keys |= {f"q{q}.choice.{i}" for q in ANSWERS for i in range(N_CHOICES)}
    for lang in LANGUAGES:
        assert sorted(keys - set(catalog(lang))) == [], lang


def test_every_message_is_used():
    literals = set()
    for path in (p for pattern in CODE for p in DASHBOARD.glob(pattern)):
        literals |= set(re.findall(r'"([a-z0-9_.\-]+)"', path.read_text()))
    used = literals | {key for _, _, key in language._page_texts()}
    used |= {f"q{q}.{part}" for q in ANSWERS for part in ("text", "why")}
    used |= {f"q{q}.choice.{i}" for q in ANSWERS for i in range(N_CHOICES)}
    used |= {f"opt.pass.{p}" for p in ("fwd", "bwd", "fwdbwd")} | _key_families()
    assert sorted(set(catalog("en")) - used) == []


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_page_texts_translate(lang):
    texts = page_texts(lang)
    ids = [(cid, prop) for cid, prop, _ in texts]
    assert len(ids) == len(set(ids))
    assert all(value for _, _, value in texts)
    labels = dict(((cid, prop), v) for cid, prop, v in texts)
    assert labels[("tab-questions", "label")] == {"en": "Questions", "id": "Pertanyaan"}[lang]


def test_numbers_in_each_language():
    en, id_ = Translator("en"), Translator("id")
    assert (en.int(131072), id_.int(131072)) == ("131,072", "131.072")
    assert (en.num(0.14853), id_.num(0.14853)) == ("0.149", "0,149")
    assert (en.num(15.0), id_.num(15.0)) == ("15.0", "15,0")
    assert (en.pct(0.375), id_.pct(0.375)) == ("37.5%", "37,5%")
    assert en.time(8.9e-3) == "8.90 ms" and id_.time(152e-6) == "152 µs"
    assert en.bytes(64 * 2 ** 20) == "64.0 MiB" and id_.bytes(1.5 * 2 ** 30) == "1,50 GiB"
    assert id_.sci(1.1e-15) == "1,1E-15"


def test_an_unknown_language_falls_back_to_english():
    assert Translator("xx").lang == "en"
    assert Translator(None)("quiz.right") == "Right."


SAME_IN_BOTH = {
    "ctl.gpu.label": "a product name", "plan.gpu": "a product name", "fig.gpu": "a product name",
    "ctl.batch.label": "the loanword Indonesian ML writing uses", "plan.batch": "the same loanword",
    "plan.model": "the same word in Indonesian", "plan.col.rank": "a symbol",
    "sch.bounds": "placeholders and punctuation only",
    "opt.scheme.allgather": "a scheme's name and its source", "opt.scheme.ulysses": "a scheme's name and its source",
    "card.m-ideal": "as Indonesian writes it",
    "opt.layout.zigzag": "the layout's name in the literature",
    "why.kind.ag": "a collective's name, as Indonesian writing keeps it",
    "why.kind.rs": "a collective's name", "why.kind.a2a": "a collective's name",
    "why.join.items": "punctuation only",
    "sch.join": "punctuation only",
    "ctl.overhead-us.placeholder": "a number", "tl.h_carries": "placeholders and punctuation only",
    "memory.item.q": "a symbol", "memory.item.dqkv": "symbols",
    "why.split.degrees": "the degrees' abbreviations and placeholders", "why.split.zero": "ZeRO's name",
    "why.split.scheme": "an abbreviation and a placeholder",
    "why.variant.ring": "a placeholder only", "why.variant.hybrid": "placeholders and punctuation only",
    "why.variant.split": "placeholders and a symbol", "why.variant.split-placed": "placeholders and a symbol",
    "why.variant.impl": "a placeholder only", "why.join.layouts": "punctuation only",
    "why.join.libraries": "punctuation only",
    "why.join.worlds": "punctuation only", "why.profiler.world-of": "placeholders and punctuation only",
    "why.profiler.note": "a placeholder only",
    **dict.fromkeys(("opt.impl.te", "opt.impl.rfa", "opt.impl.torch", "opt.impl.usp"),
                    "a library's name for --impl, and its own name"),
}
"""Keys whose Indonesian text is the English one, each for a reason; any other identical
text is an untranslated message."""


def test_no_indonesian_text_is_left_in_english():
    en, id_ = i18n.catalog("en"), i18n.catalog("id")
    same = sorted(k for k in en if k in id_ and en[k] == id_[k] and k not in SAME_IN_BOTH)
    assert same == []
    # and the exceptions are still the English text (a stale exception hides nothing)
    assert all(en[k] == id_[k] for k in SAME_IN_BOTH)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_a_fraction_within_rounding_of_nought_is_nought_percent(lang):
    t = Translator(lang)
    assert t.pct(1.0 - (0.1 + 0.2) / 0.30000000000000004 - 2.220446049250313e-16) == "0%"
    assert t.pct(-2.220446049250313e-16) == "0%"
    assert t.pct(1e-6) != "0%" and t.pct(-0.5).startswith("-50")
