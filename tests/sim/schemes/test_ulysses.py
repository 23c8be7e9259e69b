"""DeepSpeed-Ulysses (sim.schemes.ulysses) against closed forms written here: the bytes
each GPU sends, the times of an all-to-all, no causal imbalance, every pair once."""

import numpy as np
import pytest

from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.scenario.config import Scenario, Workload
from sim.scenario.resolve import settings_of
from sim.schemes.ulysses import UlyssesSettings
from sim.trace.metrics import compute_metrics
from tests.sim.reference import chunk_tokens, cluster, hardware, head_coverage


def ulysses(n=4, seq=1024, heads=8, kv_heads=2, head_dim=16, causal=True, pass_="fwd", hw=None, ulysses_degree=None,
            **kw):
    w = Workload(seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim, causal=causal, pass_=pass_)
    return Scenario(workload=w, hardware=hw or hardware(), n_gpus=n, scheme="ulysses",
                    settings=UlyssesSettings(ulysses_degree=ulysses_degree), **kw)


@pytest.mark.parametrize("n,heads,kv_heads", [(4, 8, 2), (4, 8, 8), (8, 8, 2), (8, 8, 1), (2, 4, 4)])
@pytest.mark.parametrize("pass_", ["fwd", "bwd", "fwdbwd"])
def test_bytes_each_gpu_sends_follow_the_closed_form(n, heads, kv_heads, pass_):
    seq, d, b = 64 * n, 16, 2
    m = compute_metrics(simulate(ulysses(n=n, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=d, pass_=pass_)))
    # (N-1)/N * (S/N) * (2H + 2H_kv) * d * b per pass: Q, K, V in, the output back
    # (backward: dO in, dQ, dK, dV back); K/V heads replicated when N > H_kv
    h_kv = max(kv_heads, n)
    per_pass = (n - 1) / n * (seq / n) * (2 * heads + 2 * h_kv) * d * b
    passes = 2 if pass_ == "fwdbwd" else 1
    assert m.bytes_sent == pytest.approx([passes * per_pass] * n, rel=1e-12)
    assert m.total_bytes == pytest.approx(n * passes * per_pass, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_to_alls_are_exposed_around_one_call_of_the_whole_sequence(n):
    """No mask, one node, flat rates: (N-1) rounds of Q, K, V, the S x S call on H/N heads,
    (N-1) rounds of the output; the GPU waits on both all-to-alls."""
    seq, heads, kv_heads, d = 128 * n, 8, 8, 16
    hw = hardware(tflops=0.5, gbps=3.0, latency_us=2.0, overhead_us=4.0)
    m = compute_metrics(simulate(ulysses(n=n, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=d,
                                         causal=False, hw=hw)))
    c = seq // n
    t_in = 2e-6 + c * (heads + 2 * kv_heads) // n * d * 2 / 3e9
    t_out = 2e-6 + c * heads // n * d * 2 / 3e9
    t_c = 4e-6 + 4 * d * seq * seq * (heads // n) / 0.5e12
    assert m.makespan_s == pytest.approx((n - 1) * (t_in + t_out) + t_c, rel=1e-12)
    for r in m.ranks:
        assert r.compute_s == pytest.approx(t_c, rel=1e-12)
        assert r.exposed_comm_s == pytest.approx((n - 1) * (t_in + t_out), rel=1e-9)


@pytest.mark.parametrize("pass_", ["fwd", "fwdbwd"])
def test_causal_ulysses_has_no_imbalance_and_covers_every_pair_once_per_head(pass_):
    n, seq, heads, d = 4, 256, 8, 16
    trace = simulate(ulysses(n=n, seq=seq, heads=heads, head_dim=d, pass_=pass_,
                             hw=cluster(gpus_per_node=2, nics_per_node=1)))
    m = compute_metrics(trace)
    assert m.load_imbalance == 1.0
    cover = head_coverage(trace, chunk_tokens("ulysses", seq, n), seq, True, d)
    allowed = np.tril(np.ones((seq, seq), dtype=np.int64))
    assert set(cover) == ({"fwd"} if pass_ == "fwd" else {"fwd", "bwd"})
    for grid in cover.values():
        assert (grid == heads * allowed).all()


def test_peak_memory_by_hand():
    n, seq, h, hk, d = 4, 1024, 8, 2, 16
    mem = compute_metrics(simulate(ulysses(n=n, seq=seq, heads=h, kv_heads=hk, head_dim=d))).ranks[0].peak_mem_bytes
    c = seq // n
    # token shards: Q, K, V, output; head shards (whole sequence, H/N heads, H_kv/N K/V
    # heads or one): Q, K, V, output, fp32 max and normalizer
    want = (c * (h + 2 * hk) * d * 2 + c * h * d * 2
            + seq * (h // n + 2 * 1) * d * 2 + seq * (h // n) * d * 2 + 2 * seq * (h // n) * 4)
    assert mem == want


@pytest.mark.parametrize("kw,match", [
    (dict(n=3, heads=8, kv_heads=8, seq=96), "does not divide the 8 query heads"),
    (dict(n=4, heads=12, kv_heads=6, seq=96), "one must divide the other"),
    (dict(n=4, seq=1022), "does not divide into 4"),
    (dict(n=4, ulysses_degree=2), "--ulysses-degree must be 4"),
])
def test_configurations_ulysses_cannot_run_are_refused_in_one_line(kw, match):
    with pytest.raises(RingsimError, match=match):
        ulysses(**kw)


def test_another_scheme_s_settings_do_not_apply():
    with pytest.raises(RingsimError, match="--head-groups .* does not apply to the ulysses scheme"):
        settings_of("ulysses", {"head-groups": 2})
    # the degree is the hybrid's option, shared
    assert settings_of("ulysses", {"ulysses-degree": 4}) == UlyssesSettings(ulysses_degree=4)


@pytest.mark.parametrize("n,pass_,want", [(16, "fwd", 16 + 4 * 16 * 15), (8, "fwdbwd", 2 * (8 + 4 * 8 * 7)),
                                          (2, "bwd", 2 + 4 * 2 * 1)])
def test_ulysses_counts_its_operations_without_building_them(n, pass_, want):
    """One attention call per GPU and two all-to-alls of N(N - 1) flows a pass, every
    flow taken in by its receiver."""
    from sim.scenario.config import Scenario, Workload
    from sim.schemes import get

    s = Scenario(workload=Workload(seq=n * 256, pass_=pass_), n_gpus=n, scheme="ulysses", layout="zigzag")
    ulysses = get("ulysses")
    assert ulysses.count_ops(s) == want == len(ulysses.build_schedule(s))
