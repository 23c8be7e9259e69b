"""The implementations of the schemes (sim.implementations): what a step launches against a
hand count from each library's code, the merge's cost against bytes over bandwidth, the
ideal one changing nothing, and the one-line refusals of a library that lacks a scheme or
layout."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim import implementations
from sim.cli.main import main
from sim.engine.play import simulate
from sim.engine.players import durations_s
from sim.errors import RingsimError
from sim.hardware.cluster import Hardware
from sim.hardware.kernel_model import Floors
from sim.scenario.config import Scenario, Workload
from sim.schemes import get as get_scheme
from sim.schemes import names as scheme_names
from sim.trace.metrics import compute_metrics

RING = scheme_names()[0]       # the default scheme, asked of the registry, not named


def _scenario(**fields) -> Scenario:
    w = Workload(seq=fields.pop("seq", 8 * 4096), pass_=fields.pop("pass_", "fwd"), causal=fields.pop("causal", True))
    return Scenario(workload=w, n_gpus=fields.pop("n_gpus", 8), **fields)


# --- the registry ---------------------------------------------------------------------------

def test_every_scheme_has_the_ideal_first_and_libraries_in_order():
    order = list(implementations.LIBRARIES)
    for scheme in scheme_names():
        libs = [i.library for i in implementations.of_scheme(scheme)]
        assert libs[0] == implementations.DEFAULT
        assert libs == sorted(libs, key=order.index)
        for impl in implementations.of_scheme(scheme):
            assert impl.scheme == scheme
            assert impl.library == implementations.DEFAULT or impl.source and impl.steps


def test_each_implementation_cites_a_commit():
    for scheme in scheme_names():
        for impl in implementations.of_scheme(scheme)[1:]:
            # a 40-hex commit or a released version with its git hash
            assert any(len(w.strip(":()")) == 40 and all(c in "0123456789abcdef" for c in w.strip(":()"))
                       for w in impl.source.split()), impl.source


def test_a_library_lacking_a_scheme_is_one_line():
    with pytest.raises(RingsimError) as e:
        implementations.get("ulysses", "rfa")
    assert "\n" not in str(e.value)
    assert str(e.value) == "rfa has no ulysses scheme; the ulysses scheme is implemented by ideal, te, usp"
    assert e.value.reason["clause"] == "refused.impl-scheme"
    with pytest.raises(RingsimError, match="unknown implementation 'flash'"):
        implementations.get(RING, "flash")


# --- what a step launches, against the library's code ---------------------------------------

def _sliced(schedule) -> np.ndarray:
    """Per compute, whether its queries are part of its rank's (narrower than its widest)."""
    comp = ~schedule.is_transfer
    widest = np.zeros(schedule.n_ranks, dtype=np.int64)
    np.maximum.at(widest, schedule.rank[comp], schedule.q_tokens[comp])
    return comp & (schedule.q_tokens < widest[schedule.rank])


@pytest.mark.parametrize("library", ["rfa", "te"])
def test_zigzag_forward_step_launches_match_the_library(library):
    """Hand count, rank r at step i of a causal zigzag forward on 8 GPUs:
    ring-flash-attention (zigzag_ring_flash_attn.py): one _flash_attn_forward call (q x k
    at i = 0, q x k[:, :half] at i <= r, q[:, half:] x k after), update_out_and_lse: 9
    elementwise kernels, plus 2 copies back on the slice (i > r); send_recv_kv: 2
    empty_like + 4 NCCL posts, comm.wait(): 4 waits.
    TransformerEngine (AttnFuncWithCPAndKVP2P): one call ("diagonal", "lower-triangle",
    "upper-triangle"), the log-sum-exp and the output corrections (2 fused kernels, in
    place on the second half), 1 empty_like + 2 posts + 2 waits + an event recorded and
    waited."""
    n = 8
    sc = _scenario(layout="zigzag", impl=library)
    schedule = get_scheme(RING).build_schedule(sc)
    impl = sc.implementation
    comp = np.flatnonzero(~schedule.is_transfer)
    sliced = _sliced(schedule)
    for op in comp.tolist():
        r, i = int(schedule.rank[op]), int(schedule.step[op])
        got = impl.launches("fwd", pairs=int(schedule.pairs[op]), sliced=bool(sliced[op]))
        if library == "rfa":
            want = (1, 9 + (2 if i > r else 0), 2 + 4 + 4)
        else:
            want = (1, 2, 1 + 2 + 2 + 2)
        assert (got.attention_calls, got.merge_kernels, got.host_ops) == want, (r, i)
    # the half-query blocks are exactly the steps after the rank, (N - 1 - r) of them on rank r
    per_rank = np.bincount(schedule.rank[sliced], minlength=n)
    assert per_rank.tolist() == [n - 1 - r for r in range(n)]


def test_a_skipped_block_launches_no_call_but_keeps_the_posts():
    impl = implementations.get(RING, "rfa")
    got = impl.launches("fwd", pairs=0)
    assert (got.attention_calls, got.merge_kernels, got.host_ops) == (0, 0, 10)
    bwd = impl.launches("bwd", pairs=5)
    assert (bwd.attention_calls, bwd.merge_kernels, bwd.host_ops) == (1, 3, 18)


# --- the merge's cost and the host floor, in closed form ------------------------------------

@pytest.mark.parametrize("library,per_elem,per_row", [("rfa", 36 + 2, 52), ("te", 3 * 2, 20), ("torch", 36 + 2, 52)])
def test_merge_costs_bytes_over_bandwidth(library, per_elem, per_row):
    """A block that merges costs, beyond the same block alone (nothing to merge), the merge's
    bytes at the GPU's streaming bandwidth and a gap per kernel (queued: the host hidden)."""
    impl = implementations.get(RING, library)
    hw = impl.played_on(Hardware())
    q = kv = 4096
    heads, d = 32, 128
    flops = 4.0 * d * q * kv * heads
    kw = dict(dtype="bf16", kind="fwd", mask="full", q_tokens=q, kv_tokens=kv, head_dim=d, kv_heads_per_head=0.25)
    merged = hw.compute_time_s(flops, **kw)
    alone = hw.compute_time_s(flops, alone=True, **kw)
    moved = q * heads * (d * per_elem + per_row)
    kernels = {"rfa": 9, "te": 2, "torch": 9}[library]
    gap = hw.gpu.floors.kernel_gap_us * 1e-6
    assert merged - alone == pytest.approx(moved / (hw.gpu.memory_bandwidth_gbps * 1e9) + kernels * gap, rel=1e-9)


@pytest.mark.parametrize("layout,pass_", [("zigzag", "fwdbwd"), ("striped", "fwd"), ("contiguous", "bwd")])
def test_each_rank_opens_its_output_once_at_its_first_forward_block(layout, pass_):
    """The engine tells the hardware which block opens each rank's forward output: one per rank
    and forward pass, the first the rank computes (step 0, its own K/V: all its queries)."""
    from sim.engine.players import _call_order
    from sim.engine.schedule import EMPTY, KINDS

    sc = _scenario(layout=layout, pass_=pass_, impl="rfa")
    schedule = get_scheme(RING).build_schedule(sc)
    comp = schedule.compute_ids
    comp = comp[schedule.mask[comp] != EMPTY]
    _, _, opens = _call_order(schedule, comp)
    forward = comp[schedule.kind[comp] == KINDS.index("fwd")]
    if pass_ == "bwd":
        assert not opens.any()
        return
    assert sorted(schedule.rank[opens].tolist()) == list(range(sc.n_gpus))
    widest = np.zeros(sc.n_gpus)
    np.maximum.at(widest, schedule.rank[forward], schedule.q_tokens[forward])
    for op in np.flatnonzero(opens):
        assert schedule.kind[op] == KINDS.index("fwd") and schedule.step[op] == 0
        assert op == forward[schedule.rank[forward] == schedule.rank[op]].min()
        assert schedule.q_tokens[op] == widest[schedule.rank[op]]


def test_an_isolated_block_pays_the_steps_host_operations_in_front():
    impl = implementations.get(RING, "rfa")
    hw = impl.played_on(Hardware())
    f = Floors()
    kw = dict(dtype="bf16", kind="fwd", mask="full", q_tokens=4096, kv_tokens=4096, head_dim=128,
              kv_heads_per_head=0.25)
    flops = 4.0 * 128 * 4096 * 4096 * 32
    host_s = (f.fwd_host_us + 10 * f.op_host_us + 9 * f.op_host_us) * 1e-6
    assert hw.compute_time_s(flops, isolated=True, **kw) - hw.compute_time_s(flops, **kw) == pytest.approx(host_s)


# --- the ideal implementation changes nothing -----------------------------------------------

@pytest.mark.parametrize("layout,pass_", [("zigzag", "fwdbwd"), ("contiguous", "fwd"), ("striped", "bwd")])
def test_ideal_is_todays_default(layout, pass_):
    base = _scenario(layout=layout, pass_=pass_)
    ideal = _scenario(layout=layout, pass_=pass_, impl="ideal")
    assert base == ideal
    assert ideal.implementation.played_on(ideal.hardware) is ideal.hardware
    assert ideal.implementation.played(ideal) is ideal
    a, b = simulate(base), simulate(ideal)
    assert "impl" not in b.config
    for name in ("start_s", "end_s", "rank", "kind"):
        assert np.array_equal(getattr(a.columns, name), getattr(b.columns, name))


def test_a_library_plays_its_merge_and_forwarding():
    sc = _scenario(layout="zigzag", impl="te")
    played = sc.implementation.played(sc)
    assert played.sync == "buffered"
    assert sc.implementation.played_on(sc.hardware).gpu.merge == "te"
    trace = simulate(sc)
    assert trace.config["impl"] == "te" and trace.config["sync"] == "buffered"
    # the unfused merge moves more than TransformerEngine's: ring-flash-attention's ring is slower
    rfa = compute_metrics(simulate(_scenario(layout="zigzag", impl="rfa"))).makespan_s
    assert rfa > compute_metrics(trace).makespan_s


# --- the command line ----------------------------------------------------------------------

def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_refuses_a_scheme_the_library_lacks_in_one_line(capsys):
    code, _, err = _run(capsys, "simulate", "--gpus", "8", "--seq", "32k", "--scheme", "ulysses", "--impl", "rfa")
    assert code == 2
    assert err.count("\n") == 1 and "rfa has no ulysses scheme" in err


def test_cli_refuses_a_layout_the_library_lacks(capsys):
    code, _, err = _run(capsys, "simulate", "--gpus", "8", "--seq", "32k", "--layout", "striped", "--impl", "te")
    assert code == 2 and "no striped layout" in err


def test_compare_impls_sets_them_side_by_side(capsys):
    code, out, _ = _run(capsys, "compare", "--impls", "all", "--gpus", "8", "--seq", "32k", "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert [r["impl"] for r in rows] == [i.library for i in implementations.of_scheme(RING)]
    assert all("makespan_s" in r for r in rows)
    code, out, _ = _run(capsys, "compare", "--impls", "all", "--gpus", "8", "--seq", "32k", "--layout", "striped",
                        "--json")
    refused = {r["impl"] for r in json.loads(out)["rows"] if "refused" in r}
    assert refused == {"te", "torch"}


def test_simulate_names_the_implementation(capsys):
    code, out, _ = _run(capsys, "simulate", "--gpus", "8", "--seq", "32k", "--impl", "rfa")
    assert code == 0 and "as rfa runs it" in out.splitlines()[0]


# hand counts of the host-side operations of one step, read off each library's code:
# (allocations, NCCL posts, waits, other) per pass
HAND_HOST_OPS = {
    # RingComm.send_recv_kv: 2 empty_like, batch_isend_irecv of K and V (2 sends + 2
    # receives), comm.wait(): 4 req.wait(); backward adds d_kv_comm's 4 posts and 4 waits
    ("ring", "rfa"): {"fwd": 2 + 4 + 4, "bwd": 2 + 4 + 4 + 4 + 4},
    ("ring", "usp"): {"fwd": 2 + 4 + 4, "bwd": 2 + 4 + 4 + 4 + 4},
    # flash_attn_p2p_communicate: 1 empty_like, 1 send + 1 receive, 2 req.wait(), an event
    # recorded and waited between the two streams; backward: K/V and dK/dV posts and waits
    ("ring", "te"): {"fwd": 1 + 2 + 2 + 2, "bwd": 1 + 2 + 2 + 2 + 2},
    # _AllToAllRotater: contiguous + torch.cat, all_to_all_single (a send and a receive),
    # wait_tensor; backward: the same for dK/dV
    ("ring", "torch"): {"fwd": 2 + 2 + 1, "bwd": 2 * (2 + 2 + 1)},
    # llama3_flash_attn_varlen_forward per group: 2 contiguous, 2 all_gather, 2 handle waits
    ("allgather", "rfa"): {"fwd": 2 + 2 + 2, "bwd": 2 + 2 + 2 + 1 + 2},
    # SeqAllToAll4D for Q, K, V and the output: contiguous, all_to_all_single, contiguous
    ("ulysses", "usp"): {"fwd": 4 * 3, "bwd": 4 * 3},
}


@pytest.mark.parametrize("scheme, library", sorted(HAND_HOST_OPS))
def test_host_operations_per_step_match_a_hand_count(scheme, library):
    impl = implementations.get(scheme, library)
    for kind, want in HAND_HOST_OPS[scheme, library].items():
        assert impl.launches(kind, pairs=1).host_ops == want, kind


def test_the_library_s_merge_kernels_per_block():
    """ring-flash-attention's _update_out_and_lse: to(fp32), out - block_out, block_lse - lse,
    sigmoid, *, -, and for the statistics -, logsigmoid, -: 9; torch's _SDPAMerger runs the
    same; TransformerEngine: the lse and the output corrections, one fused kernel each."""
    got = {lib: implementations.get(RING, lib).launches("fwd", pairs=1).merge_kernels
           for lib in ("ideal", "te", "rfa", "torch", "usp")}
    assert got == {"ideal": 1, "te": 2, "rfa": 9, "torch": 9, "usp": 9}


def test_plan_and_step_take_the_implementation(capsys):
    code, out, _ = _run(capsys, "plan", "--model", "llama3-8b", "--seq", "64k", "--nodes", "1", "--impl", "rfa",
                        "--json")
    assert code == 0
    d = json.loads(out)
    assert all("--impl rfa" in c["command"] for c in d["candidates"])
    assert any("rfa has no ulysses scheme" in x["reason"] for x in d["not_possible"])
    times = {}
    for lib in ("ideal", "rfa"):
        code, out, _ = _run(capsys, "step", "--model", "llama3-8b", "--seq", "128k", "--global-batch", "1M",
                            "--cp", "8", "--impl", lib, "--json")
        assert code == 0
        times[lib] = json.loads(out)["step_s"]
    assert times["rfa"] > times["ideal"]          # the unfused merge: a slower forward


def test_the_varlen_zigzag_makes_every_call_on_an_idle_gpu():
    """ring-flash-attention's varlen zigzag indexes its halves with a CPU mask (a copy to the
    GPU that waits for the stream): with several documents every block pays its host-side
    time in front; with one document (slices, no mask) or another layout, only the first."""
    impl = implementations.get(RING, "rfa")
    docs = _scenario(layout="zigzag", impl="rfa")
    assert not impl.host_waits(docs)
    packed = Scenario(workload=Workload(seq=8 * 4096, docs="4096,12288"), n_gpus=8, layout="zigzag", impl="rfa")
    assert impl.host_waits(packed)
    assert not implementations.get(RING, "te").host_waits(packed.with_(impl="te"))
    # played: every block pays its host-side time in front, host + GPU, where a queued one
    # pays the larger of the two
    schedule = get_scheme(RING).build_schedule(packed)
    hw = impl.played_on(packed.hardware)
    waits = durations_s(schedule, hw, packed.workload, host_waits=True)
    queued = durations_s(schedule, hw, packed.workload)
    comp = schedule.compute_ids[schedule.pairs[schedule.compute_ids] > 0]
    assert (waits[comp] >= queued[comp]).all() and (waits[comp] > queued[comp]).sum() >= len(comp) - 8
