"""View 6: memory per GPU against closed forms (DESIGN.md, fact 4)."""

from __future__ import annotations

from dashboard import compute, figures
from tests.dashboard.conftest import small_scenario


def test_memory_table_against_closed_forms():
    sc = small_scenario(n_gpus=8, seq=8192)
    table = compute.memory_table(sc)
    w = sc.workload
    for r in table["by_seq"]:
        full = 2 * w.batch * w.kv_heads * r["seq"] * w.head_dim * w.elem_bytes
        assert r["full_kv_bytes"] == full
        assert r["ring_kv_bytes"] == 3 * full // sc.n_gpus     # own shard + two blocks in flight
    shard = {r["fixed_shard_bytes"] for r in table["by_gpus"]}
    assert len(shard) == 1                                    # fact 4: flat at a fixed shard
    fig = figures.memory(table)
    assert len(fig.data) >= 6
