"""View 6: memory per GPU against closed forms (docs/design.md, fact 4)."""

from __future__ import annotations

from dashboard import compute
from dashboard.figures.memory import memory
from tests.dashboard.conftest import small_scenario


def test_memory_table_against_closed_forms():
    sc = small_scenario(n_gpus=8, seq=8192)
    table = compute.memory_table(sc)
    w = sc.workload
    for r in table["by_seq"]:
        full = 2 * w.batch * w.kv_heads * r["seq"] * w.head_dim * w.elem_bytes
        assert r["full_kv_bytes"] == full
        assert r["ring_kv_bytes"] == 3 * full // sc.n_gpus     # own shard + two blocks in flight
    # fact 4: flat at a fixed shard from three GPUs; on two one block is in flight, on one none
    shard = {r["gpus"]: r["fixed_shard_bytes"] for r in table["by_gpus"]}
    assert len({b for g, b in shard.items() if g >= 3}) == 1
    kv_shard = 2 * w.batch * w.kv_heads * sc.tokens_per_rank * w.head_dim * w.elem_bytes
    assert shard[4] - shard[2] == shard[2] - shard[1] == kv_shard
    for r in table["by_gpus"]:
        full = 2 * w.batch * w.kv_heads * w.seq * w.head_dim * w.elem_bytes
        assert r["ring_kv_bytes"] == (1 + min(2, r["gpus"] - 1)) * full // r["gpus"]
    fig = memory(table)
    assert len(fig.data) >= 6


def test_every_schemes_memory_against_closed_forms():
    from sim.scenario.config import Scenario, Workload

    sc = Scenario(workload=Workload(seq=8192, heads=8, kv_heads=4, head_dim=64), n_gpus=4)
    w, n = sc.workload, sc.n_gpus
    table = compute.memory_table(sc)
    by = {v["label"]: v for v in table["schemes"]}
    full = 2 * w.batch * w.kv_heads * w.seq * w.head_dim * w.elem_bytes
    shard = full // n
    assert table["full_kv_now_bytes"] == full
    assert by["ring"]["items"]["total"] == table["items"]["total"]
    # all-gather holds the whole K/V where the ring holds two blocks in flight
    one, piped = by["allgather (one gather)"]["items"], by[f"allgather ({w.kv_heads} head groups)"]["items"]
    assert one["kv_gathered"] == full and one["total"] - by["ring"]["items"]["total"] == full - 2 * shard
    assert piped["kv_gathered"] == full * 2 // w.kv_heads                     # two groups at once
    # against GPU count at a fixed sequence the ring's K/V shrinks, all-gather's does not
    counts = [r["gpus"] for r in table["by_gpus"]]
    ring = [r["ring_bytes"] for r in table["by_gpus"]]
    gathered = dict(zip(counts, by["allgather (one gather)"]["by_gpus"]))
    big = max(g for g in counts if gathered[g] is not None)
    assert gathered[big] > full > ring[counts.index(big)]
    fig = memory(table)
    assert fig.layout.meta["full_kv_bytes"] == full
    assert set(fig.layout.meta["totals"]) == set(by)


def test_a_scheme_that_cannot_run_here_is_said_to_be_missing_and_why():
    """At 64 GPUs Ulysses (degree 64 over 32 heads) has no line: the subtitle names it with
    the simulator's reason; at 8 GPUs every scheme runs and nothing is said."""
    from dashboard import compute
    from dashboard.state import defaults, scenario_from_values
    table = compute.memory_table(scenario_from_values(defaults() | {"gpus": 64}))
    assert [r["scheme"] for r in table["refused"]] == ["ulysses"]
    assert "ulysses" not in {v["scheme"] for v in table["schemes"]}
    title = memory(table).layout.title.text
    assert "not possible here: ulysses (ulysses degree 64 does not divide the 32 query heads)" in title
    assert compute.memory_table(scenario_from_values(defaults()))["refused"] == []
