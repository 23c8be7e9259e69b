"""gloo's point-to-point protocol in the SimPy player (sim.engine.players.times_simpy): a send
posted after its receiver posted the receive is written by the posting thread, so the
rank's compute waits for it. Timed by hand on a ring whose causal mask makes one rank
post late."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from sim.engine.play import simulate
from sim.hardware.model import HardwareModel
from sim.hardware.profile import profile_from_dict
from sim.trace.format import COMPUTE, KIND_NAMES, RECV, SEND, WAIT
from tests.sim.reference import scenario

D, F, T = 3.0, 5.0, 1.0
"""Seconds of a diagonal block, a full block and a K/V hop."""


class Timed(HardwareModel):
    """A diagonal block takes D, a full one F, a hop T; `inline_send_after_s` as given."""

    def __init__(self, inline_after_s=None):
        self.inline_send_after_s = inline_after_s

    def compute_time_s(self, flops, *, mask, **_):
        return {"diagonal": D, "full": F}[mask]

    def transfer_time_s(self, nbytes, src, dst):
        return T

    def rate_flops(self, dtype, head_dim=None):
        return 1.0

    def describe(self):
        return {"kind": "test"}


def spans(trace, stream, rank, step):
    c = trace.columns
    i = np.flatnonzero((c.stream == stream) & (c.rank == rank) & (c.step == step))
    return sorted((KIND_NAMES[c.kind[j]], float(c.start_s[j]), float(c.end_s[j])) for j in i)


def ring4(hw):
    # contiguous causal on 4 ranks: rank r computes at step k the block of rank (r - k) mod 4,
    # diagonal at step 0, full where that rank is below r, skipped (empty) above it
    return simulate(scenario(n=4, seq=16, layout="contiguous", causal=True, heads=1, kv_heads=1,
                             head_dim=4, dtype="fp32"), hw, player="simpy")


def test_a_send_posted_after_its_receive_holds_the_posting_ranks_compute_until_it_ends():
    # By hand. Steps 0 and 1: every rank posts at once (0, then D; ties hold nothing).
    # Step 2: rank 0 (skipped block at step 1) posts at D + T, once its hops of step 1
    # are in; ranks 1-3 post at D + F. Rank 3 sends to rank 0, which posted its receive
    # at D + T, so rank 3 writes the hop itself: it runs D + F .. D + F + T and rank 3's
    # full block of step 2 starts at its end. Rank 2 sends to rank 3, whose receive is
    # posted only as its compute starts (after its sends, as batch_isend_irecv posts
    # them), so that hop runs D + F + T .. D + F + 2T, behind rank 2's compute. Rank 3's
    # step 3 (full) follows its step 2: the run ends at D + 3F + T, one hop later than
    # without the protocol (D + 3F).
    t = ring4(Timed(inline_after_s=1e-6))
    assert spans(t, COMPUTE, 3, 2) == [("fwd", D + F + T, D + 2 * F + T)]
    assert spans(t, SEND, 3, 2) == [("kv", D + F, D + F + T)]
    assert spans(t, SEND, 2, 2) == [("kv", D + F + T, D + F + 2 * T)]
    assert spans(t, RECV, 3, 2) == [("kv", D + F + T, D + F + 2 * T)]
    assert spans(t, COMPUTE, 2, 2) == [("fwd", D + F, D + 2 * F)]     # rank 2 posted first: no hold
    assert t.makespan_s == pytest.approx(D + 3 * F + T)
    # the held compute waited on its own send: exposed K/V communication, not idle
    assert spans(t, WAIT, 3, 2) == [("kv", D + F, D + F + T)]
    assert t.meta["inline_send_after_s"] == 1e-6


def test_without_the_protocol_every_compute_starts_when_its_dependencies_are_done():
    t = ring4(Timed())
    assert spans(t, COMPUTE, 3, 2) == [("fwd", D + F, D + 2 * F)]
    assert spans(t, SEND, 2, 2) == [("kv", D + F, D + F + T)]
    assert t.makespan_s == pytest.approx(D + 3 * F)
    assert "inline_send_after_s" not in t.meta


def test_a_receive_posted_less_than_the_notice_before_the_send_does_not_hold_it():
    # rank 0 posted its receive F - T before rank 3's send: a notice longer than that has
    # not reached rank 3, whose send then goes to gloo's own thread
    assert ring4(Timed(inline_after_s=F - T + 0.5)).makespan_s == pytest.approx(D + 3 * F)
    assert ring4(Timed(inline_after_s=F - T - 0.5)).makespan_s == pytest.approx(D + 3 * F + T)


def test_ranks_that_post_at_the_same_instant_do_not_hold_each_other_even_with_no_latency():
    # every rank posts at 0 and at D: whichever the event loop takes first, none was
    # first; rank 0's lead at step 2 (F - T) still holds rank 3
    t = ring4(Timed(inline_after_s=0.0))
    assert [spans(t, COMPUTE, r, 0) for r in range(4)] == [[("fwd", 0.0, D)]] * 4
    assert [spans(t, SEND, r, 0) for r in range(4)] == [[("kv", 0.0, T)]] * 4
    assert t.makespan_s == pytest.approx(D + 3 * F + T)


def backward(n, hw):
    # contiguous causal backward on n ranks, as ring4; K/V and dK/dV hops each take T
    return simulate(scenario(n=n, seq=4 * n, layout="contiguous", causal=True, heads=1, kv_heads=1,
                             head_dim=4, dtype="fp32", pass_="bwd"), hw, player="simpy")


def test_a_dkv_send_posted_after_its_receive_holds_the_next_compute_until_it_ends():
    # By hand, 3 ranks. Step 0: every rank computes D and posts its dK/dV hop at D (ties).
    # Step 1: rank 0's block is skipped, so it posts its dK/dV hop (and receive) at D + T,
    # once the hops of step 0 are in; ranks 1 and 2 post at D + F. Rank 2 sends to rank 0,
    # whose receive is posted: rank 2 writes the hop itself, D + F .. D + F + T, and its
    # full block of step 2 starts at its end. Rank 1 sends to rank 2, whose receive comes
    # after that send (D + F + T): the hop runs D + F + T .. D + F + 2T. Step 2: rank 2
    # posts at D + 2F + T, after rank 0 (D + F + T): held again, its hop runs
    # D + 2F + T .. D + 2F + 2T, and rank 1's hop into rank 2 only after it: the run ends
    # at D + 2F + 3T, against D + 2F + T without the protocol.
    t = backward(3, Timed(inline_after_s=1e-6))
    assert spans(t, SEND, 2, 1) == [("dkv", D + F, D + F + T), ("kv", D + T, D + 2 * T)]
    assert spans(t, SEND, 1, 1) == [("dkv", D + F + T, D + F + 2 * T), ("kv", D + T, D + 2 * T)]
    assert spans(t, COMPUTE, 2, 2) == [("bwd", D + F + T, D + 2 * F + T)]
    # the held compute waited on the dK/dV hop its rank's post wrote: exposed, not idle
    assert spans(t, WAIT, 2, 2) == [("dkv", D + F, D + F + T)]
    assert spans(t, SEND, 2, 2) == [("dkv", D + 2 * F + T, D + 2 * F + 2 * T)]
    assert spans(t, SEND, 1, 2) == [("dkv", D + 2 * F + 2 * T, D + 2 * F + 3 * T)]
    assert t.makespan_s == pytest.approx(D + 2 * F + 3 * T)
    plain = backward(3, Timed())
    assert spans(plain, COMPUTE, 2, 2) == [("bwd", D + F, D + 2 * F)]
    assert plain.makespan_s == pytest.approx(D + 2 * F + T)


def test_a_compute_held_by_both_its_posts_waits_on_each_send_in_turn():
    # 4 ranks, rank 3 at step 2: its dK/dV post of step 1 comes at D + F, after rank 0's
    # (D + T): it writes the hop, D + F .. D + F + T. Its K/V post of step 2 follows, after
    # rank 0's (D + 2T: rank 0's skipped block of step 2 came up when its K/V hop of step 1
    # was in): it writes that hop too, D + F + T .. D + F + 2T, and computes after it
    t = backward(4, Timed(inline_after_s=1e-6))
    assert spans(t, COMPUTE, 3, 2) == [("bwd", D + F + 2 * T, D + 2 * F + 2 * T)]
    assert spans(t, WAIT, 3, 2) == [("dkv", D + F, D + F + T), ("kv", D + F + T, D + F + 2 * T)]


def test_a_receive_is_posted_only_after_the_send_of_its_batch_returns():
    # 2 ranks: at the last step rank 0 (skipped block) posts at D + T, rank 1 at D + F.
    # Rank 1 writes its hop to rank 0 itself (D + F .. D + F + T) and posts its receive
    # only then: rank 0's hop runs D + F + T .. D + F + 2T (D + F .. D + F + T without)
    t = backward(2, Timed(inline_after_s=1e-6))
    assert spans(t, SEND, 1, 1) == [("dkv", D + F, D + F + T)]
    assert spans(t, SEND, 0, 1) == [("dkv", D + F + T, D + F + 2 * T)]
    assert t.makespan_s == pytest.approx(D + F + 2 * T)
    assert backward(2, Timed()).makespan_s == pytest.approx(D + F + T)


def test_a_gloo_profile_writes_sends_after_its_links_latency_and_an_nccl_one_never():
    d = json.loads(Path("bench/results/calibration/cpu-2core/profile.json").read_text())
    d["measured_on"]["backend"] = "gloo"
    assert profile_from_dict(d).inline_send_after_s == d["link"]["latency_s"]
    nccl = copy.deepcopy(d)
    nccl["measured_on"]["backend"] = "nccl"
    assert profile_from_dict(nccl).inline_send_after_s is None
