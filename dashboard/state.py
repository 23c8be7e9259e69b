"""The page's scenario: control values <-> URL query <-> a validated `Scenario`.

Every control that shapes the scenario has one entry in CONTROLS: its component id, its
key in the URL (so that a link reproduces the scenario) and its default. Turning the
values into a `Scenario` goes through the simulator's own validated constructors; a
mistake becomes a `ControlError` naming the control to show the message beside.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from sim.config import LAYOUTS, PASSES, Gpu, Hardware, Link, Scenario, Workload
from sim.errors import RingsimError
from sim.presets import GPU_PRESETS, LINK_PRESETS

CUSTOM = "custom"
SAME_LINK = "same"
MAX_GPUS = 1024
"""Largest ring the page simulates: the trace grows as N^2 spans (3.1M at 1024 forward,
9.4M forward+backward) and a first request must stay within seconds; `ringsim simulate`
has no such limit."""


@dataclass(frozen=True)
class Control:
    id: str
    url_key: str
    kind: str
    """int, float (optional when default is None), bool, or choice."""
    default: Any
    choices: tuple[Any, ...] = ()


CONTROLS: tuple[Control, ...] = (
    # workload: Llama-3-8B attention at 128k tokens
    Control("seq", "seq", "int", 131072),
    Control("batch", "batch", "int", 1),
    Control("heads", "heads", "int", 32),
    Control("kv-heads", "kv_heads", "int", 8),
    Control("head-dim", "head_dim", "int", 128),
    Control("dtype", "dtype", "choice", "bf16", ("bf16", "fp16", "fp32")),
    Control("causal", "causal", "bool", True),
    Control("pass", "pass", "choice", "fwd", PASSES),
    # hardware: 8 x H100 over NVLink
    Control("gpu", "gpu", "choice", "H100-SXM", (*GPU_PRESETS, CUSTOM)),
    Control("tflops", "tflops", "float", None),
    Control("efficiency", "eff", "float", None),
    Control("overhead-us", "overhead_us", "float", None),
    Control("link", "link", "choice", "nvlink4", (*LINK_PRESETS, CUSTOM)),
    Control("link-gbps", "link_gbps", "float", None),
    Control("link-latency-us", "latency_us", "float", None),
    Control("inter-link", "inter_link", "choice", SAME_LINK, (SAME_LINK, *LINK_PRESETS)),
    Control("gpus-per-node", "gpus_per_node", "int", 8),
    # the ring
    Control("gpus", "gpus", "int", 8),
    Control("layout", "layout", "choice", "zigzag", LAYOUTS),
    Control("overlap", "overlap", "bool", True),
    Control("sync", "sync", "choice", "step", ("step", "buffered")),
    Control("granularity", "granularity", "choice", "exact", ("exact", "tile")),
    Control("tile", "tile", "int", 128),
)
CONTROL_IDS: tuple[str, ...] = tuple(c.id for c in CONTROLS)
_BY_ID = {c.id: c for c in CONTROLS}
_BY_KEY = {c.url_key: c for c in CONTROLS}


class ControlError(RingsimError):
    """A user mistake attributed to one control."""

    def __init__(self, control: str, message: str):
        super().__init__(message)
        self.control = control


def defaults() -> dict[str, Any]:
    return {c.id: c.default for c in CONTROLS}


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
    """Control values from a URL query (missing keys keep their defaults).

    Returns the values and a list of the parameters that were ignored as unreadable.
    """
    values = defaults()
    ignored: list[str] = []
    for key, raw in parse_qsl((search or "").lstrip("?"), keep_blank_values=True):
        c = _BY_KEY.get(key)
        if c is None:
            continue
        try:
            values[c.id] = _parse(c, raw)
        except ValueError:
            ignored.append(f"{key}={raw[:40]}")
    return values, ignored


def query_from_values(values: dict[str, Any]) -> str:
    """The URL query for `values`: only what differs from the defaults, in a fixed order."""
    items = []
    for c in CONTROLS:
        v = values.get(c.id)
        if v is None or v == c.default:
            continue
        if c.kind == "bool":
            v = "1" if v else "0"
        elif isinstance(v, float) and v.is_integer():
            v = int(v)
        items.append((c.url_key, str(v)))
    return "?" + urlencode(items) if items else ""


def _int(values: dict[str, Any], cid: str, label: str) -> int:
    v = values.get(cid)
    if v is None or v == "":
        raise ControlError(cid, f"{label}: enter a whole number")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
        raise ControlError(cid, f"{label} must be a whole number, got {v!r}")
    if v <= 0:
        raise ControlError(cid, f"{label} must be positive, got {int(v)}")
    return int(v)


def _opt_float(values: dict[str, Any], cid: str) -> float | None:
    v = values.get(cid)
    if v is None or v == "":
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ControlError(cid, f"enter a number, got {v!r}")
    return float(v)


def _choice(values: dict[str, Any], cid: str) -> Any:
    c = _BY_ID[cid]
    v = values.get(cid)
    if c.kind == "bool":
        if not isinstance(v, bool):
            raise ControlError(cid, f"choose on or off, got {v!r}")
        return v
    if v not in c.choices:
        raise ControlError(cid, f"choose one of {', '.join(map(str, c.choices))}")
    return v


# Which control a simulator message is about: the first key found in the message wins.
_MESSAGE_KEYS = (
    ("kv_heads", "kv-heads"), ("head_dim", "head-dim"), ("heads", "heads"),
    ("batch", "batch"), ("sequence length", "seq"), ("seq", "seq"), ("dtype", "dtype"),
    ("no rate for", "dtype"), ("has no peak rate", "dtype"),
    ("efficiency", "efficiency"), ("achieved_tflops", "tflops"), ("peak", "tflops"),
    ("launch_overhead", "overhead-us"), ("memory_gb", "gpu"),
    ("bandwidth", "link-gbps"), ("latency", "link-latency-us"),
    ("gpus_per_node", "gpus-per-node"), ("n_gpus", "gpus"), ("tile", "tile"),
    ("layout", "layout"), ("sync", "sync"), ("granularity", "granularity"),
)


def _attribute(err: RingsimError, fallback: str) -> ControlError:
    text = str(err)
    for key, cid in _MESSAGE_KEYS:
        if key in text:
            return ControlError(cid, text)
    return ControlError(fallback, text)


def scenario_from_values(values: dict[str, Any]) -> Scenario:
    """A validated scenario, or ControlError naming the control at fault."""
    w = dict(seq=_int(values, "seq", "sequence length"), batch=_int(values, "batch", "batch"),
             heads=_int(values, "heads", "heads"), kv_heads=_int(values, "kv-heads", "K/V heads"),
             head_dim=_int(values, "head-dim", "head dim"), dtype=_choice(values, "dtype"),
             causal=_choice(values, "causal"), pass_=_choice(values, "pass"))
    try:
        workload = Workload(**w)
    except RingsimError as e:
        raise _attribute(e, "seq") from None

    gpu_name = _choice(values, "gpu")
    tflops = _opt_float(values, "tflops")
    eff = _opt_float(values, "efficiency")
    overhead = _opt_float(values, "overhead-us")
    gpu_over: dict[str, Any] = {}
    if tflops is not None:
        gpu_over["achieved_tflops"] = tflops
    if eff is not None:
        gpu_over["efficiency"] = eff
    if overhead is not None:
        gpu_over["launch_overhead_us"] = overhead
    try:
        if gpu_name == CUSTOM:
            if tflops is None:
                raise ControlError("tflops", "a custom GPU needs its achieved TFLOP/s")
            gpu = Gpu(name=CUSTOM, **gpu_over)
        else:
            gpu = Gpu.preset(gpu_name, **gpu_over)
    except ControlError:
        raise
    except RingsimError as e:
        raise _attribute(e, "gpu") from None

    link_name = _choice(values, "link")
    gbps = _opt_float(values, "link-gbps")
    latency = _opt_float(values, "link-latency-us")
    link_over: dict[str, Any] = {}
    if gbps is not None:
        link_over["bandwidth_gbps"] = gbps
    if latency is not None:
        link_over["latency_us"] = latency
    try:
        if link_name == CUSTOM:
            if gbps is None:
                raise ControlError("link-gbps", "a custom link needs its bandwidth in GB/s")
            link = Link(name=CUSTOM, **link_over)
        else:
            link = Link.preset(link_name, **link_over)
    except ControlError:
        raise
    except RingsimError as e:
        raise _attribute(e, "link") from None

    inter = _choice(values, "inter-link")
    gpn = _int(values, "gpus-per-node", "GPUs per node")
    try:
        hardware = Hardware(gpu=gpu, link=link, gpus_per_node=gpn,
                            inter_link=None if inter == SAME_LINK else Link.preset(inter))
    except RingsimError as e:
        raise _attribute(e, "gpus-per-node") from None

    n = _int(values, "gpus", "number of GPUs")
    if n > MAX_GPUS:
        raise ControlError("gpus", f"the dashboard simulates at most {MAX_GPUS} GPUs "
                                   "(use `ringsim simulate` for larger rings)")
    tile = _int(values, "tile", "tile")
    layout, overlap = _choice(values, "layout"), _choice(values, "overlap")
    granularity = _choice(values, "granularity")
    sync = _choice(values, "sync")
    try:
        return Scenario(workload=workload, hardware=hardware, n_gpus=n, layout=layout,
                        overlap=overlap, sync=sync, granularity=granularity, tile=tile)
    except RingsimError as e:
        raise _attribute(e, "gpus") from None


def scenario_from_config(config: dict[str, Any], hardware: Hardware) -> Scenario:
    """The scenario a trace header describes (Scenario.describe() shape), on `hardware`."""
    try:
        w = dict(config["workload"])
        w["pass_"] = w.pop("pass")
        return Scenario(workload=Workload(**w), hardware=hardware, n_gpus=config["n_gpus"],
                        layout=config["layout"], overlap=config["overlap"],
                        sync=config.get("sync", "step"),
                        granularity=config.get("granularity", "exact"),
                        tile=config.get("tile", 128))
    except RingsimError as e:
        raise RingsimError(f"the trace's configuration is not a valid scenario: {e}") from None
    except (KeyError, TypeError, AttributeError) as e:
        raise RingsimError(f"the trace's header has no usable configuration (missing or bad {e})") from None


def scenario_key(scenario: Scenario, hardware_desc: Any | None = None) -> str:
    """A stable string key for caching (a Scenario is not hashable: it holds dicts)."""
    hw = hardware_desc if hardware_desc is not None else scenario.hardware.describe()
    return json.dumps([scenario.describe(), hw], sort_keys=True, default=str)
