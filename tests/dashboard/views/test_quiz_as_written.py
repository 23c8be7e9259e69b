"""The Questions view's questions and choices are the quiz's as its author wrote them
(tests/data/quiz.txt, copied from the quiz ringsim grew out of): the same eight questions,
the same four choices in the author's order, each in the page's language the author's own
words where the author wrote it in that language; the right answer the one the quiz means."""

from __future__ import annotations

import os
import re

import pytest

from dashboard.i18n import LANGUAGES, Translator
from dashboard.views.questions import ANSWERS, N_CHOICES, choice_text

QUIZ = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "data", "quiz.txt")

AUTHOR_LANGUAGE = {1: "id", 2: "id", 3: "en", 4: "id", 5: "en", 6: "id", 7: "en", 8: "en"}
"""The language the author wrote each question in (read off the file)."""
OTHER_LANGUAGE = {(7, 3): "id"}
"""Choices the author wrote in the other language than their question."""
MEANT = {1: "token", 2: "kunci/nilai", 3: "Online softmax", 4: "dialirkan dalam blok", 5: "overlaps",
         6: "lebih banyak kunci", 7: "running maximum", 8: "Later tokens"}
"""What the right answer of each question says, in the author's words: the token dimension,
key/value blocks, online softmax, K/V streamed in blocks, overlap, later tokens handle more
keys, keeping the sums consistent with the running maximum, later tokens."""


def written() -> dict[int, tuple[str, list[str]]]:
    """Question number -> (its text, its choices), as the file has them."""
    quiz: dict[int, tuple[str, list[str]]] = {}
    current = None
    with open(QUIZ, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^(\d+)\. (.+)$", line.rstrip("\n"))
            if m:
                current = int(m.group(1))
                quiz[current] = (m.group(2), [])
            elif line.strip().startswith("•") and current is not None:
                quiz[current][1].append(line.strip()[1:].strip())
    return quiz


def test_the_file_is_the_quiz_of_eight_questions_of_four_choices():
    quiz = written()
    assert sorted(quiz) == list(range(1, 9)) == sorted(ANSWERS)
    assert all(len(choices) == N_CHOICES for _, choices in quiz.values())


@pytest.mark.parametrize("q", range(1, 9))
def test_each_question_and_choice_is_the_author_s_in_the_author_s_language(q):
    text, choices = written()[q]
    t = Translator(AUTHOR_LANGUAGE[q])
    assert t(f"q{q}.text") == text
    for i, choice in enumerate(choices):
        lang = OTHER_LANGUAGE.get((q, i), AUTHOR_LANGUAGE[q])
        assert Translator(lang)(f"q{q}.choice.{i}") == choice
        # and a translation in the other language, not the author's words again
        other = next(x for x in LANGUAGES if x != lang)
        assert Translator(other)(f"q{q}.choice.{i}") != choice
    other = next(x for x in LANGUAGES if x != AUTHOR_LANGUAGE[q])
    assert Translator(other)(f"q{q}.text") != text


@pytest.mark.parametrize("q", range(1, 9))
def test_the_right_answer_is_the_one_the_quiz_means(q):
    _, choices = written()[q]
    assert MEANT[q] in choices[ANSWERS[q]]
    assert sum(MEANT[q] in c for c in choices) == 1
    assert choice_text(Translator("en"), q, ANSWERS[q]).startswith("ABCD"[ANSWERS[q]] + ". ")
