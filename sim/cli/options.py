"""What the commands share: the workload, hardware and schedule flags of `simulate` as
argparse arguments (declared in sim.scenario.schema; `compare` and `step` take them too), the
model flags of `plan` and `step`, how a command's arguments become option values for the
resolver (sim.scenario.resolve), and plain text tables. The commands' modules
(sim.cli.plan, sim.cli.step, sim.cli.sweep) build on this module and import none of each
other; sim.cli.main registers them.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace
from typing import Any

from sim.errors import RingsimError
from sim.files import write_json
from sim.hardware.cluster import Hardware
from sim.scenario.models import MODEL_PRESETS, PARAMS_AGREE, Model, model_preset
from sim.scenario.option import ScenarioOption
from sim.scenario.resolve import Resolved, hardware_of, resolve
from sim.scenario.schema import SCENARIO_OPTIONS, scenario_option
from sim.trace.format import Trace, to_chrome_trace
from sim.units import tokens


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a value such as -1k or -3.5 is a (bad) value of the option before it, not an
        # option: it then gets its own message ("must be positive"), not "expected one argument"
        self._negative_number_matcher = re.compile(r"^-\d+(\.\d+)?[kKmMgG]?$")

    def error(self, message: str) -> None:  # argparse's usage dump is more than one line
        raise RingsimError(message)


LAYOUT_OPTIONS = ("layout", "overlap")
"""The options `compare` varies itself, and so leaves out of its flags (with_layout=False)."""
_TYPES = {"int": int, "float": float, "tokens": tokens}


def add_option(group: Any, o: ScenarioOption) -> None:
    """`o` as an argument of an argparse parser or group."""
    kwargs: dict[str, Any] = {"dest": o.dest, "default": o.default}
    if o.kind == "bool":
        kwargs["action"] = argparse.BooleanOptionalAction
    elif o.kind in _TYPES:
        kwargs["type"] = _TYPES[o.kind]
    if o.choices is not None:
        kwargs["choices"] = o.choices
    if o.metavar is not None:
        kwargs["metavar"] = o.metavar
    if o.help is not None:
        kwargs["help"] = o.help.replace("%", "%%")    # argparse formats help with %
    group.add_argument(o.flag, **kwargs)


def add_scenario_args(p: argparse.ArgumentParser, *, with_layout: bool = True) -> None:
    """The workload, hardware and schedule flags shared by simulate, compare and others
    (sim.scenario.schema), under one heading per group."""
    groups: dict[str, Any] = {}
    for o in SCENARIO_OPTIONS:
        if with_layout or o.dest not in LAYOUT_OPTIONS:
            if o.group not in groups:
                groups[o.group] = p.add_argument_group(o.group)
            add_option(groups[o.group], o)


def add_hardware_args(p: argparse.ArgumentParser) -> None:
    """The hardware flags (hardware_from_args reads them): the GPU, its kernel model, the
    links, the nodes and a PCIe node's fabric."""
    h = p.add_argument_group("hardware")
    for o in SCENARIO_OPTIONS:
        if o.group == "hardware":
            add_option(h, o)


def simulate_parser() -> argparse.ArgumentParser:
    """simulate's own parser (its scenario flags), without the rest of the command line."""
    p = Parser(prog="ringsim simulate", add_help=False)
    add_scenario_args(p)
    return p


def values_from_args(a: argparse.Namespace) -> dict[str, Any]:
    """The option values (sim.scenario.resolve) of the scenario flags a command took: those
    given, or with a default of their own; a flag left at None is left out (the cluster's
    value, or the preset's)."""
    return {o.name: v for o in SCENARIO_OPTIONS if (v := getattr(a, o.dest, None)) is not None}


def resolve_run(values: dict[str, Any]) -> Resolved:
    """The scenario of the option values and the calibrated profile it is played on
    (sim.scenario.resolve); a CPU profile measured on another kind of host says so on
    stderr."""
    run = resolve(values)
    if run.profile is not None and run.profile.measured_on.get("kind", "cpu") == "cpu":
        # a CPU profile predicts a host like the one it was measured on: most often this one
        # (the host's description loads only when such a profile is given, not on every start)
        from sim.hardware.host import mismatch_line, this_host

        line = mismatch_line(run.profile.measured_on, this_host(), values["profile"])
        if line:
            print(line, file=sys.stderr)
    return run


def hardware_from_args(a: argparse.Namespace) -> Hardware:
    """The hardware the hardware flags describe (sim.scenario.resolve.hardware_of); a
    command's other arguments (`step`'s model and CP scheme) are not read."""
    return hardware_of({k: v for k, v in values_from_args(a).items() if scenario_option(k).group == "hardware"})


def add_model_args(p: argparse.ArgumentParser) -> None:
    """A model preset and the numbers that replace its own (model_from_args)."""
    m = p.add_argument_group("model")
    m.add_argument("--model", default=None, help=f"preset: {', '.join(MODEL_PRESETS)}; or give the numbers below")
    m.add_argument("--layers", type=int, default=None, help="transformer layers (replaces the preset's)")
    m.add_argument("--heads", type=int, default=None, help="query heads")
    m.add_argument("--kv-heads", type=int, default=None, help="key/value heads")
    m.add_argument("--head-dim", type=int, default=None, help="(default 128)")
    m.add_argument("--hidden", type=int, default=None, help="model dimension (default heads x head dim)")
    m.add_argument("--ffn", type=int, default=None, help="feed-forward (SwiGLU) dimension")
    m.add_argument("--vocab", type=int, default=None, help="vocabulary size")
    m.add_argument("--params", type=float, default=None,
                   help="parameters, in billions (default the preset's)")


def model_from_args(a: argparse.Namespace):
    base = model_preset(a.model) if a.model else None
    given = {k: getattr(a, k) for k in ("layers", "heads", "kv_heads", "head_dim", "hidden", "ffn", "vocab")
             if getattr(a, k, None) is not None}
    if base is None:
        missing = [f"--{k.replace('_', '-')}" for k in ("layers", "heads", "kv_heads") if k not in given]
        if missing:
            raise RingsimError(f"give --model or the model's numbers ({', '.join(missing)} missing)")
        given.setdefault("head_dim", 128)
        given.setdefault("hidden", given["heads"] * given["head_dim"])
        fields = dict(name="custom", **given)
    else:
        fields = {**base.describe(), **given}
        if given:
            fields["name"] = base.name + " (changed)"
            fields["source"] = base.source + "; changed on the command line: " + ", ".join(given)
    if a.params is not None:
        if not 0 < a.params < float("inf"):
            raise RingsimError(f"--params must be positive (billions), got {a.params!r}")
        fields["params"] = a.params * 1e9
    model = Model(**fields)
    derived = model.shape_params()
    if derived is None:
        return model
    if a.params is None:
        # a changed or custom model counts its parameters from its shapes: a preset's count
        # describes the preset's shapes only
        return model if base is not None and not given else replace(model, params=derived)
    if abs(model.params - derived) > PARAMS_AGREE * derived:
        raise RingsimError(f"--params {a.params:g}B disagrees with the {derived / 1e9:.4g}B the model's shapes give "
                           f"(layers, hidden, heads, head dim, FFN, vocabulary); leave --params out to use the shapes'")
    return model


def save_traces(a: argparse.Namespace, trace: Trace) -> None:
    """A run's trace where `--trace` and `--chrome-trace` ask (checked before the run:
    sim.files.check_output), replacing a file only with `--force`."""
    if a.trace:
        trace.save(a.trace, overwrite=a.force)
    if a.chrome_trace:
        write_json(a.chrome_trace, to_chrome_trace(trace), overwrite=a.force)
