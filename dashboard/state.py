"""The page's scenario: control values <-> URL query <-> a validated `Scenario`.

Every control that shapes the scenario has one entry in CONTROLS: its component id, its
key in the URL (so that a link reproduces the scenario), its kind, default and choices,
all taken from the `ringsim simulate` option it sets (sim.scenario.schema). Turning the values
into a `Scenario` goes through the simulator's own validated constructors; a mistake
becomes a `ControlError` naming the control to show the message beside.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl, urlencode

from sim.cli.options import pcie_fabric
from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.presets import CLUSTER_PRESETS, GPU_PRESETS, LINK_PRESETS, cluster_preset
from sim.layouts import NAMES as ONE_DOCUMENT_LAYOUTS
from sim.layouts.packed import DOC_LAYOUTS
from sim.scenario.config import LAYOUTS, Scenario, Workload
from sim.scenario.schema import scenario_option

CUSTOM = "custom"
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
    id: str
    url_key: str
    kind: str
    """int, optint (blank: None), float (optional when default is None), bool, choice,
    or text (blank: None)."""
    default: Any
    choices: tuple[Any, ...] = ()


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
    return Control(cid, o.url_key, kind, default, choices or ())


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
    _control("ulysses-degree"),
    _control("ring-degree"),
    _control("placement"),
    _control("head-groups"),
    _control("granularity"),
    _control("tile"),
)
CONTROL_IDS: tuple[str, ...] = tuple(c.id for c in CONTROLS)
_BY_ID = {c.id: c for c in CONTROLS}
_BY_KEY = {c.url_key: c for c in CONTROLS}

SCHEME_CONTROLS: dict[str, tuple[str, ...]] = {
    "allgather": ("head-groups",),
    "hybrid": ("ulysses-degree", "ring-degree", "placement"),
}
"""The controls of a scheme's own settings (the Scenario fields it reads). Ulysses has
none to choose: its degree is every GPU."""
RING_SCHEMES = ("ring", "hybrid")
"""Schemes that pass K/V around a ring, and so read the ring's controls."""
RING_CONTROLS = ("layout", "overlap", "sync")
_FIELD_OF = {"ulysses-degree": "ulysses_degree", "ring-degree": "ring_degree", "placement": "placement",
             "head-groups": "head_groups"}
CLUSTER_CONTROLS = ("gpu", "link", "inter-link", "gpus-per-node", "nics-per-node")
"""What a cluster preset sets (sim.hardware.presets.ClusterPreset), as `ringsim --cluster` does."""


def shown_layouts(docs: Any, window: Any, layout: Any) -> tuple[str, ...]:
    """The layouts the layout control offers: for one document the closed-form ones (the
    documents' own are the same there, sim.layouts.packed.DOC_LAYOUTS), every layout with
    documents or a window (as sim.scenario.config.layouts_for), and the chosen one always."""
    if _blank(docs) and window in (None, "") and layout not in DOC_LAYOUTS:
        return ONE_DOCUMENT_LAYOUTS
    return LAYOUTS


def applies(cid: str, scheme: Any) -> bool:
    """Whether control `cid` shapes a scenario of `scheme` (a scheme's settings and the
    ring's controls apply to some schemes only; every other control to all)."""
    if cid in RING_CONTROLS:
        return scheme in RING_SCHEMES
    if cid in _FIELD_OF:
        return cid in SCHEME_CONTROLS.get(scheme, ())
    return True


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


def query_from_values(values: dict[str, Any]) -> str:
    """The URL query for `values`: only what differs from the defaults (a chosen
    cluster's values counting as defaults) and applies to the scheme, in a fixed order."""
    items = []
    base = _defaults_under(values)
    scheme = values.get("scheme", "ring")
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


def _int(values: dict[str, Any], cid: str, label: str) -> int:
    v = values.get(cid)
    if v is None or v == "":
        raise ControlError(cid, f"{label}: enter a whole number")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
        raise ControlError(cid, f"{label} must be a whole number, got {v!r}")
    if v <= 0:
        raise ControlError(cid, f"{label} must be positive, got {int(v)}")
    return int(v)


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def _count(values: dict[str, Any], cid: str, label: str) -> int:
    """A whole number, 0 or more (a seed)."""
    v = values.get(cid)
    if v is None or v == "":
        raise ControlError(cid, f"{label}: enter a whole number")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) or v < 0:
        raise ControlError(cid, f"{label} must be a whole number, 0 or more, got {v!r}")
    return int(v)


def _text(values: dict[str, Any], cid: str) -> str | None:
    v = values.get(cid)
    if _blank(v):
        return None
    if not isinstance(v, str):
        raise ControlError(cid, f"enter text, got {v!r}")
    return v.strip()


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


# Which control a simulator message is about: the first key found in the message wins
# (so the schemes' settings come before the heads and GPUs their messages mention).
_MESSAGE_KEYS = (
    ("document", "docs"), ("docs", "docs"), ("lognormal", "docs"), ("window", "window"), ("seed", "seed"),
    ("ulysses degree", "ulysses-degree"), ("ring degree", "ring-degree"), ("head groups", "head-groups"),
    ("placement", "placement"), ("nics_per_node", "nics-per-node"), ("fill whole nodes", "gpus"),
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


def _opt_int(values: dict[str, Any], cid: str, label: str) -> int | None:
    v = values.get(cid)
    return None if v is None or v == "" else _int(values, cid, label)


def _workload(values: dict[str, Any]) -> Workload:
    w = dict(seq=_int(values, "seq", "sequence length"), batch=_int(values, "batch", "batch"),
             heads=_int(values, "heads", "heads"), kv_heads=_int(values, "kv-heads", "K/V heads"),
             head_dim=_int(values, "head-dim", "head dim"), dtype=_choice(values, "dtype"),
             causal=_choice(values, "causal"), pass_=_choice(values, "pass"), docs=_text(values, "docs"),
             seed=_count(values, "seed", "seed"), window=_opt_int(values, "window", "window"))
    if w["docs"] is not None and w["docs"].startswith("file:"):
        raise ControlError("docs", "the page takes the lengths themselves (sample:300,4096,...), not a file")
    try:
        return Workload(**w)
    except RingsimError as e:
        raise _attribute(e, "seq") from None


def _gpu(values: dict[str, Any]) -> Gpu:
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
            return Gpu(name=CUSTOM, **gpu_over)
        gpu = Gpu.preset(gpu_name, **gpu_over)
        if overhead is not None and gpu.kernel is not None:
            # the block model's per-call floor, as `--overhead-us` sets it (sim.cli.options)
            gpu = replace(gpu, floors=replace(gpu.floors, fwd_host_us=overhead, bwd_host_us=overhead))
        return gpu
    except ControlError:
        raise
    except RingsimError as e:
        raise _attribute(e, "gpu") from None


def _link(values: dict[str, Any]) -> Link:
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
            return Link(name=CUSTOM, **link_over)
        return Link.preset(link_name, **link_over)
    except ControlError:
        raise
    except RingsimError as e:
        raise _attribute(e, "link") from None


def _hardware(values: dict[str, Any]) -> Hardware:
    """GPU, links and nodes. As `ringsim --nic-gbps` does, a NIC bandwidth replaces the
    inter-node link's (the link inside the node's, with its latency, when the nodes use
    no other link)."""
    gpu, link = _gpu(values), _link(values)
    inter = _choice(values, "inter-link")
    nic_gbps = _opt_float(values, "nic-gbps")
    inter_link = None if inter == SAME_LINK else Link.preset(inter)
    if nic_gbps is not None:
        base = inter_link or link
        try:
            inter_link = Link(name=base.name, bandwidth_gbps=nic_gbps, latency_us=base.latency_us)
        except RingsimError as e:
            raise ControlError("nic-gbps", str(e)) from None
    gpn = _int(values, "gpus-per-node", "GPUs per node")
    nics = _opt_int(values, "nics-per-node", "NICs per node")
    try:
        # a PCIe cluster's fabric (sim.hardware.pcie) while its node keeps a PCIe link
        cluster = values.get("cluster")
        of_cluster = CLUSTER_PRESETS[cluster].pcie if cluster in CLUSTER_PRESETS else None
        p2p = values.get("p2p", PRESET_P2P)
        given = {} if p2p in (None, PRESET_P2P) else {"p2p": p2p}
        pcie = (pcie_fabric(of_cluster, given, gpn, link.name)
                if (of_cluster or given) and link.name.startswith("pcie") else None)
        return Hardware(gpu=gpu, link=link, gpus_per_node=gpn, nics_per_node=nics, inter_link=inter_link, pcie=pcie)
    except RingsimError as e:
        raise _attribute(e, "gpus-per-node") from None


def scheme_fields(values: dict[str, Any]) -> dict[str, Any]:
    """The Scenario fields of the chosen scheme and, for a scheme with a ring, the ring's
    controls; the controls that do not apply are left at the Scenario's defaults (so a
    hidden control never changes a run)."""
    scheme = _choice(values, "scheme")
    out: dict[str, Any] = {"scheme": scheme}
    if applies("layout", scheme):
        out.update(layout=_choice(values, "layout"), overlap=_choice(values, "overlap"),
                   sync=_choice(values, "sync"))
    if applies("head-groups", scheme):
        out["head_groups"] = _int(values, "head-groups", "head groups")
    if applies("ulysses-degree", scheme):
        out["ulysses_degree"] = _opt_int(values, "ulysses-degree", "Ulysses degree")
    if applies("ring-degree", scheme):
        out["ring_degree"] = _opt_int(values, "ring-degree", "ring degree")
    if applies("placement", scheme):
        out["placement"] = _choice(values, "placement")
    return out


def scenario_from_values(values: dict[str, Any]) -> Scenario:
    """A validated scenario, or ControlError naming the control at fault."""
    workload = _workload(values)
    hardware = _hardware(values)
    n = _int(values, "gpus", "number of GPUs")
    if n > MAX_GPUS:
        raise ControlError("gpus", f"the dashboard simulates at most {MAX_GPUS} GPUs "
                                   "(use `ringsim simulate` for larger rings)")
    tile = _int(values, "tile", "tile")
    granularity = _choice(values, "granularity")
    _choice(values, "cluster")
    fields = scheme_fields(values)
    try:
        return Scenario(workload=workload, hardware=hardware, n_gpus=n, granularity=granularity, tile=tile,
                        **fields)
    except RingsimError as e:
        err = _attribute(e, "gpus")
        if not applies(err.control, fields["scheme"]):
            err = ControlError("scheme", str(e))    # beside a control that is shown
        raise err from None


def ring_values(values: dict[str, Any]) -> dict[str, Any]:
    """The same controls with the ring as the scheme (the questions are about the ring)."""
    return dict(values) | {"scheme": "ring"}


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
        raise ControlError("dtype", f"the profile of {device} has no compute measurements for "
                                    f"{values.get('dtype')} (it has {', '.join(have) or 'none'})")
