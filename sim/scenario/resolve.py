"""From option values to a Scenario: the one way the options of a run (the command line's
flags, a sweep's configuration, a plan's candidate, the dashboard's controls) become its
workload, hardware, scheme settings and Scenario, checked where each is made.

Values are a mapping from option names (sim.scenario.schema: `kv-heads`, `pass`,
`head-groups`) to values of the option's kind. An option left out takes its default; a
hardware option that a cluster preset sets (`--cluster`: the GPU, the links, the GPUs and
NICs per node, the node's PCIe fabric) takes the cluster's value when left out, and given
as None means none of it (no link between nodes: `--link` everywhere; one NIC per GPU).
A GPU or link named `custom` is no preset: its numbers are given (`tflops`; `link-gbps`).
A node is a PCIe fabric (sim.hardware.pcie) where a PCIe option is given or the cluster's
node is one while its link inside the node stays a PCIe link (a PCIe cluster given an NVLink
link is NVSwitch's node): the cluster's fabric with the PCIe options over it, or one made
from them.

A mistake is an `OptionError`, one line naming the option it is about as its flag
(`--kv-heads (7) must divide heads (32)`, where the dataclass says `kv_heads`).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any, Iterator, Mapping

from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.pcie import PCIE_X16_GBPS, Pcie
from sim.hardware.presets import cluster_preset, gpu_preset
from sim.inputs import read_json
from sim.reasons import Clause, clause, english
from sim.scenario.config import Scenario, Workload
from sim.scenario.documents import read_file_spec
from sim.scenario.schema import SCENARIO_OPTIONS, SCHEME_OPTIONS, scenario_option
from sim.schemes import get as get_scheme
from sim.schemes.base import Settings

CUSTOM = "custom"
"""The name of a GPU or link of no preset, its numbers given."""
WORKLOAD_FLAGS = {"kv_heads": "--kv-heads", "head_dim": "--head-dim", "heads": "--heads", "seq": "--seq",
                  "batch": "--batch", "docs": "--docs", "seed": "--seed", "window": "--window"}
"""The Workload fields set by flags of the same name."""
_GPU_FLAGS = {"achieved_tflops": "--tflops", "efficiency": "--efficiency", "launch_overhead_us": "--overhead-us",
              "fwd_host_us": "--overhead-us", "bwd_host_us": "--overhead-us"}
_COMMON_SCHEDULE = tuple(o for o in SCENARIO_OPTIONS
                         if o.group == "schedule" and o.name != "scheme" and o not in SCHEME_OPTIONS)
"""The schedule options every scheme has (layout, overlap, sync, granularity, tile)."""


class OptionError(RingsimError):
    """A mistake in option values: `option` is the option the message names, else None;
    `part` the option of what was being made (the workload's: seq, the GPU's: gpu, ...),
    where a caller that must point at one (the dashboard) can look when the message names
    none."""

    def __init__(self, message: str, option: str | None = None, part: str | None = None,
                 reason: dict[str, Any] | None = None):
        super().__init__(message, reason=reason)
        self.option = option
        self.part = part or option


@contextlib.contextmanager
def flags_for(part: str | None = None, **flags: str) -> Iterator[None]:
    """A RingsimError raised inside names the flags the user typed, not the fields they set
    (`n_gpus must be ...` -> `--gpus must be ...`), as an OptionError naming the first
    flag it then says. Field names with an underscore are replaced wherever they stand; a
    plain word (heads, seq) only where it opens the message, so that prose ("the 32 query
    heads") keeps its words."""
    try:
        yield
    except OptionError:
        raise
    except RingsimError as e:
        message = str(e)
        for name, flag in flags.items():
            if "_" in name:
                message = re.sub(rf"\b{name}\b", flag, message)
            else:
                message = re.sub(rf"^{name}\b", flag, message)
        at = {message.find(f): f for f in set(flags.values()) if f in message}
        raise OptionError(message, at[min(at)][2:] if at else None, part,
                          reason=_flagged(e.reason, flags, message)) from None


def _flagged(reason: Clause | None, flags: dict[str, str], message: str) -> Clause | None:
    """The clause of a refusal (sim.reasons) whose sentence flags_for rewrote: the settings it
    spells (`field`, `other_field`) as the sentence now spells them (its subject by its flag;
    another setting by its flag where it is a dataclass's field name), and the options they
    are named (`option`, `other`); None where its English is not the sentence."""
    if reason is None:
        return None
    named = dict(reason)
    for spelled, option in (("field", "option"), ("other_field", "other")):
        flag = flags.get(named.get(spelled))
        if flag is not None:
            named.setdefault(option, flag[2:])
            if spelled == "field" or "_" in named[spelled]:
                named[spelled] = flag
    return named if english(named) == message else None


def _check_names(values: Mapping[str, Any]) -> None:
    for name in values:
        scenario_option(name)


def _value(values: Mapping[str, Any], name: str) -> Any:
    """The value given, else the option's default."""
    return values[name] if name in values else scenario_option(name).default


# --- the hardware ---------------------------------------------------------------------------

def hardware_of(values: Mapping[str, Any]) -> Hardware:
    """The GPU, the links, the nodes and their fabric the values describe."""
    _check_names(values)
    c = cluster_preset(values["cluster"]) if values.get("cluster") else None

    def pick(name: str, of_cluster: Any) -> Any:
        """As given; left out: the cluster's, else the option's fallback."""
        if name in values:
            return values[name]
        return of_cluster if c is not None else scenario_option(name).fallback

    gen = _value(values, "pcie-gen")
    if gen is not None and gen not in PCIE_X16_GBPS:
        raise OptionError(f"--pcie-gen {gen}: unknown PCIe generation; choose from "
                          f"{', '.join(map(str, PCIE_X16_GBPS))}", "pcie-gen")
    if "link" in values and values["link"] is not None:
        link_name = values["link"]
    elif gen is not None:
        link_name = f"pcie{gen}"
    else:
        link_name = pick("link", c and c.link) or scenario_option("link").fallback
    gpu = _gpu(values, pick("gpu", c and c.gpu) or scenario_option("gpu").fallback)
    link = _link(values, link_name)
    inter_link = _inter_link(values, pick("inter-link", c and c.inter_link), link)
    gpus_per_node = pick("gpus-per-node", c and c.gpus_per_node)
    if gpus_per_node is None:       # (not `or`: a 0 given is refused below, not taken as left out)
        gpus_per_node = scenario_option("gpus-per-node").fallback
    if "nics-per-node" in values or c is None:
        nics = values.get("nics-per-node")
    else:
        # the cluster's GPUs per NIC, on nodes of another size (--gpus-per-node)
        per_nic = c.gpus_per_node // c.nics_per_node
        if gpus_per_node % per_nic and gpus_per_node > per_nic:
            raise OptionError(f"--gpus-per-node {gpus_per_node} does not split into the {per_nic} GPUs per NIC of "
                              f"--cluster {c.name}; give --nics-per-node", "gpus-per-node")
        nics = max(1, gpus_per_node // per_nic)
    given = {name.replace("-", "_"): _value(values, name)
             for name in ("gpus-per-switch", "gpus-per-socket", "p2p", "socket-link", "staged-gbps")}
    given["gen"] = gen
    # the cluster's PCIe fabric while its node keeps a PCIe link (NVLink: NVSwitch's node)
    of_cluster = c.pcie if c is not None and link_name.startswith("pcie") else None
    with flags_for("gpus-per-node", gen="--pcie-gen", gpus_per_switch="--gpus-per-switch",
                   gpus_per_socket="--gpus-per-socket", gpus_per_node="--gpus-per-node",
                   staged_gbps="--staged-gbps"):
        pcie = pcie_fabric(of_cluster, given, gpus_per_node, link_name)
    # a link latency given is the alpha of the alpha-beta model: NCCL's latencies are its own
    comm_cost = _value(values, "comm-cost") or ("link" if _value(values, "link-latency-us") is not None else "nccl")
    with flags_for("gpus-per-node", gpus_per_node="--gpus-per-node", nics_per_node="--nics-per-node"):
        return Hardware(gpu=gpu, link=link, inter_link=inter_link, gpus_per_node=gpus_per_node, nics_per_node=nics,
                        pcie=pcie, comm_cost=comm_cost)


def _gpu(values: Mapping[str, Any], name: str) -> Gpu:
    """The GPU: a preset (its kernel model), a custom one or a calibrated GPU profile's,
    with the numbers given over it. `--overhead-us` is the flat model's launch overhead
    and the block model's host-side floor of a call."""
    over: dict[str, Any] = {}
    for option, field_name in (("tflops", "achieved_tflops"), ("efficiency", "efficiency"),
                               ("overhead-us", "launch_overhead_us")):
        if _value(values, option) is not None:
            over[field_name] = _value(values, option)
    merge = _value(values, "merge")
    overhead = _value(values, "overhead-us")
    gpu_profile = _gpu_profile(_value(values, "profile"))
    with flags_for("gpu", **_GPU_FLAGS):
        if gpu_profile is not None:
            given = values.get("gpu")
            if given is not None and gpu_preset(given).name != gpu_profile.gpu:
                raise OptionError(f"--gpu {given} and the GPU profile {values['profile']} ({gpu_profile.gpu}) "
                                  "disagree", "gpu")
            gpu = gpu_profile.gpu_for(_value(values, "kernel"), merge)
            gpu = replace(gpu, **over) if over else gpu
        elif name == CUSTOM:
            if "achieved_tflops" not in over:
                raise OptionError("a custom GPU needs its achieved TFLOP/s", "tflops",
                                  reason=clause("refused.custom-gpu", option="tflops", unit="TFLOP/s"))
            gpu = Gpu(name=CUSTOM, merge=merge, **over)
        else:
            gpu = Gpu.preset(name, kernel=_value(values, "kernel"), merge=merge, **over)
        if overhead is not None and gpu.kernel is not None:
            gpu = replace(gpu, floors=replace(gpu.floors, fwd_host_us=overhead, bwd_host_us=overhead))
    return gpu


def _link(values: Mapping[str, Any], name: str) -> Link:
    over: dict[str, Any] = {}
    if _value(values, "link-gbps") is not None:
        over["bandwidth_gbps"] = _value(values, "link-gbps")
    if _value(values, "link-latency-us") is not None:
        over["latency_us"] = _value(values, "link-latency-us")
    with flags_for("link", bandwidth_gbps="--link-gbps", latency_us="--link-latency-us"):
        if name == CUSTOM:
            if "bandwidth_gbps" not in over:
                raise OptionError("a custom link needs its bandwidth in GB/s", "link-gbps",
                                  reason=clause("refused.custom-link", option="link-gbps", unit="GB/s"))
            return Link(name=CUSTOM, **over)
        return Link.preset(name, **over)


def _inter_link(values: Mapping[str, Any], name: str | None, link: Link) -> Link | None:
    """A NIC's link between nodes; with `--nic-gbps` and no link of its own, the link
    inside the node (its preset's latency) at the NIC's bandwidth."""
    nic_gbps = _value(values, "nic-gbps")
    if nic_gbps is not None:
        name = name or link.name
    if name is None:
        return None
    with flags_for("nic-gbps", bandwidth_gbps="--nic-gbps"):
        if name == CUSTOM:
            return Link(name=CUSTOM, bandwidth_gbps=nic_gbps, latency_us=link.latency_us)
        return Link.preset(name, **({} if nic_gbps is None else {"bandwidth_gbps": nic_gbps}))


def pcie_fabric(of_cluster: Pcie | None, given: dict[str, Any], gpus_per_node: int, link_name: str) -> Pcie | None:
    """The node's PCIe fabric: the cluster's, with the fields `given` (not None) over it;
    a node without one gets one when a field is given (two sockets, two GPUs per switch
    where the node's size allows, the generation of a pcieN link). A node smaller than
    the cluster's socket is one socket."""
    given = {k: v for k, v in given.items() if v is not None}
    if of_cluster is None and not given:
        return None
    if of_cluster is None:
        g = gpus_per_node
        socket = g // 2 if g % 2 == 0 and g > 1 else g
        gen = int(link_name[4:]) if link_name.startswith("pcie") and link_name[4:].isdigit() else 4
        of_cluster = Pcie(gen=gen, gpus_per_switch=2 if socket % 2 == 0 else 1, gpus_per_socket=socket)
    if "gpus_per_socket" not in given and gpus_per_node % of_cluster.gpus_per_socket:
        given["gpus_per_socket"] = gpus_per_node       # a node smaller than a socket: one socket
    if "gpus_per_switch" not in given and given.get("gpus_per_socket", of_cluster.gpus_per_socket) % \
            of_cluster.gpus_per_switch:
        given["gpus_per_switch"] = 1
    return replace(of_cluster, **given)


def _read_profile(path: str) -> tuple[Any, Any]:
    """(the GPU profile, the whole-hardware profile) at `path`: one of them, the other None.
    Read once while the file stays as it is (a sweep's configurations share it)."""
    try:
        st = os.stat(path)
    except OSError:
        return _read_profile_at(path, None)       # read_json's own sentence
    return _read_profile_at(path, (st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=8)
def _read_profile_at(path: str, version: Any) -> tuple[Any, Any]:
    # the profiles' readers load when a profile is given, not on every start of `ringsim`
    from sim.calibration.gpu_profile import gpu_profile_from_dict, is_gpu_profile
    from sim.hardware.profile import profile_from_dict

    d = read_json(path, what="profile", max_bytes=16 * 1024 * 1024)
    if is_gpu_profile(d):
        return gpu_profile_from_dict(d, path), None
    return None, profile_from_dict(d, path)


def _gpu_profile(path: str | None):
    return _read_profile(path)[0] if path else None


def profile_of(values: Mapping[str, Any]):
    """The calibrated whole-hardware profile `profile` names (sim.hardware.profile), which a
    run is played on instead of the scenario's hardware; None for the presets and for a GPU
    profile (the scenario's GPU then carries it)."""
    path = _value(values, "profile")
    return _read_profile(path)[1] if path else None


# --- the scheme and the scenario ------------------------------------------------------------

def settings_of(scheme: str, values: Mapping[str, Any]) -> Settings:
    """The settings of `scheme` (sim.schemes) that `values` give: each field of its Settings
    set by the option whose destination it is (its own, or one it shares with another
    scheme); an option of another scheme's settings given other than at its default is
    refused."""
    s = get_scheme(scheme)
    own = {f.name for f in fields(s.settings_type)}
    part = next((o.name for o in SCHEME_OPTIONS if o.dest in own), "scheme")
    with flags_for(part, **{o.dest: o.flag for o in SCHEME_OPTIONS}):
        for o in SCHEME_OPTIONS:
            if o.dest not in own and values.get(o.name) not in (None, o.default):
                raise RingsimError(f"{o.flag} ({o.dest}) does not apply to the {scheme} scheme")
        return s.settings_type(**{o.dest: _value(values, o.name) for o in SCHEME_OPTIONS if o.dest in own})


def workload_of(values: Mapping[str, Any]) -> Workload:
    v = {o.dest: _value(values, o.name) for o in SCENARIO_OPTIONS if o.group == "workload" and o.name != "gpus"}
    if v["docs"] is not None:
        v["docs"] = read_file_spec(v["docs"])
    with flags_for("seq", **WORKLOAD_FLAGS):
        return Workload(**v)


def scenario_of(values: Mapping[str, Any], hardware: Hardware | None = None) -> Scenario:
    """The Scenario the values describe; on `hardware` when given (a plan's candidates
    share theirs), else the values' own (hardware_of)."""
    _check_names(values)
    workload = workload_of(values)
    if hardware is None:
        hardware = hardware_of(values)
    scheme = _value(values, "scheme")
    settings = settings_of(scheme, values)
    common = {o.dest: _value(values, o.name) for o in _COMMON_SCHEDULE}
    with flags_for("gpus", n_gpus="--gpus", tile="--tile", **{o.dest: o.flag for o in SCHEME_OPTIONS}):
        return Scenario(workload=workload, hardware=hardware, n_gpus=_value(values, "gpus"), scheme=scheme,
                        settings=settings, **common)


@dataclass(frozen=True)
class Resolved:
    """A run the values describe: its scenario, and the calibrated profile it is played
    on instead of the scenario's hardware, if any."""

    scenario: Scenario
    profile: Any = None
    """A whole-hardware profile (sim.hardware.profile) `profile` names; None: the scenario's
    hardware."""

    @property
    def hardware(self) -> Any:
        """What the engine plays the scenario on (sim.engine.play.simulate's hardware)."""
        return self.profile if self.profile is not None else self.scenario.hardware


def resolve(values: Mapping[str, Any]) -> Resolved:
    """The scenario of the values and the profile it is played on."""
    scenario = scenario_of(values)
    return Resolved(scenario, profile_of(values))


def without_scheme(values: Mapping[str, Any]) -> dict[str, Any]:
    """The values with the default scheme and none of the schemes' own options: the base a
    comparison of every scheme starts from."""
    own = {o.name for o in SCHEME_OPTIONS}
    return {k: v for k, v in values.items() if k != "scheme" and k not in own}


def vary(scenario: Scenario, scheme: str, values: Mapping[str, Any], **changes: Any) -> Scenario:
    """`scenario` run by `scheme` with the values of a variant or candidate
    (sim.schemes.base.Variant: the scheme's own options and common schedule ones, such as
    the layout) and the Scenario fields `changes` (another workload or GPU count), made at
    once; what the values leave out is the scheme's default, or the scenario's."""
    common = {o.dest: values[o.name] for o in _COMMON_SCHEDULE if o.name in values}
    return scenario.with_(scheme=scheme, settings=settings_of(scheme, values), **common, **changes)
