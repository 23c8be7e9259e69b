"""sim.scenario.schema: the argparse flags, the sweep specs' options and the dashboard's controls
all say what the schema says, and `ringsim simulate --help` reads as the reference
below, every flag written out with argparse, says it should."""

import argparse

import pytest

from dashboard.state import CONTROLS
from sim.cli.main import main
from sim.cli.options import LAYOUT_OPTIONS, Parser, add_hardware_args, add_scenario_args, hardware_from_args, simulate_parser
from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.hardware.pcie import P2P_MODES, SOCKET_LINKS
from sim.hardware.presets import CLUSTER_PRESETS, GPU_PRESETS, LINK_PRESETS
from sim.planning.spec import column, value_kind
from sim.scenario.config import LAYOUTS, PASSES, Workload
from sim.scenario.option import ScenarioOption
from sim.scenario.resolve import CUSTOM
from sim.scenario.schema import SCENARIO_OPTIONS, SCHEME_OPTIONS, scenario_option
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.schemes.hybrid import PLACEMENTS
from sim.units import tokens

# --- the reference: every flag written out with argparse ------------------------------------

def reference_scenario_args(p: argparse.ArgumentParser, *, with_layout: bool = True) -> None:
    d = Workload()
    g = p.add_argument_group("workload")
    g.add_argument("--gpus", type=int, default=8, help="GPUs in the group (default 8)")
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
    reference_hardware_args(p)
    s = p.add_argument_group("schedule")
    s.add_argument("--scheme", choices=scheme_names(), default="ring",
                   help="sequence-parallel scheme (default ring)")
    # the schemes' own, scheme by scheme in the registry's order (allgather, hybrid, ulysses)
    s.add_argument("--head-groups", type=int, default=1,
                   help="allgather: gather and attend K/V head group by head group, each gather behind "
                        "the previous group's compute (default 1: one gather, exposed)")
    s.add_argument("--ulysses-degree", type=int, default=None,
                   help="ulysses, hybrid: GPUs per all-to-all group (ulysses: all of them; hybrid default: "
                        "the largest that fits the heads and a node, leaving rings of two or more)")
    s.add_argument("--ring-degree", type=int, default=None,
                   help="hybrid: GPUs per ring (ulysses degree x ring degree = --gpus)")
    s.add_argument("--placement", choices=PLACEMENTS, default="ulysses-inner",
                   help="hybrid: all-to-all groups on consecutive ranks, inside a node (ulysses-inner, "
                        "default, as TransformerEngine's a2a+p2p) or the rings (ring-inner)")
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
    s.add_argument("--impl", choices=["ideal", "te", "rfa", "torch", "usp"], default="ideal",
                   help="whose implementation of the scheme runs: ideal (the fused kernel, default), te "
                        "(TransformerEngine / Megatron-Core), rfa (ring-flash-attention), torch (context_parallel), "
                        "usp (long-context-attention); its merge, host operations and streams "
                        "(docs/implementations.md)")


def reference_hardware_args(p: argparse.ArgumentParser) -> None:
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
                        "elementwise kernels ring-flash-attention and torch's context_parallel run; a library's "
                        "--impl merges as it does")
    h.add_argument("--tflops", type=float, default=None,
                   help="achieved TFLOP/s per GPU for every block (flat model)")
    h.add_argument("--efficiency", type=float, default=None,
                   help="fraction of the preset's peak achieved by every block (flat model; default 0.5)")
    h.add_argument("--overhead-us", type=float, default=None,
                   help="flat model: per-block launch overhead; block model: the host-side floor of a call, µs")
    h.add_argument("--link-gbps", type=float, default=None, help="link GB/s per direction")
    h.add_argument("--link-latency-us", type=float, default=None,
                   help="link latency, µs (alpha-beta transfers: --comm-cost link unless given)")
    h.add_argument("--comm-cost", default=None, choices=("nccl", "link"),
                   help="how GPU transfers are timed: NCCL's own tuning model, its CTAs and copies slowing the "
                        "compute beside them (nccl, default), or alpha + bytes / bandwidth of the link (link, the "
                        "default when --link-latency-us is given)")
    h.add_argument("--profile", default=None,
                   help="calibrated hardware profile (from `ringsim calibrate`), replacing presets; a GPU profile "
                        "(from one GPU's compute grid) replaces the GPU alone and keeps the link flags")


def reference_parser(*, with_layout: bool = True, hardware_only: bool = False) -> argparse.ArgumentParser:
    p = Parser(prog="ringsim simulate", add_help=False)
    (reference_hardware_args if hardware_only else lambda q: reference_scenario_args(q, with_layout=with_layout))(p)
    return p


def schema_parser(*, with_layout: bool = True, hardware_only: bool = False) -> argparse.ArgumentParser:
    p = Parser(prog="ringsim simulate", add_help=False)
    (add_hardware_args if hardware_only else lambda q: add_scenario_args(q, with_layout=with_layout))(p)
    return p


@pytest.mark.parametrize("columns", ["80", "250"])
@pytest.mark.parametrize("kind", [{}, {"with_layout": False}, {"hardware_only": True}],
                         ids=["simulate", "compare", "hardware"])
def test_help_reads_as_the_hand_written_flags(monkeypatch, columns, kind):
    monkeypatch.setenv("COLUMNS", columns)
    assert schema_parser(**kind).format_help() == reference_parser(**kind).format_help()


def _sections(text: str) -> list[str]:
    """The workload, hardware and schedule sections of a help text."""
    blocks = text.split("\n\n")
    return [b for b in blocks if b.split(":")[0] in ("workload", "hardware", "schedule")]


def test_simulate_help_has_the_hand_written_sections(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--help"])
    assert e.value.code == 0
    shown = capsys.readouterr().out
    expected = _sections(reference_parser().format_help())
    assert [s.split(":")[0] for s in expected] == ["workload", "hardware", "schedule"]
    assert _sections(shown) == expected


def test_a_changed_help_text_is_seen(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    p = Parser(prog="ringsim simulate", add_help=False)
    reference_scenario_args(p)
    p._option_string_actions["--tile"].help = "tile edge in tokens (default 64)"
    assert p.format_help() != schema_parser().format_help()


# --- the parser, the spec's options and the schema agree ------------------------------------

def test_the_parser_has_the_schema_s_flags_defaults_and_choices():
    actions = [a for a in simulate_parser()._actions if a.option_strings]
    assert [a.option_strings[0] for a in actions] == [o.flag for o in SCENARIO_OPTIONS]
    types = {"int": int, "float": float, "tokens": tokens, "str": None}
    for a, o in zip(actions, SCENARIO_OPTIONS):
        assert a.dest == o.dest
        assert a.default == o.default
        assert (tuple(a.choices) if a.choices is not None else None) == o.choices
        assert a.metavar == o.metavar
        if o.kind == "bool":
            assert isinstance(a, argparse.BooleanOptionalAction)
            assert a.option_strings == [o.flag, "--no-" + o.name]
        else:
            assert a.type is types[o.kind]


def test_compare_leaves_out_the_layout_and_overlap():
    p = Parser(add_help=False)
    add_scenario_args(p, with_layout=False)
    dests = [a.dest for a in p._actions]
    assert dests == [o.dest for o in SCENARIO_OPTIONS if o.dest not in LAYOUT_OPTIONS]
    assert set(LAYOUT_OPTIONS) < {o.dest for o in SCENARIO_OPTIONS}


def test_parsing_nothing_gives_the_schema_s_defaults():
    a = simulate_parser().parse_args([])
    assert vars(a) == {o.dest: o.default for o in SCENARIO_OPTIONS}


def test_a_results_table_s_columns_are_the_schema_s_options():
    from sim.planning.results import columns

    names = [name for name, _ in columns()]
    assert names[1:1 + len(SCENARIO_OPTIONS)] == [column(o) for o in SCENARIO_OPTIONS]
    assert {value_kind(o) for o in SCENARIO_OPTIONS} <= {"int", "float", "str", "bool"}
    assert column(scenario_option("pass")) == "pass" and column(scenario_option("efficiency")) == "gpu_efficiency"


def test_each_scheme_s_options_set_its_settings_and_default_to_them():
    by_dest = {o.dest: o for o in SCHEME_OPTIONS}
    for name in scheme_names():
        scheme = get_scheme(name)
        defaults = scheme.settings_type()
        assert {o.dest for o in scheme.options} <= set(vars(defaults))
        for field_name, value in vars(defaults).items():
            # every field has its option (its own or another scheme's), defaulting to it
            assert by_dest[field_name].default == value and by_dest[field_name].group == "schedule"
        assert set(scheme.options) <= set(SCHEME_OPTIONS)
    # collected once each, after --scheme, before the common schedule options
    flags = [o.flag for o in SCENARIO_OPTIONS]
    assert flags[flags.index("--scheme") + 1:flags.index("--layout")] == [o.flag for o in SCHEME_OPTIONS]
    assert len(set(flags)) == len(flags)


def test_defaults_are_the_configuration_s():
    w = Workload()
    for dest in ("seq", "batch", "heads", "kv_heads", "head_dim", "dtype", "causal", "pass_", "docs", "seed",
                 "window"):
        assert next(o for o in SCENARIO_OPTIONS if o.dest == dest).default == getattr(w, dest)
    # what a hardware flag falls back to is the default hardware's
    h = hardware_from_args(simulate_parser().parse_args([]))
    assert h == Hardware()
    assert scenario_option("gpu").fallback == Hardware().gpu.name
    assert scenario_option("link").fallback == Hardware().link.name
    assert scenario_option("gpus-per-node").fallback == Hardware().gpus_per_node


def test_a_bad_option_fails_where_it_is_made():
    with pytest.raises(RingsimError, match="kind of --x"):
        ScenarioOption(flag="--x", kind="complex", group="workload")
    with pytest.raises(RingsimError, match="group of --x"):
        ScenarioOption(flag="--x", kind="int", group="network")
    with pytest.raises(RingsimError, match="not one of its choices"):
        ScenarioOption(flag="--x", kind="str", group="workload", default="c", choices=("a", "b"))
    with pytest.raises(RingsimError, match="fallback"):
        ScenarioOption(flag="--x", kind="int", group="hardware", default=1, fallback=2)
    with pytest.raises(RingsimError, match="start with --"):
        ScenarioOption(flag="x", kind="int", group="workload")
    assert ScenarioOption(flag="--x-y", kind="int", group="workload").dest == "x_y"
    with pytest.raises(RingsimError, match="no scenario option --nope"):
        scenario_option("nope")


# --- the dashboard's controls ----------------------------------------------------------------

PUBLISHED = {
    "seq": ("seq", 131072), "batch": ("batch", 1), "heads": ("heads", 32), "kv-heads": ("kv_heads", 8),
    "head-dim": ("head_dim", 128), "dtype": ("dtype", "bf16"), "causal": ("causal", True), "pass": ("pass", "fwd"),
    "docs": ("docs", None), "seed": ("seed", 0), "window": ("window", None), "gpu": ("gpu", "H100-SXM"),
    "tflops": ("tflops", None), "efficiency": ("eff", None), "overhead-us": ("overhead_us", None),
    "link": ("link", "nvlink4"), "link-gbps": ("link_gbps", None), "link-latency-us": ("latency_us", None),
    "inter-link": ("inter_link", "same"), "gpus-per-node": ("gpus_per_node", 8),
    "nics-per-node": ("nics_per_node", None), "nic-gbps": ("nic_gbps", None), "cluster": ("cluster", "none"),
    "p2p": ("p2p", "preset"), "gpus": ("gpus", 8), "layout": ("layout", "zigzag"), "overlap": ("overlap", True),
    "sync": ("sync", "step"), "scheme": ("scheme", "ring"), "ulysses-degree": ("ulysses_degree", None),
    "ring-degree": ("ring_degree", None), "placement": ("placement", "ulysses-inner"),
    "head-groups": ("head_groups", 1), "granularity": ("granularity", "exact"), "tile": ("tile", 128),
    "impl": ("impl", "ideal"),
}
"""Each control's URL key and default as the page has published them: a link leaves a
default out, so a changed key or default changes what old links show."""


def test_controls_keep_their_published_keys_and_defaults():
    assert {c.id: (c.url_key, c.default) for c in CONTROLS} == PUBLISHED


def test_every_control_is_a_simulate_option_with_the_schema_s_key():
    assert {c.id for c in CONTROLS} == {o.name for o in SCENARIO_OPTIONS if o.url_key is not None}
    for c in CONTROLS:
        assert c.url_key == scenario_option(c.id).url_key


KINDS = {"bool": {"bool"}, "int": {"int", "optint"}, "tokens": {"int", "optint"}, "float": {"float"},
         "str": {"choice", "text"}}


@pytest.mark.parametrize("control", CONTROLS, ids=lambda c: c.id)
def test_a_control_agrees_with_its_option(control):
    o = scenario_option(control.id)
    assert control.kind in KINDS[o.kind]
    stands_for = o.default if o.fallback is None else o.fallback
    if stands_for is not None:
        assert control.default == stands_for
        assert control.kind != "optint"
    elif control.kind == "choice":
        # the page's word for "not given" (the cluster's or the preset's value), first of its choices
        assert control.default == control.choices[0] and control.default not in (o.choices or ())
    else:
        assert control.default is None
    if o.choices is not None:
        own = tuple(x for x in control.choices if x != control.default or x in o.choices)
        assert own == o.choices
    elif control.kind == "choice":
        assert control.default in control.choices


def test_the_page_offers_presets_where_the_flag_takes_a_name():
    by_id = {c.id: c for c in CONTROLS}
    assert by_id["gpu"].choices == (*GPU_PRESETS, CUSTOM)
    assert by_id["link"].choices == (*LINK_PRESETS, CUSTOM)
    assert by_id["inter-link"].choices == ("same", *LINK_PRESETS)
    assert by_id["cluster"].choices == ("none", *CLUSTER_PRESETS)
    assert by_id["p2p"].choices == ("preset", *P2P_MODES)
