"""The options the commands share, and what they make: the workload, hardware and schedule
flags of `simulate` (which `compare`, `sweep` specs and `plan` candidates read too), the
hardware and scenario they describe, the calibrated profile they name, and plain text
tables. sim.cli, sim.spec, sim.sweep and sim.plan build on this module; it imports none
of them.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from dataclasses import replace
from typing import Any, Sequence

from sim.config import LAYOUTS, PASSES, PLACEMENTS, Gpu, Hardware, Link, Scenario, Workload
from sim.documents import read_file_spec
from sim.errors import RingsimError
from sim.pcie import P2P_MODES, PCIE_X16_GBPS, SOCKET_LINKS, Pcie
from sim.presets import CLUSTER_PRESETS, GPU_PRESETS, LINK_PRESETS, cluster_preset, gpu_preset
from sim.schemes import names as scheme_names
from sim.units import tokens


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a value such as -1k or -3.5 is a (bad) value of the option before it, not an
        # option: it then gets its own message ("must be positive"), not "expected one argument"
        self._negative_number_matcher = re.compile(r"^-\d+(\.\d+)?[kKmMgG]?$")

    def error(self, message: str) -> None:  # argparse's usage dump is more than one line
        raise RingsimError(message)


def add_scenario_args(p: argparse.ArgumentParser, *, with_layout: bool = True) -> None:
    """The workload, hardware and schedule flags shared by simulate, compare and others."""
    d = Workload()
    g = p.add_argument_group("workload")
    g.add_argument("--gpus", type=int, default=8, help="ranks in the ring (default 8)")
    g.add_argument("--seq", type=tokens, default=d.seq,
                   help=f"tokens per sequence: a number or a size such as 64k or 1M (default {d.seq})")
    g.add_argument("--batch", type=int, default=d.batch, help="sequences (default 1)")
    g.add_argument("--heads", type=int, default=d.heads, help=f"query heads (default {d.heads})")
    g.add_argument("--kv-heads", type=int, default=d.kv_heads,
                   help=f"key/value heads, fewer than --heads for GQA/MQA (default {d.kv_heads})")
    g.add_argument("--head-dim", type=int, default=d.head_dim, help=f"(default {d.head_dim})")
    g.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default=d.dtype)
    g.add_argument("--causal", action=argparse.BooleanOptionalAction, default=d.causal,
                   help="causal mask (default on)")
    g.add_argument("--pass", dest="pass_", choices=PASSES, default=d.pass_,
                   help="fwd, bwd or fwdbwd (default fwd)")
    g.add_argument("--docs", default=None, metavar="SPEC",
                   help="packed documents: lengths repeated to fill the sequence (256,7392,544), or drawn "
                        "with --seed from lognormal:median=4k,sigma=1.2 or file:lengths.txt (default: one)")
    g.add_argument("--seed", type=int, default=d.seed, help="seed of drawn documents (default 0)")
    g.add_argument("--window", type=tokens, default=None,
                   help="sliding-window attention: a query sees itself and window-1 keys before it")
    add_hardware_args(p)
    s = p.add_argument_group("schedule")
    s.add_argument("--scheme", choices=scheme_names(), default="ring",
                   help="sequence-parallel scheme (default ring)")
    s.add_argument("--ulysses-degree", type=int, default=None,
                   help="ulysses, hybrid: GPUs per all-to-all group (ulysses: all of them; hybrid default: "
                        "the largest that fits the heads and a node, leaving rings of two or more)")
    s.add_argument("--ring-degree", type=int, default=None,
                   help="hybrid: GPUs per ring (ulysses degree x ring degree = --gpus)")
    s.add_argument("--placement", choices=PLACEMENTS, default="ulysses-inner",
                   help="hybrid: all-to-all groups on consecutive ranks, inside a node (ulysses-inner, "
                        "default, as TransformerEngine's a2a+p2p) or the rings (ring-inner)")
    s.add_argument("--head-groups", type=int, default=1,
                   help="allgather: gather and attend K/V head group by head group, each gather behind "
                        "the previous group's compute (default 1: one gather, exposed)")
    if with_layout:
        s.add_argument("--layout", choices=LAYOUTS, default="zigzag", help="(default zigzag)")
        s.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True,
                       help="double-buffered K/V transfers behind compute (default on)")
    s.add_argument("--sync", choices=["step", "buffered"], default="step",
                   help="with overlap: post and wait once per step as ring kernels do (default), "
                        "or forward each block as soon as a buffer is free")
    s.add_argument("--granularity", choices=["exact", "tile"], default="exact",
                   help="count exact unmasked pairs or whole tiles (default exact)")
    s.add_argument("--tile", type=int, default=128, help="tile edge in tokens (default 128)")


def add_hardware_args(p: argparse.ArgumentParser) -> None:
    """The hardware flags (hardware_from_args reads them): the GPU, its kernel model, the
    links, the nodes and a PCIe node's fabric."""
    h = p.add_argument_group("hardware")
    h.add_argument("--cluster", default=None,
                   help=f"cluster preset, the defaults of the next five flags: {', '.join(CLUSTER_PRESETS)}")
    h.add_argument("--gpu", default=None, help=f"GPU preset: {', '.join(GPU_PRESETS)} (default H100-SXM)")
    h.add_argument("--link", default=None,
                   help=f"link preset inside a node: {', '.join(LINK_PRESETS)} (default nvlink4)")
    h.add_argument("--inter-link", default=None,
                   help="link preset of a NIC, between nodes (default: --link everywhere)")
    h.add_argument("--gpus-per-node", type=int, default=None, help="(default 8)")
    h.add_argument("--nics-per-node", type=int, default=None,
                   help="NICs per node, each shared by its share of the node's GPUs (default one per GPU)")
    h.add_argument("--nic-gbps", type=float, default=None,
                   help="GB/s per direction of a NIC, replacing the inter-link's (default: the preset's)")
    h.add_argument("--pcie-gen", type=int, default=None,
                   help="PCIe node: generation of the GPUs' ports and the switches' uplinks, 3, 4 or 5 (default: "
                        "the cluster's; setting it makes the node a PCIe fabric of switches and sockets)")
    h.add_argument("--gpus-per-switch", type=int, default=None,
                   help="PCIe node: GPUs under each PCIe switch (1: each on its own root port)")
    h.add_argument("--gpus-per-socket", type=int, default=None, help="PCIe node: GPUs on each CPU socket")
    h.add_argument("--p2p", choices=P2P_MODES, default=None,
                   help="PCIe node: which GPU pairs go peer to peer, the rest through host memory: every pair "
                        "(on), pairs on one socket, pairs under one switch (NCCL's default), none (off, GeForce)")
    h.add_argument("--socket-link", choices=list(SOCKET_LINKS), default=None,
                   help="PCIe node: the link between its sockets, at the bandwidth NCCL's topology gives it")
    h.add_argument("--staged-gbps", type=float, default=None,
                   help="PCIe node: GB/s of one copy staged through host memory (default 70%% of the x16 link, "
                        "from a published P2P=Disabled measurement)")
    h.add_argument("--kernel", default="default",
                   help="attention kernel whose published throughput and structure time each block (the block "
                        "model): fa2, fa3, cudnn (where the preset has its table; default: the preset's first) or "
                        "flat (every block at peak x efficiency)")
    h.add_argument("--merge", choices=["fused", "unfused"], default="fused",
                   help="how each block's partial result is merged: one fused kernel (default) or the chain of "
                        "elementwise kernels ring-flash-attention and torch's context_parallel run")
    h.add_argument("--tflops", type=float, default=None,
                   help="achieved TFLOP/s per GPU for every block (flat model)")
    h.add_argument("--efficiency", type=float, default=None,
                   help="fraction of the preset's peak achieved by every block (flat model; default 0.5)")
    h.add_argument("--overhead-us", type=float, default=None,
                   help="flat model: per-block launch overhead; block model: the host-side floor of a call, µs")
    h.add_argument("--link-gbps", type=float, default=None, help="link GB/s per direction")
    h.add_argument("--link-latency-us", type=float, default=None, help="link latency, µs")
    h.add_argument("--profile", default=None,
                   help="calibrated hardware profile (from `ringsim calibrate`), replacing presets; a GPU profile "
                        "(from one GPU's compute grid) replaces the GPU alone and keeps the link flags")


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
                     f"pcie{gen}" if gen is not None else "nvlink4")
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
            gpu = Gpu.preset(pick(a.gpu, c and c.gpu, "H100-SXM"), kernel=a.kernel, **gpu_over)
        if a.overhead_us is not None and gpu.kernel is not None:
            gpu = replace(gpu, floors=replace(gpu.floors, fwd_host_us=a.overhead_us, bwd_host_us=a.overhead_us))
    with flags_for(bandwidth_gbps="--link-gbps", latency_us="--link-latency-us"):
        link = Link.preset(link_name, **link_over)
    with flags_for(bandwidth_gbps="--nic-gbps"):
        inter_link = Link.preset(inter, **({} if nic_gbps is None else {"bandwidth_gbps": nic_gbps})) if inter else None
    gpus_per_node = pick(a.gpus_per_node, c and c.gpus_per_node, 8)
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
        raise RingsimError(message) from None


def _gpu_profile(a: argparse.Namespace):
    """The GPU profile --profile names, or None (no profile, or a whole-hardware one)."""
    if not getattr(a, "profile", None):
        return None
    from sim.gpu_profile import gpu_profile_from_dict, is_gpu_profile
    from sim.trace import read_json

    d = read_json(a.profile, what="profile", max_bytes=16 * 1024 * 1024)
    return gpu_profile_from_dict(d, a.profile) if is_gpu_profile(d) else None


def profile_from_args(a: argparse.Namespace):
    """The calibrated profile named by --profile, or None for the presets (and for a GPU
    profile, which hardware_from_args applies to the GPU)."""
    if not getattr(a, "profile", None) or _gpu_profile(a) is not None:
        return None
    from sim.host import mismatch_line, this_host
    from sim.profile import load_profile

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
