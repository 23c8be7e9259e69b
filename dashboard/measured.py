"""The Measured vs simulated view's inputs: the measured runs shipped as examples, and
whether a measured trace and the simulation it is set against describe the same machine.

The examples (`dashboard/examples/*.trace.npz`, made by `ringsim hw run` as the README
in that folder records) are read through the checks an upload goes through: a size cap
and the trace's own validation (dashboard.export.parse_trace_bytes). They come with the
calibrated profile of the machine they ran on, `cpu-profile.json`, read by
sim.hardware.profile's own validation.

A measured trace's header names the device and backend it ran on (hw/runner.py); a
calibrated profile names its machine in `measured_on`; a preset names a GPU model. A
run on one machine set against a model of another measures how far the machines
differ, not how good the model is: `mismatch` says when that is the case.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dashboard import export
from dashboard.i18n import Translator, layout_label, scheme_name
from sim.errors import RingsimError
from sim.hardware.profile import Profile, load_profile
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.trace.format import Trace

EXAMPLES_DIR = os.path.join(os.path.dirname(__file__), "examples")
EXAMPLE_PROFILE = "cpu-profile.json"
EXAMPLE_SUFFIXES = (".trace.npz", ".trace.json")
EXAMPLE_TOKEN_PREFIX = "example:"
MAX_EXAMPLE_BYTES = 1 << 20
"""An example is a few KB; anything near this is not one of ours."""


@dataclass(frozen=True)
class Example:
    token: str
    """What the page's `measured` store holds for it: the prefix and the file name."""
    file: str
    trace: Trace


def read_trace_file(path: str, max_bytes: int = MAX_EXAMPLE_BYTES) -> Trace:
    """A trace file read as an upload is: size-capped, then the trace's own validation."""
    name = os.path.basename(path)
    try:
        size = os.path.getsize(path)
        if size > max_bytes:
            raise RingsimError(f"{name}: {size} bytes is over the {max_bytes}-byte limit of an example")
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise RingsimError(f"{name}: cannot read it ({e.strerror or e})") from None
    return export.parse_trace_bytes(raw, name)


@lru_cache(maxsize=4)
def examples(folder: str = EXAMPLES_DIR) -> tuple[Example, ...]:
    """Every example trace in `folder`, in file-name order; RingsimError naming the
    first file that does not pass the checks."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(EXAMPLE_SUFFIXES))
    except OSError:
        return ()
    return tuple(Example(EXAMPLE_TOKEN_PREFIX + n, n, read_trace_file(os.path.join(folder, n)))
                 for n in names)


def example_label(e: Example, t: Translator) -> str:
    """An example run in a few words from its header, in `t`'s language: ranks, scheme and
    layout (named as the page names them), tokens, mask, dtype."""
    cfg = e.trace.config
    w = cfg.get("workload", {})
    seq = w.get("seq")
    scheme = cfg.get("scheme", DEFAULT_SCHEME)
    run = scheme_name(t, scheme)
    if scheme == DEFAULT_SCHEME and cfg.get("layout"):
        run = f"{run}, {layout_label(t, cfg['layout'])}"
    return t("measured.example.option", ranks=t.int(e.trace.n_gpus), run=run,
             tokens=t.int(seq) if isinstance(seq, int) else "?",
             mask=t("measured.mask.causal" if w.get("causal") else "measured.mask.full"),
             dtype=w.get("dtype", "?"))


def example_options(lang: Any) -> list[dict[str, str]]:
    """The Example run dropdown's options in `lang`. The page is built with them, not
    only sent by a callback after: a dropdown that mounts with a value missing from its
    options drops the value (the view opened from `?view=measured` showed no example)."""
    t = Translator(lang)
    try:
        return [{"label": example_label(e, t), "value": e.token} for e in examples()]
    except RingsimError:
        return []


def example(token: Any, folder: str = EXAMPLES_DIR) -> Example | None:
    """The example a store token names, or None when it names none."""
    if not isinstance(token, str) or not token.startswith(EXAMPLE_TOKEN_PREFIX):
        return None
    return next((e for e in examples(folder) if e.token == token), None)


def is_example(token: Any) -> bool:
    return isinstance(token, str) and token.startswith(EXAMPLE_TOKEN_PREFIX)


@lru_cache(maxsize=4)
def example_profile(folder: str = EXAMPLES_DIR) -> Any:
    """The calibrated profile of the machine the examples ran on."""
    return load_profile(os.path.join(folder, EXAMPLE_PROFILE))


# --- the machine a trace ran on, and the one the simulation models -------------------

def measured_machine(trace: Trace) -> str | None:
    """The device (and backend) a measured trace's header names; None for a simulated
    trace or a header that names no device."""
    hw = trace.hardware if isinstance(trace.hardware, dict) else {}
    device = hw.get("device")
    if trace.source != "measured" or not isinstance(device, str) or not device:
        return None
    backend = hw.get("backend")
    return f"{device}, {backend}" if isinstance(backend, str) and backend else device


def simulated_machine(hardware: Any) -> str | None:
    """The machine a calibrated profile was measured on (None where it names none: the page
    says so in its language), or the preset GPU and link."""
    if isinstance(hardware, Profile):
        device = hardware.measured_on.get("device")
        if not device:
            return None
        backend = hardware.measured_on.get("backend")
        return f"{device}, {backend}" if backend else str(device)
    return f"{hardware.gpu.name} / {hardware.link.name}"


def _same(a: Any, b: Any) -> bool:
    return str(a).strip().casefold() == str(b).strip().casefold()


def mismatch(trace: Trace, hardware: Any) -> tuple[str, str | None] | None:
    """(measured machine, simulated machine: None for a profile that names none) when
    `trace` ran elsewhere than `hardware` models, else None.

    A profile matches a trace of the device and backend it was measured on. A preset
    matches a trace whose device names its GPU model (`H100` of `H100-SXM` in
    "NVIDIA H100 80GB HBM3"). Numbers typed in by hand (a custom GPU) are taken at
    their word: nothing to check them against."""
    measured = measured_machine(trace)
    if measured is None:
        return None
    hw = trace.hardware
    if isinstance(hardware, Profile):
        measured_on = hardware.measured_on
        same = _same(hw.get("device"), measured_on.get("device"))
        if hw.get("backend") and measured_on.get("backend"):
            same = same and _same(hw["backend"], measured_on["backend"])
    else:
        name = hardware.gpu.name
        if name == "custom":
            return None
        same = name.split("-")[0].casefold() in str(hw.get("device")).casefold()
    return None if same else (measured, simulated_machine(hardware))
