"""ringsim plan: every candidate reproduced by its own `ringsim simulate` command, the
memory model and filter by hand, ranking, refusals, presets and bad inputs."""

from __future__ import annotations

import json

import pytest

from sim.cli.main import main
from sim.errors import RingsimError
from sim.planning.plan import PlanRequest, parse_headroom, plan
from sim.scenario.models import MODEL_PRESETS, Model, model_preset

SMALL_MODEL = ["--layers", "4", "--heads", "8", "--kv-heads", "4", "--head-dim", "64"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(capsys, *argv) -> dict:
    code, out, err = run(capsys, "plan", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_every_candidate_is_reproduced_by_its_command(capsys):
    d = plan_json(capsys, *SMALL_MODEL, "--seq", "16k", "--nodes", "2", "--gpus-per-node", "4",
                  "--gpu", "H100-SXM", "--link", "nvlink4", "--inter-link", "ib-ndr", "--top", "0")
    # ring x 3 layouts, allgather x 3 head-group counts (1, 2, 4), ulysses, hybrid 2x4 and 4x2 x
    # 2 placements x 3 layouts
    assert d["simulated"] == 3 + 3 + 1 + 12 and d["not_possible"] == []
    cands = d["candidates"]
    assert [c["rank"] for c in cands] == list(range(1, 20))
    for c in cands:
        code, out, _ = run(capsys, *c["command"].split()[1:], "--json")
        assert code == 0
        alone = json.loads(out)
        assert alone["makespan_s"] == c["makespan_s"], c["command"]
        assert max(r["peak_mem_bytes"] for r in alone["ranks"]) == c["attention_mem_bytes"]
        assert max(alone["bytes_sent"]) == c["bytes_per_gpu"]
        assert alone["efficiency"] == c["efficiency"]
        assert c["step_s"] == c["makespan_s"] * 4
        assert c["why"] and "\n" not in c["why"]


def _ring_by_hand(layers, heads, kv_heads, d, seq, n, eb=2):
    """What a ring rank holds (docs/design.md, Peak memory; fwdbwd) and what the other layers
    keep for backward, counted from the shapes."""
    c = seq // n
    q = heads * c * d * eb
    kv = 2 * kv_heads * c * d * eb
    working = (q + kv + 2 * kv + q          # Q, own K/V, two K/V buffers, output
               + heads * c * d * 4          # fp32 output accumulator
               + 2 * heads * c * 4          # running max and normalizer, fp32
               + q + heads * c * d * 4      # dO, fp32 dQ
               + 2 * 2 * kv_heads * c * d * 4)   # two fp32 dK/dV buffers
    kept = (layers - 1) * (q + kv + q + heads * c * 4)   # Q, K/V, O, log-sum-exp
    return working, kept


def test_the_memory_filter_by_hand():
    working, kept = _ring_by_hand(4, 8, 2, 64, 8192, 4)
    model = Model(name="small", layers=4, hidden=512, heads=8, kv_heads=2, head_dim=64, params=1e9)
    base = dict(model=model, seq=8192, nodes=1, gpus_per_node=4, gpu="H100-SXM")
    p = plan(PlanRequest(**base, memory_gb=(working + kept) / 1e9))
    ring = {c["variant"]: c for c in p.candidates if c["scheme"] == "ring"}["zigzag layout"]
    assert ring["memory"] == {"attention_working": working, "kept_for_backward": kept, "total": working + kept}
    assert ring["fits"] and p.limit_bytes == working + kept
    for c in p.candidates:
        assert c["fits"] == (c["peak_mem_bytes"] <= working + kept)
    # the all-gather holds the whole K/V: it does not fit where the ring just does
    assert not any(c["fits"] for c in p.candidates if c["scheme"] == "allgather")
    fits = [c["fits"] for c in p.candidates]
    assert fits == sorted(fits, reverse=True)           # those that fit first
    ranked = [c["makespan_s"] for c in p.candidates if c["fits"]]
    assert ranked == sorted(ranked)
    assert all(c["why"].startswith("does not fit") for c in p.candidates if not c["fits"])
    # one byte less and the ring no longer fits; parameters sharded over 4 GPUs add 16 B each / 4
    p = plan(PlanRequest(**base, memory_gb=(working + kept - 1) / 1e9))
    assert not [c for c in p.candidates if c["scheme"] == "ring" and c["fits"]]
    p = plan(PlanRequest(**base, memory_gb=80, param_shards=4, headroom="10%"))
    ring = next(c for c in p.candidates if c["scheme"] == "ring" and c["variant"] == "zigzag layout")
    assert ring["memory"]["params_and_optimizer"] == 16 * 10 ** 9 // 4
    assert p.limit_bytes == pytest.approx(0.9 * 80e9)


def test_forward_only_keeps_the_kv_cache():
    model = Model(name="small", layers=4, hidden=512, heads=8, kv_heads=2, head_dim=64)
    p = plan(PlanRequest(model=model, seq=8192, nodes=1, gpus_per_node=4, pass_="fwd"))
    ring = next(c for c in p.candidates if c["scheme"] == "ring")
    assert ring["memory"]["kv_cache"] == 3 * 2 * 2 * (8192 // 4) * 64 * 2


def test_seq_sizes_and_the_json_shape(capsys):
    d = plan_json(capsys, *SMALL_MODEL, "--seq", "1M", "--nodes", "1", "--gpus-per-node", "2", "--top", "2")
    assert d["request"]["seq"] == 1048576 == 2 ** 20
    assert len(d["candidates"]) == 2
    first = d["candidates"][0]
    for key in ("command", "makespan_s", "efficiency", "exposed_comm_s", "peak_mem_bytes", "fits", "why"):
        assert key in first
    assert first["command"].startswith("ringsim simulate --gpus 2 --seq 1048576 ")
    assert d["candidates"][0]["makespan_s"] <= d["candidates"][1]["makespan_s"]


def test_the_head_count_limits_ulysses(capsys):
    d = plan_json(capsys, "--layers", "2", "--heads", "4", "--kv-heads", "2", "--seq", "16k", "--nodes", "1",
                  "--gpus-per-node", "8", "--top", "0")
    refused = {(x["scheme"], x["variant"]): x["reason"] for x in d["not_possible"]}
    assert "does not divide the 4 query heads (the head count limits Ulysses)" in refused[("ulysses", "degree 8")]
    assert list(refused) == [("ulysses", "degree 8")]      # hybrids 2 x 4 and 4 x 2 split 4 heads
    assert all(c["scheme"] != "ulysses" for c in d["candidates"])


@pytest.mark.parametrize("argv,match", [
    (["--model", "llama3-70b", "--seq", "0"], "seq must be positive"),
    (["--model", "llama3-70b", "--seq", "lots"], "size such as 128k or 1M"),
    (["--model", "gpt-9", "--seq", "1M"], "unknown model 'gpt-9'"),
    (["--seq", "1M", "--heads", "8"], "give --model or the model's numbers"),
    (["--model", "llama3-8b", "--seq", "128k", "--nodes", "0"], "nodes must be a positive"),
    (["--model", "llama3-8b", "--seq", "128k", "--headroom", "lots"], "headroom must be"),
    (["--model", "llama3-8b", "--seq", "128k", "--gpu", "Z100"], "unknown GPU preset"),
    (["--model", "llama3-8b", "--seq", "128k", "--kv-heads", "5"], "must divide heads"),
    (["--heads", "8", "--kv-heads", "8", "--layers", "2", "--seq", "8k", "--param-shards", "8"], "parameter count"),
])
def test_bad_inputs_are_one_line_errors_with_status_2(capsys, argv, match):
    code, out, err = run(capsys, "plan", *argv)
    assert code == 2 and out == ""
    assert match in err and err.count("\n") == 1


def test_headroom_forms():
    assert parse_headroom("10%") == (0.1, 0.0)
    assert parse_headroom("8GB") == (0.0, 8e9)
    assert parse_headroom("8GiB") == (0.0, 8 * 2 ** 30)
    assert parse_headroom(4) == (0.0, 4e9)
    for bad in ("100%", "-1GB", "x"):
        with pytest.raises(RingsimError):
            parse_headroom(bad)


def test_presets_are_the_papers_shapes():
    # The Llama 3 Herd of Models, Table 3: layers, model dimension, attention heads, K/V heads
    table = {"llama3-8b": (32, 4096, 32, 8), "llama3-70b": (80, 8192, 64, 8), "llama3-405b": (126, 16384, 128, 8)}
    assert set(MODEL_PRESETS) == set(table)
    for name, (layers, hidden, heads, kv) in table.items():
        m = model_preset(name)
        assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim) == (layers, hidden, heads, kv, hidden // heads)
        assert "2407.21783" in m.source
    assert model_preset("Llama-3-70B") is MODEL_PRESETS["llama3-70b"]


def test_the_text_output_names_the_winner_and_its_command(capsys):
    code, out, _ = run(capsys, "plan", *SMALL_MODEL, "--seq", "16k", "--nodes", "1", "--gpus-per-node", "4",
                       "--top", "3")
    assert code == 0
    assert "fastest that fits" in out and out.count("ringsim simulate --gpus 4") == 3
    assert "per step (x 4 layers)" in out


def test_fits_compares_the_total_with_the_limit_after_headroom():
    """A candidate fits when its total is within the GPU's memory less the headroom, not
    within the whole memory: the zigzag ring that just fits 'working + kept' bytes does not
    once 10% of them is kept free."""
    working, kept = _ring_by_hand(4, 8, 2, 64, 8192, 4)
    model = Model(name="small", layers=4, hidden=512, heads=8, kv_heads=2, head_dim=64, params=1e9)
    base = dict(model=model, seq=8192, nodes=1, gpus_per_node=4, gpu="H100-SXM")
    p = plan(PlanRequest(**base, memory_gb=(working + kept) / 1e9, headroom="10%"))
    ring = next(c for c in p.candidates if c["scheme"] == "ring" and c["variant"] == "zigzag layout")
    assert ring["memory"]["total"] == working + kept
    assert p.limit_bytes == pytest.approx(0.9 * (working + kept))
    assert not ring["fits"]
    assert all(c["fits"] == (c["peak_mem_bytes"] <= p.limit_bytes) for c in p.candidates)


def test_the_total_counts_parameters_and_optimizer_state_when_sharded():
    """With --param-shards the total holds the parameters and Adam's state (16 bytes a
    parameter over the shards) beside attention's: one byte short of that sum and the ring
    no longer fits."""
    working, kept = _ring_by_hand(4, 8, 2, 64, 8192, 4)
    model = Model(name="small", layers=4, hidden=512, heads=8, kv_heads=2, head_dim=64, params=1e9)
    base = dict(model=model, seq=8192, nodes=1, gpus_per_node=4, gpu="H100-SXM", param_shards=4)
    params = 16 * 10 ** 9 // 4
    p = plan(PlanRequest(**base, memory_gb=(working + kept + params) / 1e9))
    ring = next(c for c in p.candidates if c["scheme"] == "ring" and c["variant"] == "zigzag layout")
    assert ring["memory"]["total"] == working + kept + params and ring["fits"]
    p = plan(PlanRequest(**base, memory_gb=(working + kept + params - 1) / 1e9))
    ring = next(c for c in p.candidates if c["scheme"] == "ring" and c["variant"] == "zigzag layout")
    assert not ring["fits"]


def test_candidates_within_the_model_s_error_are_called_tied():
    """The fastest and the next less than 5% apart are tied, and the sentence says what
    else differs; farther apart, the fastest is ahead by its margin."""
    from sim.planning.plan import TIE_WITHIN, tie_clause
    from sim.reasons import clause, english

    a = {"scheme": "ulysses", "variant_clause": clause("variant.degree", degree=8), "makespan_s": 1.00,
         "peak_mem_bytes": 10 * 2 ** 30, "exposed_comm_s": 0.01}
    b = {"scheme": "hybrid", "variant_clause": clause("variant.split", ulysses=4, ring=2), "makespan_s": 1.03,
         "peak_mem_bytes": 11 * 2 ** 30, "exposed_comm_s": 0.05}
    s = english(tie_clause(a, b, 0.03))
    assert s.startswith("tied with the next (hybrid, 4 x 2): 3.0% apart")
    assert "1.00 GiB less memory per GPU" in s and "40.000 ms less exposed communication" in s
    assert TIE_WITHIN == 0.05
    model = Model(name="small", layers=4, hidden=512, heads=8, kv_heads=2, head_dim=64)
    p = plan(PlanRequest(model=model, seq=8192, nodes=1, gpus_per_node=4))
    first, second = p.fitting[0], p.fitting[1]
    apart = second["makespan_s"] / first["makespan_s"] - 1
    assert first["why"].startswith("tied with the next" if apart < 0.05 else "fastest that fits")


def test_large_plans_run_on_every_core_by_default(monkeypatch):
    from sim.cli import plan as plan_cli
    from sim.planning import sweep

    assert plan_cli.plan_workers(3, 8) == 3                        # --workers given: as given
    assert plan_cli.plan_workers(None, 64) == 1                    # small plans in this process
    monkeypatch.setattr(sweep, "dask_available", lambda: True)
    monkeypatch.setattr(plan_cli.os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert plan_cli.plan_workers(None, 1024) == plan_cli.AUTO_WORKERS_MAX
    monkeypatch.setattr(sweep, "dask_available", lambda: False)
    assert plan_cli.plan_workers(None, 1024) == 1                  # no Dask: this process


def test_the_runs_tied_with_the_fastest_are_those_within_the_models_error():
    from sim.planning.plan import tied

    assert tied([]) == []
    assert tied([3.0]) == [0]
    assert tied([1.05, 1.0, 2.0, 1.049]) == [1, 3]          # 1.05 is 5% behind: outside
    assert tied([2.0, 1.0, 1.04, 1.01]) == [1, 3, 2]         # the fastest first, then by time
