"""The scenario's options, declared once: every workload, hardware and schedule flag of
`ringsim simulate` (sim.scenario.option.ScenarioOption: its kind, default, choices, help
text, the heading `--help` lists it under and the key of the dashboard's control for it).
The workload, hardware and common schedule options are declared here; each scheme's own
are its module's (sim.schemes.base.Scheme.options), collected here after `--scheme`, scheme
by scheme in the registry's order, an option two schemes share once. The argparse flags
(sim.cli.options), the options of sweep specs and result columns (sim.planning.spec), the
dashboard's controls (dashboard.state) and the resolver (sim.scenario.resolve) all read
SCENARIO_OPTIONS. A default is the field's own where the configuration dataclasses
(sim.scenario.config) have one; the hardware flags default to None, which leaves the
preset's value.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from sim import implementations
from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware
from sim.hardware.pcie import P2P_MODES, SOCKET_LINKS
from sim.hardware.presets import CLUSTER_PRESETS, GPU_PRESETS, LINK_PRESETS
from sim.scenario.config import GRANULARITIES, LAYOUTS, PASSES, SYNCS, Scenario, Workload
from sim.scenario.option import ScenarioOption
from sim.scenario.quantities import DTYPE_BYTES
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names


def _field_defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


_w = _field_defaults(Workload)
_s = _field_defaults(Scenario)
_hw = _field_defaults(Hardware)
_gpu = _field_defaults(Gpu)


def _on(value: bool) -> str:
    return "on" if value else "off"


def _scheme_options() -> tuple[ScenarioOption, ...]:
    """Every scheme's own options, scheme by scheme in the registry's order; an option two
    schemes share (the same flag) once, and the same record in both."""
    out: dict[str, ScenarioOption] = {}
    for name in scheme_names():
        for o in get_scheme(name).options:
            if out.setdefault(o.flag, o) != o:
                raise RingsimError(f"schemes declare {o.flag} twice, differently")
    return tuple(out.values())


SCHEME_OPTIONS = _scheme_options()
"""The options of the schemes' own settings (sim.schemes.base.Scheme.options)."""


SCENARIO_OPTIONS: tuple[ScenarioOption, ...] = (
    # workload
    ScenarioOption(flag="--gpus", kind="int", group="workload", default=_s["n_gpus"], url_key="gpus",
                   help=f"GPUs in the group (default {_s['n_gpus']})"),
    ScenarioOption(flag="--seq", kind="tokens", group="workload", default=_w["seq"], url_key="seq",
                   help=f"tokens per sequence: a number or a size such as 64k or 1M (default {_w['seq']})"),
    ScenarioOption(flag="--batch", kind="int", group="workload", default=_w["batch"], url_key="batch",
                   help=f"sequences (default {_w['batch']})"),
    ScenarioOption(flag="--heads", kind="int", group="workload", default=_w["heads"], url_key="heads",
                   help=f"query heads (default {_w['heads']})"),
    ScenarioOption(flag="--kv-heads", kind="int", group="workload", default=_w["kv_heads"], url_key="kv_heads",
                   help=f"key/value heads, fewer than --heads for GQA/MQA (default {_w['kv_heads']})"),
    ScenarioOption(flag="--head-dim", kind="int", group="workload", default=_w["head_dim"], url_key="head_dim",
                   help=f"(default {_w['head_dim']})"),
    ScenarioOption(flag="--dtype", kind="str", group="workload", default=_w["dtype"], choices=tuple(DTYPE_BYTES),
                   url_key="dtype"),
    ScenarioOption(flag="--causal", kind="bool", group="workload", default=_w["causal"], url_key="causal",
                   help=f"causal mask (default {_on(_w['causal'])})"),
    ScenarioOption(flag="--pass", dest="pass_", kind="str", group="workload", default=_w["pass_"], choices=PASSES,
                   url_key="pass", help=f"fwd, bwd or fwdbwd (default {_w['pass_']})"),
    ScenarioOption(flag="--docs", kind="str", group="workload", default=_w["docs"], metavar="SPEC", url_key="docs",
                   help="packed documents: lengths repeated to fill the sequence (256,7392,544), or drawn "
                        "with --seed from lognormal:median=4k,sigma=1.2 or file:lengths.txt (default: one)"),
    ScenarioOption(flag="--seed", kind="int", group="workload", default=_w["seed"], url_key="seed",
                   help=f"seed of drawn documents (default {_w['seed']})"),
    ScenarioOption(flag="--window", kind="tokens", group="workload", default=_w["window"], url_key="window",
                   help="sliding-window attention: a query sees itself and window-1 keys before it"),
    # hardware (sim.scenario.resolve.hardware_of reads them)
    ScenarioOption(flag="--cluster", kind="str", group="hardware", url_key="cluster",
                   help=f"cluster preset, the defaults of the next five flags: {', '.join(CLUSTER_PRESETS)}"),
    ScenarioOption(flag="--gpu", kind="str", group="hardware", fallback="H100-SXM", url_key="gpu",
                   help=f"GPU preset: {', '.join(GPU_PRESETS)} (default H100-SXM)"),
    ScenarioOption(flag="--link", kind="str", group="hardware", fallback="nvlink4", url_key="link",
                   help=f"link preset inside a node: {', '.join(LINK_PRESETS)} (default nvlink4)"),
    ScenarioOption(flag="--inter-link", kind="str", group="hardware", url_key="inter_link",
                   help="link preset of a NIC, between nodes (default: --link everywhere)"),
    ScenarioOption(flag="--gpus-per-node", kind="int", group="hardware", fallback=_hw["gpus_per_node"],
                   url_key="gpus_per_node", help=f"(default {_hw['gpus_per_node']})"),
    ScenarioOption(flag="--nics-per-node", kind="int", group="hardware", url_key="nics_per_node",
                   help="NICs per node, each shared by its share of the node's GPUs (default one per GPU)"),
    ScenarioOption(flag="--nic-gbps", kind="float", group="hardware", url_key="nic_gbps",
                   help="GB/s per direction of a NIC, replacing the inter-link's (default: the preset's)"),
    ScenarioOption(flag="--pcie-gen", kind="int", group="hardware",
                   help="PCIe node: generation of the GPUs' ports and the switches' uplinks, 3, 4 or 5 (default: "
                        "the cluster's; setting it makes the node a PCIe fabric of switches and sockets)"),
    ScenarioOption(flag="--gpus-per-switch", kind="int", group="hardware",
                   help="PCIe node: GPUs under each PCIe switch (1: each on its own root port)"),
    ScenarioOption(flag="--gpus-per-socket", kind="int", group="hardware", help="PCIe node: GPUs on each CPU socket"),
    ScenarioOption(flag="--p2p", kind="str", group="hardware", choices=P2P_MODES, url_key="p2p",
                   help="PCIe node: which GPU pairs go peer to peer, the rest through host memory: every pair "
                        "(on), pairs on one socket, pairs under one switch (NCCL's default), none (off, GeForce)"),
    ScenarioOption(flag="--socket-link", kind="str", group="hardware", choices=tuple(SOCKET_LINKS),
                   help="PCIe node: the link between its sockets, at the bandwidth NCCL's topology gives it"),
    ScenarioOption(flag="--staged-gbps", kind="float", group="hardware",
                   help="PCIe node: GB/s of one copy staged through host memory (default 70% of the x16 link, "
                        "from a published P2P=Disabled measurement)"),
    ScenarioOption(flag="--kernel", kind="str", group="hardware", default="default",
                   help="attention kernel whose published throughput and structure time each block (the block "
                        "model): fa2, fa3, cudnn (where the preset has its table; default: the preset's first) or "
                        "flat (every block at peak x efficiency)"),
    ScenarioOption(flag="--merge", kind="str", group="hardware", default=_gpu["merge"], choices=("fused", "unfused"),
                   help="how each block's partial result is merged: one fused kernel (default) or the chain of "
                        "elementwise kernels ring-flash-attention and torch's context_parallel run; a library's "
                        "--impl merges as it does"),
    ScenarioOption(flag="--tflops", kind="float", group="hardware", url_key="tflops",
                   help="achieved TFLOP/s per GPU for every block (flat model)"),
    ScenarioOption(flag="--efficiency", kind="float", group="hardware", url_key="eff",
                   help=f"fraction of the preset's peak achieved by every block (flat model; default "
                        f"{_gpu['efficiency']})"),
    ScenarioOption(flag="--overhead-us", kind="float", group="hardware", url_key="overhead_us",
                   help="flat model: per-block launch overhead; block model: the host-side floor of a call, µs"),
    ScenarioOption(flag="--link-gbps", kind="float", group="hardware", url_key="link_gbps",
                   help="link GB/s per direction"),
    ScenarioOption(flag="--link-latency-us", kind="float", group="hardware", url_key="latency_us",
                   help="link latency, µs (alpha-beta transfers: --comm-cost link unless given)"),
    ScenarioOption(flag="--comm-cost", kind="str", group="hardware", choices=("nccl", "link"),
                   help="how GPU transfers are timed: NCCL's own tuning model, its CTAs and copies slowing the "
                        "compute beside them (nccl, default), or alpha + bytes / bandwidth of the link (link, the "
                        "default when --link-latency-us is given)"),
    ScenarioOption(flag="--profile", kind="str", group="hardware",
                   help="calibrated hardware profile (from `ringsim calibrate`), replacing presets; a GPU profile "
                        "(from one GPU's compute grid) replaces the GPU alone and keeps the link flags"),
    # schedule
    ScenarioOption(flag="--scheme", kind="str", group="schedule", default=_s["scheme"], choices=scheme_names(),
                   url_key="scheme", help=f"sequence-parallel scheme (default {_s['scheme']})"),
    *SCHEME_OPTIONS,
    ScenarioOption(flag="--layout", kind="str", group="schedule", default=_s["layout"], choices=LAYOUTS,
                   url_key="layout", help=f"(default {_s['layout']})"),
    ScenarioOption(flag="--overlap", kind="bool", group="schedule", default=_s["overlap"], url_key="overlap",
                   help=f"double-buffered K/V transfers behind compute (default {_on(_s['overlap'])})"),
    ScenarioOption(flag="--sync", kind="str", group="schedule", default=_s["sync"], choices=SYNCS, url_key="sync",
                   help="with overlap: post and wait once per step as ring kernels do (default), "
                        "or forward each block as soon as a buffer is free"),
    ScenarioOption(flag="--granularity", kind="str", group="schedule", default=_s["granularity"],
                   choices=GRANULARITIES, url_key="granularity",
                   help=f"count exact unmasked pairs or whole tiles (default {_s['granularity']})"),
    ScenarioOption(flag="--tile", kind="int", group="schedule", default=_s["tile"], url_key="tile",
                   help=f"tile edge in tokens (default {_s['tile']})"),
    ScenarioOption(flag="--impl", kind="str", group="schedule", default=_s["impl"],
                   choices=tuple(implementations.LIBRARIES), url_key="impl",
                   help="whose implementation of the scheme runs: ideal (the fused kernel, default), te "
                        "(TransformerEngine / Megatron-Core), rfa (ring-flash-attention), torch (context_parallel), "
                        "usp (long-context-attention); its merge, host operations and streams "
                        "(docs/implementations.md)"),
)
"""simulate's scenario options, in the order `ringsim simulate --help` lists them."""

_BY_NAME = {o.name: o for o in SCENARIO_OPTIONS}


def scenario_option(name: str) -> ScenarioOption:
    """The option whose flag is `--name` (`kv-heads`)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise RingsimError(f"no scenario option --{name}; they are "
                           + ", ".join(o.flag for o in SCENARIO_OPTIONS)) from None
