"""The simulator's refusals of a control's value on the page (dashboard/state.py): each is shown
under the control its clause names, by the control's label, in the page's language; in Indonesian
none of the English sentence's words is left but the names a user types (a distribution's syntax)
and the schemes' and layouts' names."""

from __future__ import annotations

import re

import pytest

from dashboard.i18n import Translator
from dashboard.state import ControlError, defaults, message, scenario_from_values
from sim.schemes import names as scheme_names
from tests.sim.test_reasons import REFUSALS

EN, ID = Translator("en"), Translator("id")
KEPT = {"tflop", "zigzag", "lognormal", "median", "sigma", "sample", "file", "path", *scheme_names()}
"""Words an Indonesian message keeps: a unit, a layout's name, the documents' syntax, the schemes'
names."""


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]{4,}", text)}


@pytest.mark.parametrize("name", REFUSALS)
def test_a_refusal_stands_under_its_control_in_both_languages(name):
    args, change, control, sentence = REFUSALS[name]
    with pytest.raises(ControlError) as e:
        scenario_from_values(defaults() | change)
    err = e.value
    assert err.control == control and err.reason["option"] == control
    assert str(err) == sentence                     # the simulator's own line, for logs
    english, indonesian = message(EN, err), message(ID, err)
    label = EN(f"ctl.{control}.label")
    assert label in english and "--" not in english and "_" not in english
    assert ID(f"ctl.{control}.label") in indonesian
    typed = _words(" ".join(str(v) for v in change.values()))
    english_words = (_words(english) | _words(sentence)) - KEPT - typed
    assert [w for w in english_words if re.search(rf"\b{w}\b", indonesian, re.IGNORECASE)] == [], indonesian
    # the page's numbers: grouped, and with a decimal comma in Indonesian
    for number in re.findall(r"-?\d[\d,]*(?:\.\d+)?", english):
        value = float(number.replace(",", ""))
        assert (ID.int(value) if value.is_integer() else number.replace(".", ",")) in indonesian, number


def test_a_refusal_names_the_other_control_it_is_about():
    """A divisor names the control it must divide, by its label: the GPUs per node, the documents'
    sequence."""
    with pytest.raises(ControlError) as e:
        scenario_from_values(defaults() | {"nics-per-node": 3})
    assert message(ID, e.value) == "NIC per simpul (3) harus membagi habis GPU per simpul (8)"
    with pytest.raises(ControlError) as e:
        scenario_from_values(defaults() | {"docs": "1000"})
    assert message(EN, e.value).endswith("so its sum must divide the " + EN("ctl.seq.label"))
    assert message(ID, e.value).endswith("jumlahnya harus membagi habis " + ID("ctl.seq.label"))


def test_a_refusal_the_page_has_no_message_for_reads_from_its_clause():
    """A refusal whose clause plans and comparisons carry too (Ulysses over more GPUs than heads)
    stands under the control it is about and says its clause in the page's language."""
    with pytest.raises(ControlError) as e:
        scenario_from_values(defaults() | {"scheme": "hybrid", "gpus": 16, "ulysses-degree": 16,
                                                         "heads": 24})
    assert e.value.control == "ulysses-degree" and e.value.key is None
    assert message(ID, e.value).startswith("derajat Ulysses 16 ")
