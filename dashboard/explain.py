"""The simulator's reasons in the page's language: the sim.reasons clauses the rows carry (what
bounds a run, why a plan's candidate wins, loses or does not fit, a candidate's variant and a
whole step's split, why the configuration refuses a candidate, what a block map's cells and
chunks are) rendered from the catalogs: a clause's message is `why.<key>`, a word of a field
`why.<field>.<word>`, what joins a list field's clauses `why.join.<field>`; a layout is named as
the page names it, a time as the page writes every time (three significant digits, µs: the table
beside a reason gives the same number), and the other numbers as precise as the simulator writes
them, in the language's format. The English catalog holds sim.reasons' English word for word, so
the English page says what the command line says, its times written as the page's. Nothing here
reads a sentence back: a refusal whose reason sim.reasons does not know is shown as the
simulator wrote it.
"""

from __future__ import annotations

from typing import Any

from dashboard.i18n import Translator, name_of
from sim.reasons import LABEL_SEPARATOR, REASON_SEPARATOR, Clause, Clauses, Language, render
from sim.training.plan import split_clauses


def language(t: Translator) -> Language:
    """sim.reasons' Language of `t`'s catalog."""
    return Language(message=lambda key: t(f"why.{key}"), word=lambda field, value: t(f"why.{field}.{value}"),
                    joiner=lambda field: t(f"why.join.{field}"),
                    name=lambda field, value: name_of(t, field, value),
                    number=lambda text: text.translate(str.maketrans({".": t.separators()[0],
                                                                      ",": t.separators()[1]})),
                    seconds=t.time)


def say(t: Translator, clauses: Clauses, separator: str = REASON_SEPARATOR) -> str:
    """sim.reasons clauses (one, or a list said one after another) in `t`'s language."""
    return render(clauses, language(t), separator)


def row_bound(t: Translator, row: dict[str, Any]) -> str:
    """What bounds a compared run (a sim.trace.metrics.scheme_row's `explanation_clauses`)."""
    return say(t, row["explanation_clauses"])


def refusal(t: Translator, text: str, reason: Clause | None) -> str:
    """Why the configuration refuses a candidate: its clause (a row's `refused_clause` or
    `reason_clause`) in `t`'s language, or the simulator's `text` where it has none."""
    return text if reason is None else say(t, reason)


def variant(t: Translator, clause: Clause | None) -> str:
    """A candidate's variant (a row's `variant_clause`; None: the scheme has one way to run)."""
    return "" if clause is None else say(t, clause)


def plan_why(t: Translator, c: dict[str, Any]) -> str:
    """Why candidate `c` of a plan (sim.planning.plan.Plan.to_dict) wins or loses."""
    return say(t, c["why_clauses"])


def step_why(t: Translator, c: dict[str, Any]) -> str:
    """Why a whole-step candidate (sim.training.plan) wins or loses."""
    return say(t, c["why_clauses"])


def step_split(t: Translator, c: dict[str, Any]) -> str:
    """A whole-step candidate's split (sim.training.plan.split_clauses of its `parallel`)."""
    return say(t, split_clauses(c["parallel"]), LABEL_SEPARATOR)
