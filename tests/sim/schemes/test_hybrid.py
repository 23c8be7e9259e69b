"""Ulysses x ring (sim.schemes.hybrid) against closed forms and invariants written here:
bytes as the sum of its parts, where each part's flows go for each placement, every
pair once, the ring itself at a Ulysses degree of one."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.scenario.config import Scenario, Workload
from sim.scenario.resolve import settings_of
from sim.schemes.hybrid import HybridSettings
from sim.trace.metrics import compute_metrics
from tests.sim.reference import LAYOUTS, chunk_tokens, cluster, head_coverage


def hybrid(n=8, u=None, r=None, seq=1024, heads=8, kv_heads=2, head_dim=16, causal=True, pass_="fwd",
           hw=None, placement="ulysses-inner", **kw):
    w = Workload(seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim, causal=causal, pass_=pass_)
    return Scenario(workload=w, hardware=hw or cluster(gpus_per_node=4), n_gpus=n, scheme="hybrid",
                    settings=HybridSettings(ulysses_degree=u, ring_degree=r, placement=placement), **kw)


@pytest.mark.parametrize("u,r,kv_heads", [(2, 4, 2), (4, 2, 2), (4, 2, 8), (8, 1, 2), (1, 8, 2), (2, 2, 1)])
@pytest.mark.parametrize("pass_", ["fwd", "bwd"])
def test_bytes_each_gpu_sends_are_its_all_to_alls_and_its_ring(u, r, kv_heads, pass_):
    n, seq, heads, d, b = u * r, 64 * u * r, 8, 16, 2
    m = compute_metrics(simulate(hybrid(n=n, u=u, r=r, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=d,
                                        pass_=pass_)))
    h_kv = max(kv_heads, u)                 # K/V heads over the group, replicated when u > H_kv
    a2a = (u - 1) / u * (seq / n) * (2 * heads + 2 * h_kv) * d * b
    # the ring of r GPUs on H/u heads: (r-1) hops of its K/V shard of S/r tokens; backward
    # also r hops of fp32 dK/dV (the last returns them to their owner)
    kv_shard = (seq / r) * 2 * (h_kv / u) * d
    ring = (r - 1) * kv_shard * b + (r * kv_shard * 4 if pass_ == "bwd" and r > 1 else 0)
    assert m.bytes_sent == pytest.approx([a2a + ring] * n, rel=1e-12)


@pytest.mark.parametrize("placement", ["ulysses-inner", "ring-inner"])
def test_placement_keeps_one_part_inside_the_nodes(placement):
    """4 nodes of 4 GPUs, u = r = 4: ulysses-inner keeps the all-to-alls inside nodes and
    sends the ring across them; ring-inner the reverse."""
    trace = simulate(hybrid(n=16, u=4, r=4, seq=2048, placement=placement, hw=cluster(gpus_per_node=4)))
    def node(rank):
        return rank // 4

    for s in trace.spans:
        if s.stream == "send":
            inside = node(s.rank) == node(s.peer)
            assert inside == ((s.kind == "a2a") == (placement == "ulysses-inner"))


def test_the_default_degrees_fill_a_node_with_the_all_to_all():
    sc = hybrid(n=32, seq=32 * 64, hw=cluster(gpus_per_node=8))
    assert (sc.describe()["ulysses_degree"], sc.describe()["ring_degree"]) == (8, 4)
    one_node = hybrid(n=8, seq=8 * 64, hw=cluster(gpus_per_node=8))
    assert (one_node.describe()["ulysses_degree"], one_node.describe()["ring_degree"]) == (4, 2)


@pytest.mark.parametrize("pass_", ["fwd", "bwd", "fwdbwd"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_at_a_ulysses_degree_of_one_it_is_the_ring(pass_, layout):
    hw = cluster(gpus_per_node=2)
    w = Workload(seq=512, heads=8, kv_heads=2, head_dim=16, pass_=pass_)
    ring = simulate(Scenario(workload=w, hardware=hw, n_gpus=4, layout=layout))
    one = simulate(Scenario(workload=w, hardware=hw, n_gpus=4, layout=layout, scheme="hybrid",
                            settings=HybridSettings(ulysses_degree=1)))
    assert one.spans == ring.spans


@settings(max_examples=30, deadline=None)
@given(ur=st.sampled_from([(2, 2), (2, 3), (4, 2), (1, 3), (3, 1)]), layout=st.sampled_from(LAYOUTS),
       causal=st.booleans(), pass_=st.sampled_from(["fwd", "bwd", "fwdbwd"]),
       placement=st.sampled_from(["ulysses-inner", "ring-inner"]), overlap=st.booleans())
def test_every_unmasked_pair_is_computed_once_per_head_and_pass(ur, layout, causal, pass_, placement, overlap):
    u, r = ur
    n, heads, d = u * r, 12, 4
    seq = 4 * n * 2
    sc = hybrid(n=n, u=u, r=r, seq=seq, heads=heads, kv_heads=heads, head_dim=d, causal=causal, pass_=pass_,
                layout=layout, placement=placement, overlap=overlap, hw=cluster(gpus_per_node=2))
    trace = simulate(sc)
    cover = head_coverage(trace, chunk_tokens("hybrid", seq, n, ring=r, layout=layout), seq, causal, d)
    allowed = np.tril(np.ones((seq, seq), dtype=np.int64)) if causal else np.ones((seq, seq), dtype=np.int64)
    assert set(cover) == ({"fwd", "bwd"} if pass_ == "fwdbwd" else {pass_})
    for grid in cover.values():
        assert (grid == heads * allowed).all()


@pytest.mark.parametrize("kw,match", [
    (dict(n=8, u=4, r=4), "4 x ring degree 4 = 16, not the 8 GPUs"),
    (dict(n=8, u=3), "does not divide the 8 GPUs"),
    (dict(n=12, u=3, heads=8), "does not divide the 8 query heads"),
    (dict(n=8, u=4, heads=12, kv_heads=6, seq=96 * 8), "one must divide the other"),
    (dict(n=8, u=2, seq=1000), "does not divide into"),
    (dict(n=8, u=0), "ulysses_degree must be a positive integer"),
    (dict(n=8, placement="inside"), "placement must be one of ulysses-inner, ring-inner"),
])
def test_configurations_the_hybrid_cannot_run_are_refused_in_one_line(kw, match):
    with pytest.raises(RingsimError, match=match):
        hybrid(**kw)


def test_another_scheme_s_settings_do_not_apply():
    with pytest.raises(RingsimError, match="--head-groups .* does not apply to the hybrid scheme"):
        settings_of("hybrid", {"head-groups": 2})
    assert settings_of("hybrid", {"ulysses-degree": 2, "placement": "ring-inner"}) == HybridSettings(
        ulysses_degree=2, placement="ring-inner")


def test_block_maps_show_when_and_by_whom_each_pair_is_computed():
    from sim.schemes import get

    hw = cluster(gpus_per_node=4)
    w = Workload(seq=512, heads=8, kv_heads=2, head_dim=16)
    ring = simulate(Scenario(workload=w, hardware=hw, n_gpus=2, layout="zigzag"))
    two_rings = simulate(Scenario(workload=w, hardware=hw, n_gpus=8, scheme="hybrid",
                                  settings=HybridSettings(ulysses_degree=4)))
    want, got = get("ring").block_map(ring), get("hybrid").block_map(two_rings)
    # the hybrid's map is its 2-GPU ring's: same chunks, same steps
    assert np.array_equal(got.value, want.value, equal_nan=True) and np.array_equal(got.work, want.work)
    assert got.owner.tolist() == [0, 4, 4, 0]            # ring positions 0 and 1: ranks 0 and 4
    uly = get("ulysses").block_map(simulate(Scenario(workload=w, hardware=hw, n_gpus=8, scheme="ulysses")))
    assert uly.value.shape == (1, 1) and uly.value[0, 0] == 0 and uly.work[0, 0] == 512 * 513 // 2
    ag = get("allgather").block_map(simulate(Scenario(workload=w, hardware=hw, n_gpus=4, scheme="allgather")))
    c = 512 // 8
    assert ag.work.sum() == 512 * 513 // 2 and ag.chunk_size == c
    assert (np.isnan(ag.value) == (ag.work == 0)).all()
    # rank 1 (chunks 1 and 6): the dense call on chunk 0, the diagonal, then chunk 6's two
    assert (ag.value[1, 0], ag.value[1, 1], ag.value[6, 3], ag.value[6, 6]) == (0, 1, 2, 3)


def test_the_hybrid_counts_its_operations_without_building_them():
    """Per pass: u rings of r GPUs (2r^2 - r operations forward, 3r^2 - r backward) and two
    all-to-alls in each of the r groups of u, u(u - 1) flows each, every flow taken in."""
    from sim.schemes import get

    def sc(n, u, pass_, placement="ulysses-inner", causal=True):
        return Scenario(workload=Workload(seq=n * 256, pass_=pass_, causal=causal), n_gpus=n, scheme="hybrid",
                        layout="zigzag", settings=HybridSettings(ulysses_degree=u, placement=placement))

    hybrid = get("hybrid")
    assert hybrid.count_ops(sc(16, 4, "fwd")) == 4 * (2 * 16 - 4) + 4 * 4 * 4 * 3 == 304
    assert hybrid.count_ops(sc(16, 4, "fwdbwd")) == 4 * (2 * 16 - 4) + 4 * (3 * 16 - 4) + 2 * 192
    for n, u in ((4, 2), (8, 4), (16, 2), (16, 8)):
        for pass_ in ("fwd", "bwd", "fwdbwd"):
            for placement in ("ulysses-inner", "ring-inner"):
                s = sc(n, u, pass_, placement)
                assert hybrid.count_ops(s) == len(hybrid.build_schedule(s)), (n, u, pass_, placement)
