"""Sweep specifications: a file of `ringsim simulate` options, each a value, a list or a
range, expanded into one configuration per combination.

A spec is a YAML or TOML mapping whose keys are `simulate`'s option names without the
dashes (`gpus`, `seq`, `kv-heads` or `kv_heads`, `pass`, `inter-link`, ...), and whose
values are one of:

- a value: `seq = 131072`; integer options also take sizes, `"128k"` or `"1M"`
  (`parse_count`: k = 2^10, M = 2^20, G = 2^30);
- a list: `gpus = [8, 16]`;
- a range, inclusive of both ends when the steps land on `to`: `{from = 8, to = 64, step = 8}`
  (8, 16, ..., 64) or geometric `{from = 8, to = 64, times = 2}` (8, 16, 32, 64).

On/off options (`causal`, `overlap`) take true and false. Output options (`json`,
`trace`, `chrome-trace`, `force`) are refused. The expansion is the Cartesian product of
the values in the spec's key order, the last key varying fastest; its length is the
product of the lengths. Each configuration is what those options would give
`ringsim simulate` (`Config.command`), and its key (`Config.key`) a hash of every
resolved option, defaults included: two spellings of one configuration share a key.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import shlex
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Iterator

from sim import implementations
from sim.errors import RingsimError
from sim.files import read_bytes
from sim.inputs import MAX_SPEC_BYTES, parse_spec_text
from sim.scenario.option import ScenarioOption
from sim.scenario.schema import SCENARIO_OPTIONS
from sim.units import parse_count

OUTPUT_OPTIONS = ("json", "trace", "chrome_trace", "force")
"""simulate's options that write output: not part of a configuration."""
COLUMN_NAMES = {"pass_": "pass", "efficiency": "gpu_efficiency"}
"""Option destinations whose table column is named otherwise (`efficiency` is a metric)."""
MAX_CONFIGS = 10_000_000
"""A spec that expands past this is refused before anything runs."""

# --- simulate's options (sim.scenario.schema) ---------------------------------------------

def column(o: ScenarioOption) -> str:
    """The results table's column of an option."""
    return COLUMN_NAMES.get(o.dest, o.dest)


def value_kind(o: ScenarioOption) -> str:
    """int, float, str or bool: a size (tokens) is an int in a spec and a table."""
    return "int" if o.kind == "tokens" else o.kind


@lru_cache(maxsize=None)
def _by_name() -> dict[str, ScenarioOption]:
    found: dict[str, ScenarioOption] = {}
    for o in SCENARIO_OPTIONS:
        for name in (o.name, o.name.replace("-", "_"), o.dest, column(o)):
            found[name] = o
    return found


_BY_DEST = {o.dest: o for o in SCENARIO_OPTIONS}


def option(name: str) -> ScenarioOption:
    """The option a spec key names; RingsimError listing them otherwise."""
    o = _by_name().get(name)
    if o is None:
        if name.replace("-", "_") in OUTPUT_OPTIONS:
            raise RingsimError(f"{name!r} writes output; a sweep spec holds only configuration options")
        raise RingsimError(f"unknown option {name!r} in the sweep spec; simulate's options are "
                           + ", ".join(o.name for o in SCENARIO_OPTIONS))
    return o


def convert(o: ScenarioOption, value: Any) -> Any:
    """A spec value as the option's type, checked as simulate would check it."""
    what = f"{o.name} value"
    kind = value_kind(o)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "on", "off", "yes", "no"):
            return value.strip().lower() in ("true", "on", "yes")
        raise RingsimError(f"{what} must be true or false, got {value!r}")
    if value is None:
        if o.default is None:
            return None
        raise RingsimError(f"{what} must not be empty")
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            v: Any = value          # simulate itself refuses one that is not positive
        else:
            v = parse_count(value, what)
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise RingsimError(f"{what} must be a number, got {value!r}")
        try:
            v = float(value)
        except ValueError:
            raise RingsimError(f"{what} must be a number, got {value!r}") from None
        if not math.isfinite(v):
            raise RingsimError(f"{what} must be finite, got {value!r}")
    else:
        if isinstance(value, (dict, list, bool)):
            raise RingsimError(f"{what} must be a word, got {value!r}")
        v = str(value)
    if o.choices is not None and v not in o.choices:
        raise RingsimError(f"{what} must be one of {', '.join(map(str, o.choices))}, got {value!r}")
    return v


def expand_range(name: str, spec: dict[str, Any]) -> list[Any]:
    """{from, to, step} or {from, to, times}: every value from `from` up to `to`
    inclusive (down, with a negative step or times below 1)."""
    keys = set(spec)
    if not ({"from", "to"} <= keys and len(keys & {"step", "times"}) == 1 and keys <= {"from", "to", "step", "times"}):
        raise RingsimError(f"range of {name} must be {{from, to, step}} or {{from, to, times}}, got {spec!r}")
    lo, hi = spec["from"], spec["to"]
    for k in ("from", "to", "step", "times"):
        v = spec.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise RingsimError(f"{k} of the range of {name} must be a number, got {v!r}")
    ints = all(isinstance(spec[k], int) for k in spec)
    out: list[Any] = []
    count = range_length(name, spec)
    if "step" in spec:
        step = spec["step"]
        for i in range(count):
            x = lo + i * step
            out.append(x if ints else round(x, 12))
    else:
        times = spec["times"]
        x = lo
        while (x <= hi * (1 + 1e-12)) if times > 1 else (x >= hi * (1 - 1e-12)):
            out.append(x if ints else round(x, 12))
            x = x * times
            if ints and isinstance(times, int):
                x = int(x)
    return out


def range_length(name: str, spec: dict[str, Any]) -> int:
    """How many values a checked range holds, counted arithmetically (nothing is built);
    RingsimError where the range never reaches its end or holds more than MAX_CONFIGS."""
    lo, hi = spec["from"], spec["to"]
    if "step" in spec:
        step = spec["step"]
        if step == 0 or (hi - lo) * step < 0:
            raise RingsimError(f"the range of {name} never reaches {hi} from {lo} by steps of {step}")
        count = math.floor((hi - lo) / step + 1e-9) + 1
    else:
        times = spec["times"]
        if times <= 0 or times == 1 or lo == 0 or (hi / lo < 1) != (times < 1) or hi / lo <= 0:
            raise RingsimError(f"the range of {name} never reaches {hi} from {lo} by times {times}")
        count = math.floor(math.log(hi / lo) / math.log(times) + 1e-9) + 1
    if count > MAX_CONFIGS:
        raise RingsimError(f"the range of {name} has {count:,} values, more than the {MAX_CONFIGS:,} a sweep runs")
    return count


def count_values(name: str, raw: Any) -> int:
    """How many values one spec key takes, before any is built (a range counted
    arithmetically)."""
    if isinstance(raw, dict):
        keys = set(raw)
        if not ({"from", "to"} <= keys and len(keys & {"step", "times"}) == 1
                and keys <= {"from", "to", "step", "times"}):
            raise RingsimError(f"range of {name} must be {{from, to, step}} or {{from, to, times}}, got {raw!r}")
        for k in raw:
            v = raw[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise RingsimError(f"{k} of the range of {name} must be a number, got {v!r}")
        return range_length(name, raw)
    return len(raw) if isinstance(raw, list) else 1


def values_of(name: str, raw: Any) -> list[Any]:
    """The values one spec key takes, converted and checked."""
    o = option(name)
    if isinstance(raw, dict):
        raw = expand_range(name, raw)
    elif not isinstance(raw, list):
        raw = [raw]
    if not raw:
        raise RingsimError(f"{name} has an empty list of values")
    return [convert(o, v) for v in raw]


# --- specs and configurations ---------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    """One configuration of a sweep: the options as given, and what they resolve to."""

    index: int
    """Its place in the expansion."""
    given: tuple[tuple[str, Any], ...]
    """(dest, value) of the options the spec sets, in the spec's order."""

    @property
    def resolved(self) -> dict[str, Any]:
        """Every option (dest -> value), defaults filled in."""
        out = {o.dest: o.default for o in SCENARIO_OPTIONS}
        out.update(self.given)
        return out

    @property
    def values(self) -> dict[str, Any]:
        """The options given, by option name (sim.scenario.resolve's values): the rest are
        their defaults."""
        return {_BY_DEST[dest].name: value for dest, value in self.given}

    @property
    def key(self) -> str:
        """A hash of every resolved option: the row's identity when a sweep resumes."""
        return config_key(self.resolved)

    @property
    def argv(self) -> list[str]:
        """simulate's arguments for the options given."""
        return argv_of(dict(self.given))

    @property
    def command(self) -> str:
        """The `ringsim simulate` command line that runs this configuration alone."""
        return shlex.join(["ringsim", "simulate", *self.argv])

    def columns(self) -> dict[str, Any]:
        """Its row's option columns: every option, resolved."""
        return {column(_BY_DEST[d]): v for d, v in self.resolved.items()}


def config_key(resolved: dict[str, Any]) -> str:
    # the ideal implementation (sim.implementations) keys a row as it did before `impl`
    # was an option: a sweep's earlier results stay its own
    if resolved.get("impl") == implementations.DEFAULT:
        resolved = {k: v for k, v in resolved.items() if k != "impl"}
    text = json.dumps(resolved, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def argv_of(given: dict[str, Any]) -> list[str]:
    """simulate's arguments for {dest: value}; None leaves an option at its default."""
    argv: list[str] = []
    for dest, value in given.items():
        o = _BY_DEST[dest]
        if o.kind == "bool":
            argv.append(o.flag if value else "--no-" + o.flag[2:])
        elif value is not None:
            argv += [o.flag, _fmt(value)]
    return argv


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return repr(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    return str(value)


@dataclass(frozen=True)
class Spec:
    """A parsed sweep spec: for each option it sets, its values in order."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    """(dest, values) in the spec's key order."""

    @classmethod
    def from_dict(cls, raw: Any) -> "Spec":
        if not isinstance(raw, dict) or not raw:
            raise RingsimError("a sweep spec is a mapping of simulate's options to values, lists or ranges")
        axes: list[tuple[str, tuple[Any, ...]]] = []
        seen: dict[str, str] = {}
        # the expansion's size, counted before any list of values exists
        size = 1
        for name, value in raw.items():
            size *= count_values(str(name), value)
            if size > MAX_CONFIGS:
                raise RingsimError(f"the sweep spec expands to more than {MAX_CONFIGS:,} configurations")
        for name, value in raw.items():
            if not isinstance(name, str):
                raise RingsimError(f"sweep spec keys are option names, got {name!r}")
            o = option(name)
            if o.dest in seen:
                raise RingsimError(f"the sweep spec sets {o.name} twice ({seen[o.dest]!r} and {name!r})")
            seen[o.dest] = name
            axes.append((o.dest, tuple(values_of(name, value))))
        spec = cls(tuple(axes))
        if spec.size > MAX_CONFIGS:
            raise RingsimError(f"the sweep spec expands to {spec.size:,} configurations, more than {MAX_CONFIGS:,}")
        return spec

    @property
    def size(self) -> int:
        """How many configurations: the product of the lengths."""
        return math.prod(len(v) for _, v in self.axes)

    def configs(self) -> Iterator[Config]:
        """Every combination, the last key varying fastest."""
        dests = [d for d, _ in self.axes]
        for i, combo in enumerate(itertools.product(*(v for _, v in self.axes))):
            yield Config(i, tuple(zip(dests, combo)))


def configs_from(given: Iterable[dict[str, Any]]) -> list[Config]:
    """Configurations from dicts of {option name or dest: value} (for callers that
    build their own list, such as `ringsim plan`)."""
    out = []
    for i, g in enumerate(given):
        items = []
        for name, value in g.items():
            o = option(name)
            items.append((o.dest, convert(o, value)))
        out.append(Config(i, tuple(items)))
    return out


def load_spec(path: str) -> Spec:
    """A spec from a .toml, .yaml or .yml file, its size and nesting checked before it is
    parsed (sim.inputs.parse_spec_text)."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".toml", ".yaml", ".yml"):
        raise RingsimError(f"sweep spec {path}: name it .toml, .yaml or .yml")
    data = read_bytes(path, what="sweep spec", max_bytes=MAX_SPEC_BYTES)
    return Spec.from_dict(parse_spec_text(data, ext, path))
