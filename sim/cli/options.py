"""The options the commands share, and what they make: the workload, hardware and schedule
flags of `simulate` as argparse arguments (declared in sim.scenario.schema; `compare`, `sweep`
specs and `plan` candidates read them too), the hardware and scenario they describe, the
calibrated profile they name, and plain text tables. sim.cli.main, sim.planning.spec, sim.planning.sweep and
sim.planning.plan build on this module; it imports none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from dataclasses import replace
from typing import Any, Sequence

from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.hardware.pcie import PCIE_X16_GBPS, Pcie
from sim.hardware.presets import cluster_preset, gpu_preset
from sim.scenario.config import Scenario, Workload
from sim.scenario.documents import read_file_spec
from sim.scenario.schema import SCENARIO_OPTIONS, ScenarioOption, scenario_option
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


def hardware_from_args(a: argparse.Namespace) -> Hardware:
    gpu_over: dict[str, Any] = {}
    if a.tflops is not None:
        gpu_over["achieved_tflops"] = a.tflops
    if a.efficiency is not None:
        gpu_over["efficiency"] = a.efficiency
    if a.overhead_us is not None:
        gpu_over["launch_overhead_us"] = a.overhead_us
    gpu_over["merge"] = getattr(a, "merge", "fused")
    link_over: dict[str, Any] = {}
    if a.link_gbps is not None:
        link_over["bandwidth_gbps"] = a.link_gbps
    if a.link_latency_us is not None:
        link_over["latency_us"] = a.link_latency_us
    c = cluster_preset(a.cluster) if getattr(a, "cluster", None) else None

    def pick(value, of_cluster, default):
        return value if value is not None else (of_cluster if c is not None else default)

    gen = getattr(a, "pcie_gen", None)
    if gen is not None and gen not in PCIE_X16_GBPS:
        raise RingsimError(f"--pcie-gen {gen}: unknown PCIe generation; choose from "
                           f"{', '.join(map(str, PCIE_X16_GBPS))}")
    link_name = pick(a.link, f"pcie{gen}" if gen is not None else c and c.link,
                     f"pcie{gen}" if gen is not None else scenario_option("link").fallback)
    inter = pick(a.inter_link, c and c.inter_link, None)
    nic_gbps = getattr(a, "nic_gbps", None)
    if nic_gbps is not None:
        inter = inter or link_name
    gpu_profile = _gpu_profile(a)
    with flags_for(achieved_tflops="--tflops", efficiency="--efficiency", launch_overhead_us="--overhead-us",
                   fwd_host_us="--overhead-us", bwd_host_us="--overhead-us"):
        if gpu_profile is not None:
            if a.gpu is not None and gpu_preset(a.gpu).name != gpu_profile.gpu:
                raise RingsimError(f"--gpu {a.gpu} and the GPU profile {a.profile} ({gpu_profile.gpu}) disagree")
            gpu = gpu_profile.gpu_for(a.kernel, gpu_over.pop("merge"))
            gpu = replace(gpu, **gpu_over) if gpu_over else gpu
        else:
            gpu = Gpu.preset(pick(a.gpu, c and c.gpu, scenario_option("gpu").fallback), kernel=a.kernel, **gpu_over)
        if a.overhead_us is not None and gpu.kernel is not None:
            gpu = replace(gpu, floors=replace(gpu.floors, fwd_host_us=a.overhead_us, bwd_host_us=a.overhead_us))
    with flags_for(bandwidth_gbps="--link-gbps", latency_us="--link-latency-us"):
        link = Link.preset(link_name, **link_over)
    with flags_for(bandwidth_gbps="--nic-gbps"):
        inter_link = Link.preset(inter, **({} if nic_gbps is None else {"bandwidth_gbps": nic_gbps})) if inter else None
    gpus_per_node = pick(a.gpus_per_node, c and c.gpus_per_node, scenario_option("gpus-per-node").fallback)
    nics = getattr(a, "nics_per_node", None)
    if nics is None and c is not None:
        # the cluster's GPUs per NIC, on nodes of another size (--gpus-per-node)
        per_nic = c.gpus_per_node // c.nics_per_node
        if gpus_per_node % per_nic and gpus_per_node > per_nic:
            raise RingsimError(f"--gpus-per-node {gpus_per_node} does not split into the {per_nic} GPUs per NIC of "
                               f"--cluster {c.name}; give --nics-per-node")
        nics = max(1, gpus_per_node // per_nic)
    with flags_for(gen="--pcie-gen", gpus_per_switch="--gpus-per-switch", gpus_per_socket="--gpus-per-socket",
                   gpus_per_node="--gpus-per-node", staged_gbps="--staged-gbps"):
        pcie = _pcie_from_args(a, c and c.pcie, gpus_per_node, link_name)
    with flags_for(gpus_per_node="--gpus-per-node", nics_per_node="--nics-per-node"):
        return Hardware(gpu=gpu, link=link, inter_link=inter_link, gpus_per_node=gpus_per_node, nics_per_node=nics,
                        pcie=pcie)


def _pcie_from_args(a: argparse.Namespace, of_cluster: Pcie | None, gpus_per_node: int, link_name: str
                    ) -> Pcie | None:
    given = {name: getattr(a, name, None)
             for name in ("gpus_per_switch", "gpus_per_socket", "p2p", "socket_link", "staged_gbps")}
    given["gen"] = getattr(a, "pcie_gen", None)
    return pcie_fabric(of_cluster, given, gpus_per_node, link_name)


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


def scenario_from_args(a: argparse.Namespace, **changes: Any) -> Scenario:
    with flags_for(**WORKLOAD_FLAGS):
        workload = Workload(batch=a.batch, seq=a.seq, heads=a.heads, kv_heads=a.kv_heads,
                            head_dim=a.head_dim, dtype=a.dtype, causal=a.causal, pass_=a.pass_,
                            docs=None if a.docs is None else read_file_spec(a.docs), seed=a.seed,
                            window=a.window)
    fields = dict(workload=workload, hardware=hardware_from_args(a), n_gpus=a.gpus,
                  scheme=a.scheme, granularity=a.granularity, tile=a.tile, sync=a.sync,
                  ulysses_degree=a.ulysses_degree, ring_degree=a.ring_degree, placement=a.placement,
                  head_groups=a.head_groups)
    if hasattr(a, "layout"):
        fields.update(layout=a.layout, overlap=a.overlap)
    fields.update(changes)
    with flags_for(n_gpus="--gpus", tile="--tile", head_groups="--head-groups", ulysses_degree="--ulysses-degree",
                   ring_degree="--ring-degree"):
        return Scenario(**fields)


WORKLOAD_FLAGS = {"kv_heads": "--kv-heads", "head_dim": "--head-dim", "heads": "--heads", "seq": "--seq",
                  "batch": "--batch", "docs": "--docs", "seed": "--seed", "window": "--window"}
"""The Workload fields the commands set from flags of the same name."""


@contextlib.contextmanager
def flags_for(**flags: str):
    """A RingsimError raised inside names the flags the user typed, not the fields they set
    (`n_gpus must be ...` -> `--gpus must be ...`). Field names with an underscore are
    replaced wherever they stand; a plain word (heads, seq) only where it opens the message,
    so that prose ("the 32 query heads") keeps its words."""
    try:
        yield
    except RingsimError as e:
        message = str(e)
        for name, flag in flags.items():
            if "_" in name:
                message = re.sub(rf"\b{name}\b", flag, message)
            else:
                message = re.sub(rf"^{name}\b", flag, message)
        # a refusal sim.reasons knows keeps its clause while its sentence stands as it was
        raise RingsimError(message, reason=e.reason if message == str(e) else None) from None


def _gpu_profile(a: argparse.Namespace):
    """The GPU profile --profile names, or None (no profile, or a whole-hardware one)."""
    if not getattr(a, "profile", None):
        return None
    from sim.calibration.gpu_profile import gpu_profile_from_dict, is_gpu_profile
    from sim.files import read_json

    d = read_json(a.profile, what="profile", max_bytes=16 * 1024 * 1024)
    return gpu_profile_from_dict(d, a.profile) if is_gpu_profile(d) else None


def profile_from_args(a: argparse.Namespace):
    """The calibrated profile named by --profile, or None for the presets (and for a GPU
    profile, which hardware_from_args applies to the GPU)."""
    if not getattr(a, "profile", None) or _gpu_profile(a) is not None:
        return None
    from sim.hardware.host import mismatch_line, this_host
    from sim.hardware.profile import load_profile

    profile = load_profile(a.profile)
    if profile.measured_on.get("kind", "cpu") == "cpu":
        # a CPU profile predicts a host like the one it was measured on: most often this one
        line = mismatch_line(profile.measured_on, this_host(), a.profile)
        if line:
            print(line, file=sys.stderr)
    return profile


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table, columns right-aligned but the first."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for j, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def scheme_variant(scenario: Scenario) -> str:
    """The scheme and what sets it apart, in a few words."""
    settings = {k: v for k, v in scenario.describe().items()
                if k in ("ulysses_degree", "ring_degree", "placement", "head_groups")}
    if scenario.scheme == "ring":
        return f"ring, {scenario.layout} layout, overlap {'on' if scenario.overlap else 'off'}"
    if scenario.scheme == "allgather":
        g = settings["head_groups"]
        return "allgather, " + ("one gather" if g == 1 else f"pipelined over {g} head groups")
    if scenario.scheme == "ulysses":
        return f"ulysses, degree {settings['ulysses_degree']}"
    if scenario.scheme == "hybrid":
        return (f"hybrid, ulysses {settings['ulysses_degree']} x ring {settings['ring_degree']}, "
                f"{settings['placement']}, {scenario.layout} ring")
    return scenario.scheme + "".join(f", {k} {v}" for k, v in settings.items())
