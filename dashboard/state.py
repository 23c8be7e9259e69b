"""The page's scenario: control values <-> URL query <-> a validated `Scenario`.

Every control that shapes the scenario has one entry in CONTROLS, made from the `ringsim
simulate` option it sets (sim.scenario.schema: its id is the option's name, its key in the
URL, default and choices the option's), so that a link reproduces the scenario. The
values become a `Scenario` through the simulator's resolver (sim.scenario.resolve), as the
command line's flags do: the page checks what its controls hold, leaves out the controls
that do not apply to the chosen scheme and turns its words for "not given" into None; a
mistake becomes a `ControlError` naming the control to show the message under, which
`message` says in the page's language, naming controls as the page labels them (a
simulator's refusal of a control's value carries its reason as a sim.reasons clause: the control
it is about and its numbers, which the page says by a catalog message, _PAGE_MESSAGES).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any, Collection
from urllib.parse import parse_qsl, urlencode

from dashboard import explain
from dashboard.i18n import layout_label
from sim.errors import RingsimError
from sim.hardware.presets import CLUSTER_PRESETS, GPU_PRESETS, LINK_PRESETS, cluster_preset
from sim.layouts import NAMES as ONE_DOCUMENT_LAYOUTS
from sim.layouts.packed import DOC_LAYOUTS
from sim.scenario.config import LAYOUTS, Scenario, Workload
from sim.scenario.option import ScenarioOption
from sim.scenario.resolve import CUSTOM, OptionError, scenario_of, workload_of
from sim.scenario.schema import SCHEME_OPTIONS, scenario_option
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.units import SIZE_SCALE

SAME_LINK = "same"
NO_CLUSTER = "none"
PRESET_P2P = "preset"
"""The p2p control's value that keeps the PCIe cluster's own pairs (sim.hardware.pcie)."""
MAX_GPUS = 1024
"""Largest ring the page simulates: the trace grows as N^2 spans (3.1M at 1024 forward,
9.4M forward+backward) and a first request must stay within seconds; `ringsim simulate`
has no such limit."""


@dataclass(frozen=True)
class Control:
    """A control of the page: the option it sets, and how the page offers it."""

    option: ScenarioOption
    kind: str
    """int, optint (blank: None), float (optional when default is None), bool, choice,
    or text (blank: None)."""
    default: Any
    choices: tuple[Any, ...] = ()
    blank: Any = None
    """The choice that stands for the option's None (not given: the cluster's or the
    preset's value), or None where the control has none."""

    @property
    def id(self) -> str:
        return self.option.name

    @property
    def url_key(self) -> str:
        return self.option.url_key


def _control(cid: str, *, choices: tuple[Any, ...] | None = None, blank: Any = None) -> Control:
    """The control of simulate's option `--cid`: its URL key, default and choices as
    sim.scenario.schema declares them. `blank` is the choice that stands for the option's None (not
    given: the cluster's or the preset's value), first among the choices; `choices` offers
    presets where the flag takes any name."""
    o = scenario_option(cid)
    if o.url_key is None:
        raise ValueError(f"--{cid} has no URL key in sim.scenario.schema")
    default = o.default if o.fallback is None else o.fallback
    if default is None and blank is not None:
        default = blank
    if choices is None and o.choices is not None:
        choices = o.choices if blank is None else (blank, *o.choices)
    if o.kind == "bool":
        kind = "bool"
    elif choices is not None:
        kind = "choice"
    elif o.kind == "float":
        kind = "float"
    elif o.kind == "str":
        kind = "text"
    else:
        kind = "int" if default is not None else "optint"
    return Control(o, kind, default, choices or (), blank)


CONTROLS: tuple[Control, ...] = (
    # workload: Llama-3-8B attention at 128k tokens
    _control("seq"),
    _control("batch"),
    _control("heads"),
    _control("kv-heads"),
    _control("head-dim"),
    _control("dtype"),
    _control("causal"),
    _control("pass"),
    # packed documents (sim.scenario.documents): none, one sequence of one document
    _control("docs"),
    _control("seed"),
    _control("window"),
    # hardware: 8 x H100 over NVLink
    _control("gpu", choices=(*GPU_PRESETS, CUSTOM)),
    _control("tflops"),
    _control("efficiency"),
    _control("overhead-us"),
    _control("link", choices=(*LINK_PRESETS, CUSTOM)),
    _control("link-gbps"),
    _control("link-latency-us"),
    _control("inter-link", blank=SAME_LINK, choices=(SAME_LINK, *LINK_PRESETS)),
    _control("gpus-per-node"),
    _control("nics-per-node"),
    _control("nic-gbps"),
    _control("cluster", blank=NO_CLUSTER, choices=(NO_CLUSTER, *CLUSTER_PRESETS)),
    _control("p2p", blank=PRESET_P2P),
    # the scheme and the ring
    _control("gpus"),
    _control("layout"),
    _control("overlap"),
    _control("sync"),
    _control("scheme"),
    *(_control(o.name) for o in SCHEME_OPTIONS if o.url_key is not None),
    # whose implementation of the scheme runs (sim.implementations)
    _control("impl"),
    _control("granularity"),
    _control("tile"),
)
CONTROL_IDS: tuple[str, ...] = tuple(c.id for c in CONTROLS)
_BY_ID = {c.id: c for c in CONTROLS}
_BY_KEY = {c.url_key: c for c in CONTROLS}

SCHEME_CONTROLS: dict[str, tuple[str, ...]] = {
    name: tuple(o.name for o in get_scheme(name).options if o.url_key is not None) for name in scheme_names()}
"""The controls of each scheme's own settings (sim.schemes.base.Scheme.options)."""
RING_SCHEMES = tuple(name for name in scheme_names() if get_scheme(name).ring_options)
"""Schemes that pass K/V around a ring, and so read the ring's controls."""
RING_CONTROLS = tuple(dict.fromkeys(cid for name in RING_SCHEMES for cid in get_scheme(name).ring_options))
"""The ring's controls (layout, overlap, sync)."""
CLUSTER_CONTROLS = ("gpu", "link", "inter-link", "gpus-per-node", "nics-per-node")
SCHEMES_MODES = ("schemes", "impls")
"""What the Compare schemes view sets side by side: every scheme's variants, or the
implementations of the scheme on screen (sim.implementations)."""
"""What a cluster preset sets (sim.hardware.presets.ClusterPreset), as `ringsim --cluster` does."""
LABELS = {"seq": "sequence length", "kv-heads": "K/V heads", "head-dim": "head dim", "gpus": "number of GPUs",
          "gpus-per-node": "GPUs per node", "nics-per-node": "NICs per node"}
"""How a message names a control that takes a number (else its option's name, in words)."""


def shown_layouts(docs: Any, window: Any, layout: Any) -> tuple[str, ...]:
    """The layouts the layout control offers: for one document the closed-form ones (the
    documents' own are the same there, sim.layouts.packed.DOC_LAYOUTS), every layout with
    documents or a window (as sim.scenario.config.layouts_for), and the chosen one always."""
    if _blank(docs) and _blank(window) and layout not in DOC_LAYOUTS:
        return ONE_DOCUMENT_LAYOUTS
    return LAYOUTS


def applies(cid: str, scheme: Any) -> bool:
    """Whether control `cid` shapes a scenario of `scheme` (a scheme's settings and the
    ring's controls apply to some schemes only; every other control to all)."""
    known = scheme in scheme_names()
    if cid in RING_CONTROLS:
        return known and cid in get_scheme(scheme).ring_options
    if cid in _SCHEME_CONTROL_IDS:
        return known and cid in SCHEME_CONTROLS[scheme]
    return True


_SCHEME_CONTROL_IDS = {cid for cids in SCHEME_CONTROLS.values() for cid in cids}


def cluster_values(name: Any) -> dict[str, Any]:
    """The control values a cluster preset sets (none for NO_CLUSTER)."""
    if name == NO_CLUSTER or name not in CLUSTER_PRESETS:
        return {}
    c = cluster_preset(name)
    return {"gpu": c.gpu, "link": c.link, "inter-link": c.inter_link or SAME_LINK,
            "gpus-per-node": c.gpus_per_node, "nics-per-node": c.nics_per_node}


def _defaults_under(values: dict[str, Any]) -> dict[str, Any]:
    """The defaults a URL is written against: a chosen cluster's values replace the
    plain defaults of the controls it sets."""
    return defaults() | cluster_values(values.get("cluster"))


class ControlError(RingsimError):
    """A user mistake attributed to one control: `message` in English, and for the page's
    language the catalog message `key` with its `fields` (a field named `control` or
    `other` holds a control's id: the page writes that control's label) or the simulator's
    `reason` (a sim.reasons clause)."""

    def __init__(self, control: str, message: str, key: str | None = None,
                 fields: dict[str, Any] | None = None, reason: Any = None):
        super().__init__(message, reason=reason)
        self.control = control
        self.key = key
        self.fields = dict(fields or {})


def defaults() -> dict[str, Any]:
    return {c.id: c.default for c in CONTROLS}


NUMBER_KINDS = ("int", "optint", "float")
"""The kinds of control a person types a number into (a text box: the page reads it)."""

MARKS = {"en": (",", "."), "id": (".", ",")}
"""(thousands separator, decimal mark) of each language the page speaks."""


def _number_pattern(group: str | None, decimal: str) -> re.Pattern:
    """A number whose thousands are separated by `group` (None: not separated) and whose
    decimal mark is `decimal`, with an exponent or not."""
    digits = r"\d+" if group is None else rf"(?:\d{{1,3}}(?:{re.escape(group)}\d{{3}})+|\d+)"
    return re.compile(rf"[+-]?{digits}(?:{re.escape(decimal)}\d+)?(?:[eE][+-]?\d+)?")


_READINGS = {lang: ((_number_pattern(group, decimal), group, decimal), (_number_pattern(None, group), None, group))
             for lang, (group, decimal) in MARKS.items()}
"""How each language's numbers are read, in turn: with its own marks; then with its thousands
separator as a decimal mark, where the number has no thousands to separate (typed_number)."""


def typed_number(raw: Any, lang: str | None, sizes: bool = False) -> Any:
    """What a person typed into a number control, read as the page's language writes
    numbers: its thousands separator between groups of three digits (Indonesian 131.072,
    English 131,072) and its decimal mark (0,6 and 0.6), or the other mark as a decimal one
    where it cannot separate thousands (an Indonesian 0.6, an English 0,6); an exponent as
    in 1e6. An int where there is no decimal part or exponent, else a float; blank as "".
    Anything else is returned as typed, for the control's check to refuse by name (12x,
    1.2.3); a value that is not text (the address's, already read) as it is. With `sizes` (a
    token count), a size as the command line takes it: 128k, 1M, 1,5M (binary,
    sim.units.SIZE_SCALE)."""
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    if not text:
        return ""
    if sizes and text[-1].lower() in SIZE_SCALE:
        n = typed_number(text[:-1], lang)
        if isinstance(n, (int, float)) and not isinstance(n, bool):
            x = n * SIZE_SCALE[text[-1].lower()]
            return int(x) if float(x).is_integer() else x
        return raw
    for pattern, grouped, mark in _READINGS.get(lang or "en", _READINGS["en"]):
        if pattern.fullmatch(text):
            plain = (text.replace(grouped, "") if grouped else text).replace(mark, ".")
            return int(plain) if re.fullmatch(r"[+-]?\d+", plain) else float(plain)
    return raw


def read_typed(values: dict[str, Any], lang: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(values with every number control's text read as a number (typed_number), the
    controls whose text was read, each with its number): the page writes those back, so
    that the box shows the number as it was read."""
    out, read = dict(values), {}
    for c in CONTROLS:
        if c.kind in NUMBER_KINDS and isinstance(values.get(c.id), str):
            v = typed_number(values[c.id], lang, sizes=c.option.kind == "tokens")
            out[c.id] = v
            if not isinstance(v, str):
                read[c.id] = v
    return out, read


def _parse(c: Control, raw: str) -> Any:
    raw = raw.strip()
    if c.kind == "bool":
        if raw.lower() in ("1", "true", "on", "yes"):
            return True
        if raw.lower() in ("0", "false", "off", "no"):
            return False
        raise ValueError(raw)
    if c.kind == "int":
        return int(raw)
    if c.kind == "optint":
        return None if raw == "" or raw.lower() == "auto" else int(raw)
    if c.kind == "text":
        return raw or None
    if c.kind == "float":
        if raw == "":
            return None
        v = float(raw)
        if not math.isfinite(v):
            raise ValueError(raw)
        return v
    match = [x for x in c.choices if str(x).lower() == raw.lower()]
    if not match:
        raise ValueError(raw)
    return match[0]


def values_from_query(search: str | None) -> tuple[dict[str, Any], list[str]]:
    """Control values from a URL query (missing keys keep their defaults, or the
    cluster preset's values when the query names one).

    Returns the values and a list of the parameters that were ignored as unreadable.
    """
    values = defaults()
    given: set[str] = set()
    ignored: list[str] = []
    for key, raw in parse_qsl((search or "").lstrip("?"), keep_blank_values=True):
        c = _BY_KEY.get(key)
        if c is None:
            continue
        try:
            values[c.id] = _parse(c, raw)
            given.add(c.id)
        except ValueError:
            ignored.append(f"{key}={raw[:40]}")
    for cid, v in cluster_values(values["cluster"]).items():
        if cid not in given:
            values[cid] = v
    return values, ignored


def unknown_keys(search: str | None, also: Collection[str] = ()) -> list[str]:
    """The keys of a URL query that neither the scenario nor `also` (the keys other parts of
    the page read: the view, question and language) reads, each with the nearest key the page
    knows where one is near ("link-gbps (link_gbps?)"): a misspelt key would otherwise be
    dropped without a word."""
    known = sorted({*_BY_KEY, *also})
    out: dict[str, str] = {}
    for key, _ in parse_qsl((search or "").lstrip("?"), keep_blank_values=True):
        if key in known or key in out:
            continue
        near = get_close_matches(key, known, n=1, cutoff=0.6)
        out[key] = key[:40] + (f" ({near[0]}?)" if near else "")
    return list(out.values())


def query_from_values(values: dict[str, Any]) -> str:
    """The URL query for `values`: only what differs from the defaults (a chosen
    cluster's values counting as defaults) and applies to the scheme, in a fixed order."""
    items = []
    base = _defaults_under(values)
    scheme = values.get("scheme", DEFAULT_SCHEME)
    for c in CONTROLS:
        v = values.get(c.id)
        if v == base[c.id] or not applies(c.id, scheme):
            continue
        if v is None:
            v = ""                  # blank where the cluster sets a value: "use the default"
        if c.kind == "text" and _blank(v):
            continue
        if c.kind == "bool":
            v = "1" if v else "0"
        elif isinstance(v, float) and v.is_integer():
            v = int(v)
        items.append((c.url_key, str(v)))
    return "?" + urlencode(items) if items else ""


def _label(cid: str) -> str:
    return LABELS.get(cid, cid.replace("-", " "))


def _mistake(cid: str, key: str, english: str, **fields: Any) -> ControlError:
    """A mistake in control `cid`'s value, said by the catalog message `key` (`english`
    with the control's name in the simulator's words, for logs and the command line)."""
    return ControlError(cid, english, key, {"control": cid, **fields})


def _int(values: dict[str, Any], cid: str) -> int:
    v = values.get(cid)
    label = _label(cid)
    if v is None or v == "":
        raise _mistake(cid, "msg.enter-whole", f"{label}: enter a whole number")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
        raise _mistake(cid, "msg.whole", f"{label} must be a whole number, got {v!r}", value=_shown(v))
    if v <= 0:
        raise _mistake(cid, "msg.positive", f"{label} must be positive, got {int(v)}", value=int(v))
    return int(v)


def _shown(v: Any) -> Any:
    """A value as a message quotes it: a number as itself, anything else as typed."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v)


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def _count(values: dict[str, Any], cid: str) -> int:
    """A whole number, 0 or more (a seed)."""
    v = values.get(cid)
    label = _label(cid)
    if v is None or v == "":
        raise _mistake(cid, "msg.enter-whole", f"{label}: enter a whole number")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) or v < 0:
        raise _mistake(cid, "msg.zero-or-more", f"{label} must be a whole number, 0 or more, got {v!r}",
                       value=_shown(v))
    return int(v)


def _text(values: dict[str, Any], cid: str) -> str | None:
    v = values.get(cid)
    if _blank(v):
        return None
    if not isinstance(v, str):
        raise _mistake(cid, "msg.text", f"enter text, got {v!r}", value=_shown(v))
    return v.strip()


def _opt_float(values: dict[str, Any], cid: str) -> float | None:
    v = values.get(cid)
    if v is None or v == "":
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _mistake(cid, "msg.number", f"enter a number, got {v!r}", value=_shown(v))
    return float(v)


def _opt_int(values: dict[str, Any], cid: str) -> int | None:
    v = values.get(cid)
    return None if v is None or v == "" else _int(values, cid)


def _choice(values: dict[str, Any], cid: str) -> Any:
    c = _BY_ID[cid]
    v = values.get(cid)
    if c.kind == "bool":
        if not isinstance(v, bool):
            raise _mistake(cid, "msg.on-off", f"choose on or off, got {v!r}")
        return v
    if v not in c.choices:
        raise _mistake(cid, "msg.choose", f"choose one of {', '.join(map(str, c.choices))}",
                       choices=", ".join(map(str, c.choices)))
    return v


_READ = {"int": _int, "optint": _opt_int, "float": _opt_float, "text": _text, "bool": _choice, "choice": _choice}
"""How the page reads a control of each kind."""
_ZERO_OR_MORE = ("seed",)


# Which control a simulator message without a reason, naming no option, is about: the first key
# found in the message wins.
_MESSAGE_KEYS = (
    ("document", "docs"), ("docs", "docs"), ("lognormal", "docs"), ("window", "window"), ("seed", "seed"),
    ("placement", "placement"), ("fill whole nodes", "gpus"),
    ("heads", "heads"), ("batch", "batch"), ("sequence length", "seq"), ("seq", "seq"), ("dtype", "dtype"),
    ("no rate for", "dtype"), ("has no peak rate", "dtype"),
    ("peak", "tflops"), ("memory_gb", "gpu"), ("tile", "tile"),
    ("layout", "layout"), ("sync", "sync"), ("granularity", "granularity"),
)

_CLAUSE_CONTROLS = {
    **dict.fromkeys(("refused.heads", "refused.kv-heads", "refused.head-count"), "ulysses-degree"),
    **dict.fromkeys(("refused.chunks", "refused.gather-chunks", "refused.shards"), "seq"),
    **dict.fromkeys(("refused.impl-scheme", "refused.impl-layout", "refused.impl-causal", "refused.impl-full"),
                    "impl"),
}
"""The control a refusal is about whose clause names no option (a clause plans and comparisons
carry too): a Ulysses degree the heads refuse, a sequence the layout's chunks or shards do not
divide, an implementation."""

_PAGE_MESSAGES: dict[str, tuple[str, dict[str, str]]] = {
    "refused.must-divide": ("msg.divide", {}),
    "refused.head-groups": ("msg.divide", {}),
    "refused.layout-chunks": ("msg.seq-chunks", {}),
    "refused.seq-gpus": ("msg.seq-gpus", {}),
    "refused.seq-max": ("msg.seq-max", {"seq_tokens": "value", "most_tokens": "most"}),
    "refused.degrees": ("msg.degrees", {}),
    "refused.ulysses-gpus": ("msg.ulysses-gpus", {}),
    "refused.ring-gpus": ("msg.ring-gpus", {}),
    "refused.custom-gpu": ("msg.custom-gpu", {}),
    "refused.custom-link": ("msg.custom-link", {}),
    "refused.fraction": ("msg.fraction", {}),
    "refused.positive": ("msg.positive", {}),
    "refused.not-negative": ("msg.not-negative", {}),
    "refused.docs-exceed": ("msg.docs-exceed", {"total_tokens": "total", "seq_tokens": "seq"}),
    "refused.docs-fill": ("msg.docs-fill", {"total_tokens": "total", "seq_tokens": "seq"}),
    "refused.docs-length": ("msg.docs-length", {"typed": "value"}),
    "refused.docs-zero": ("msg.docs-zero", {}),
    "refused.docs-negative": ("msg.docs-negative", {}),
    "refused.docs-takes": ("msg.docs-takes", {"distribution": "kind", "typed": "value"}),
    "refused.docs-needs": ("msg.docs-needs", {"distribution": "kind", "allowed": "value"}),
    "refused.docs-unknown": ("msg.docs-unknown", {"typed": "value"}),
    "refused.docs-sigma": ("msg.docs-sigma", {}),
    "refused.docs-sigma-range": ("msg.docs-sigma", {}),
}
"""How the page says a refusal of a control's value (sim.reasons clause key -> the catalog
message, and the clause's fields it takes under other names): naming the control, and any other
the clause names, by its label where the simulator's sentence spells a flag or a field."""
_SPELLED = ("clause", "field", "other_field", "option")
"""A refusal's fields the page does not write: the control names itself."""


def _attribute(err: RingsimError, fallback: str) -> ControlError:
    """The control a message is about, and how the page says it: the control a refusal's
    clause names (sim.reasons: its `option`, else the one _CLAUSE_CONTROLS gives its key) and its
    page message (_PAGE_MESSAGES); else the option the message names
    (sim.scenario.resolve.OptionError), else the first of _MESSAGE_KEYS in it, else the part being
    made, else `fallback`."""
    text, reason = str(err), err.reason
    cid = None if reason is None else reason.get("option", _CLAUSE_CONTROLS.get(reason["clause"]))
    if cid in _BY_ID:
        if reason["clause"] not in _PAGE_MESSAGES:
            return ControlError(cid, text, reason=reason)
        key, renamed = _PAGE_MESSAGES[reason["clause"]]
        fields = {renamed.get(name, name): v for name, v in reason.items()
                  if name not in _SPELLED and not isinstance(v, dict) and v is not None}
        if isinstance(reason.get("each"), dict):        # the chunks of a hybrid's rings, each cut more ways
            key, fields["times"] = "msg.seq-chunks-ways", reason["each"]["times"]
        return ControlError(cid, text, key, {"control": cid, **fields}, reason)
    named = err.option if isinstance(err, OptionError) else None
    if named in _BY_ID:
        return ControlError(named, text, reason=reason)
    for key, cid in _MESSAGE_KEYS:
        if key in text:
            return ControlError(cid, text, reason=reason)
    part = err.part if isinstance(err, OptionError) else None
    return ControlError(part if part in _BY_ID else fallback, text, reason=reason)


def control_label(t: Any, cid: str) -> str:
    """A control as the page labels it, in `t`'s language: one of the left column, or one of
    the Plan view's (plan-<x>: plan.<x>)."""
    return t(f"ctl.{cid}.label") if t.has(f"ctl.{cid}.label") else t(f"plan.{cid.removeprefix('plan-')}")


def message(t: Any, err: ControlError) -> str:
    """What is wrong, in the page's language (a dashboard.i18n.Translator `t`), naming
    controls as the page labels them: the error's catalog message, else its sim.reasons
    clause, else the simulator's sentence as it wrote it."""
    if err.key is None:
        return explain.refusal(t, str(err), err.reason)
    fields = {}
    for name, v in err.fields.items():
        if name in ("control", "other"):
            fields[name] = control_label(t, v)
        elif name == "layout":
            fields[name] = layout_label(t, v)
        elif isinstance(v, int) and not isinstance(v, bool):
            fields[name] = t.int(v)
        elif isinstance(v, float):
            # as given, digit for digit, in the language's decimal sign
            fields[name] = t.int(v) if v.is_integer() else t.digits(repr(v))
        else:
            fields[name] = str(v)
    return t(err.key, **fields)



def option_values(values: dict[str, Any]) -> dict[str, Any]:
    """The option values (sim.scenario.resolve) the controls give: each read as the page
    takes it (ControlError naming the control), the page's word for "not given" as None, and
    the controls that do not apply to the chosen scheme left out (so that a hidden control
    never changes a run)."""
    scheme = _choice(values, "scheme")
    out: dict[str, Any] = {}
    for c in CONTROLS:
        if not applies(c.id, scheme) or (c.id == "p2p" and not str(values.get("link")).startswith("pcie")):
            continue        # peer to peer is a PCIe node's: none over NVLink
        v = _count(values, c.id) if c.id in _ZERO_OR_MORE else _READ[c.kind](values, c.id)
        out[c.id] = None if c.blank is not None and v == c.blank else v
    if out["docs"] is not None and out["docs"].startswith("file:"):
        raise _mistake("docs", "msg.docs-file", "the page takes the lengths themselves (sample:300,4096,...), "
                                                "not a file")
    if out["gpus"] > MAX_GPUS:
        raise _mistake("gpus", "msg.max-gpus", f"the dashboard simulates at most {MAX_GPUS} GPUs "
                                               "(use `ringsim simulate` for larger rings)", value=out["gpus"],
                       most=MAX_GPUS)
    return out


def _workload(values: dict[str, Any]) -> Workload:
    try:
        return workload_of(option_values(values))
    except ControlError:
        raise
    except RingsimError as e:
        raise _attribute(e, "seq") from None


def scenario_from_values(values: dict[str, Any]) -> Scenario:
    """A validated scenario, or ControlError naming the control at fault."""
    given = option_values(values)
    try:
        return scenario_of(given)
    except RingsimError as e:
        err = _attribute(e, "gpus")
        if not applies(err.control, given["scheme"]):
            # beside a control that is shown: a degree the scheme sets from the GPUs (Ulysses
            # over every GPU) is the GPUs', any other setting the scheme's
            err.control = "gpus" if err.control in ("ulysses-degree", "ring-degree") else "scheme"
        raise err from None


def ring_values(values: dict[str, Any]) -> dict[str, Any]:
    """The same controls with the default scheme, the ring (the questions are about the ring)."""
    return dict(values) | {"scheme": DEFAULT_SCHEME}


def scenario_key(scenario: Scenario, hardware_desc: Any | None = None) -> str:
    """A stable string key for caching (a Scenario is not hashable: it holds dicts)."""
    hw = hardware_desc if hardware_desc is not None else scenario.hardware.describe()
    return json.dumps([scenario.describe(), hw], sort_keys=True, default=str)


# --- a calibrated profile in place of the presets ---------------------------------------

DTYPE_PREFERENCE = ("bf16", "fp16", "fp32")
"""The dtype a profile's scenario takes when the chosen one was not measured: the first
of these it measured."""


def profile_dtypes(profile: Any) -> tuple[str, ...]:
    """The dtypes a calibrated profile has compute measurements for (sim.hardware.profile)."""
    have = {key[0] for key in getattr(profile, "groups", {})}
    return tuple(d for d in DTYPE_PREFERENCE if d in have)


def _largest_block_flops(profile: Any, dtype: str) -> float | None:
    points = [p[0] for key, g in getattr(profile, "groups", {}).items()
              if key[0] == dtype and key[2] == "fwd" for p in g.points]
    return max(points) if points else None


def _profile_ranks(profile: Any) -> int | None:
    """How many ranks a profile of processes sharing one machine (a CPU profile)
    measured at once: the largest count of its concurrency table, else its cores."""
    measured_on = getattr(profile, "measured_on", {}) or {}
    if measured_on.get("kind") != "cpu":
        return None
    contention = getattr(profile, "contention", None)
    table = getattr(contention, "concurrency", None)
    if table:
        return int(max(p[0] for p in table))
    cores = measured_on.get("cpu_count")
    return cores if isinstance(cores, int) and cores > 0 else None


def profile_changes(values: dict[str, Any], profile: Any) -> dict[str, Any]:
    """The control values that turn `values` into a scenario within what `profile`
    measured.

    The dtype: the chosen one if it was measured, else the first measured of
    DTYPE_PREFERENCE (a profile cannot time a dtype it has no measurements for). The
    GPUs and the sequence length, only while they are the page's defaults (a choice the
    reader made stays): a CPU profile's ranks as many as it measured computing at once,
    and the tokens per rank the largest power of two whose full forward block is no
    larger than the largest block it measured (sim.hardware.profile interpolates inside its
    table and extrapolates outside it)."""
    changes: dict[str, Any] = {}
    have = profile_dtypes(profile)
    if not have:
        return changes
    dtype = values.get("dtype") if values.get("dtype") in have else have[0]
    if dtype != values.get("dtype"):
        changes["dtype"] = dtype
    base = defaults()
    n = values.get("gpus")
    ranks = _profile_ranks(profile)
    if n == base["gpus"] and ranks is not None and ranks < n:
        n = changes["gpus"] = ranks
    largest = _largest_block_flops(profile, dtype)
    if values.get("seq") == base["seq"] and largest and isinstance(n, int) and n > 0:
        try:
            per_pair = _workload(values | changes).fwd_flops(1)
        except ControlError:
            return changes
        fits = math.sqrt(largest / per_pair)
        if fits >= 2:
            per_rank = 1 << int(math.log2(fits))
            seq = n * per_rank
            if seq < values["seq"]:
                changes["seq"] = seq
    return changes


def check_profile_dtype(values: dict[str, Any], profile: Any) -> None:
    """ControlError beside the dtype when `profile` has no measurements for it."""
    have = profile_dtypes(profile)
    if values.get("dtype") not in have:
        device = (getattr(profile, "measured_on", {}) or {}).get("device", "the calibrated profile")
        raise _mistake("dtype", "msg.dtype-profile", f"the profile of {device} has no compute measurements for "
                                                     f"{values.get('dtype')} (it has {', '.join(have) or 'none'})",
                       device=device, value=values.get("dtype"), have=", ".join(have) or "–")
