"""Packed documents (sim.scenario.documents, sim.layouts.packed): block work by hand and against a brute
count of the mask, the layouts' imbalance, the schemes on them, refusals in one line."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cli.main import main
from sim.engine.play import simulate
from sim.layouts import block_extents, block_work_and_masks
from sim.layouts.packed import LAYOUTS, Packed, block_tables, gathered_tables, rank_tokens
from sim.scenario.config import Scenario, Workload
from sim.scenario.documents import bounds, lengths
from sim.trace.metrics import compute_metrics
from tests.sim.reference import run_by


def packed(docs: str | None, seq: int, n: int, layout: str, window: int | None = None,
           causal: bool = True, seed: int = 0) -> Packed:
    return Packed(tuple(int(x) for x in bounds(docs, seq, seed)), n, layout, window, causal)


def brute(p: Packed) -> np.ndarray:
    """(n, n) kept pairs, from the mask written out token by token."""
    toks = rank_tokens(p)
    b = np.asarray(p.bounds)
    doc = np.repeat(np.arange(len(b) - 1), np.diff(b))
    out = np.zeros((p.n, p.n), dtype=np.int64)
    for r in range(p.n):
        for s in range(p.n):
            q, k = toks[r][:, None], toks[s][None, :]
            keep = doc[q] == doc[k]
            if p.causal:
                keep &= k <= q
            if p.window:
                keep &= np.abs(q - k) < p.window
            out[r, s] = keep.sum()
    return out


def test_a_block_of_two_whole_documents_and_the_head_of_a_third():
    # rank 0 holds tokens 0..15: documents of 4 and 6 whole, the first 6 of a 10
    p = packed("4,6,10,12", 32, 2, "contiguous")
    t = block_tables(p)
    assert t.work[0, 0] == 4 * 5 // 2 + 6 * 7 // 2 + 6 * 7 // 2            # 52
    assert t.work[0, 1] == 0
    assert t.work[1, 0] == 4 * 6                  # the third's last 4 see its first 6
    assert t.work[1, 1] == 4 * 5 // 2 + 12 * 13 // 2
    # its varlen call: a causal piece per document
    assert t.calls[t.call[0, 0]].pieces == (("diagonal", 4, 4), ("diagonal", 6, 6), ("diagonal", 6, 6))
    assert t.calls[t.call[1, 0]].pieces == (("full", 4, 6),)
    # in tiles of 4: 16 for the first; 16 + 2 x 6 for each 6-token one
    assert block_tables(p, "tile", 4).work[0, 0] == 16 + 28 + 28


@pytest.mark.parametrize("layout, per_gpu", [
    ("contiguous", (36, 52)),       # tokens 0..7 | 8..11 (positions 8..11) and the 4
    ("striped", (40, 48)),
    ("zigzag", (44, 44)),           # 3-token chunks 0 and 3 | 1 and 2; the 4 as 1-token chunks
    ("doc-contiguous", (24, 64)),
    ("balanced", (44, 44)),
])
def test_two_documents_of_three_quarters_and_one_quarter_on_two_gpus(layout, per_gpu):
    p = packed("12,4", 16, 2, layout)
    work = block_tables(p).work
    assert tuple(work.sum(axis=1)) == per_gpu
    assert (work == brute(p)).all()


def test_a_window_smaller_than_a_tile():
    p = packed(None, 16, 2, "contiguous", window=3)
    t = block_tables(p)
    assert t.work.tolist() == [[1 + 2 + 3 * 6, 0], [2 + 1, 8 * 3 - 3]]
    tiles = block_tables(p, "tile", 8).work
    # the own blocks: one 8 x 8 tile each; across: tokens 8, 9 against keys 6, 7
    assert tiles.tolist() == [[64, 0], [4, 64]]


@pytest.mark.parametrize("seed", range(12))
def test_every_layout_counts_the_mask_exactly(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([2, 3, 4]))
    seq = n * int(rng.integers(6, 30)) * 2
    docs = "sample:" + ",".join(str(x) for x in rng.integers(1, seq // 2 + 2, size=4))
    window = None if seed % 2 else int(rng.integers(1, 12))
    causal = seed % 5 != 0
    for layout in LAYOUTS:
        p = packed(docs, seq, n, layout, window, causal, seed)
        assert sorted(rank_tokens(p).ravel().tolist()) == list(range(seq))
        assert (block_tables(p).work == brute(p)).all()
        assert (gathered_tables(p).work[:, 0] == brute(p).sum(axis=1)).all()


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
def test_one_document_gives_the_closed_form_tables(layout):
    for n, seq in ((4, 1024), (3, 768), (8, 4096)):
        t = block_tables(packed(None, seq, n, layout))
        work, masks = block_work_and_masks(layout, seq, n, True)
        q, kv = block_extents(layout, seq, n, True)
        assert (t.work == work).all() and (t.masks == masks).all()
        assert (t.q_tokens == q).all() and (t.kv_tokens == kv).all()


def test_one_document_as_a_list_simulates_as_one_sequence():
    w = Workload(seq=65536)
    for layout, same in (("zigzag", "zigzag"), ("doc-contiguous", "contiguous")):
        one = compute_metrics(simulate(Scenario(workload=w, layout=same)))
        listed = compute_metrics(simulate(Scenario(workload=Workload(seq=65536, docs="65536"), layout=layout)))
        assert listed.makespan_s == pytest.approx(one.makespan_s, rel=1e-5)     # floats summed otherwise
        assert listed.total_flops == pytest.approx(one.total_flops)


@pytest.mark.parametrize("scheme, layout", [("ring", "balanced"), ("allgather", "contiguous"),
                                            ("ulysses", "zigzag"), ("hybrid", "doc-contiguous")])
def test_every_scheme_computes_the_documents_pairs(scheme, layout):
    w = Workload(seq=8192, heads=8, kv_heads=4, docs="lognormal:median=700,sigma=1", seed=5)
    more = {"ulysses_degree": 2} if scheme == "hybrid" else {}
    sc = Scenario(workload=w, n_gpus=4, layout=layout, **run_by(scheme, **more))
    m = compute_metrics(simulate(sc))
    pairs = brute(packed(w.docs, w.seq, 1, "contiguous", seed=5)).sum()
    assert m.total_flops == pytest.approx(w.fwd_flops(pairs))


def test_drawn_documents_fill_the_sequence_and_follow_the_seed():
    a = lengths("lognormal:median=4k,sigma=1.2", 131072, 3)
    assert a.sum() == 131072 and (a > 0).all() and a.max() <= 131072
    assert (a == lengths("lognormal:median=4k,sigma=1.2", 131072, 3)).all()
    assert not np.array_equal(a, lengths("lognormal:median=4k,sigma=1.2", 131072, 4))
    # the median of many draws is near the asked one
    many = lengths("lognormal:median=1k,sigma=1.2", 1 << 24, 0)
    assert 900 < np.median(many[:-1]) < 1150


@pytest.mark.parametrize("args, message", [
    (["--docs", "0,5"], "length zero"),
    (["--docs=-3,5"], "negative length"),
    (["--docs", "3,4"], "do not fill the sequence"),
    (["--docs", "100k"], "exceed the sequence"),
    (["--docs", "lognormal:median=4k"], "needs sigma="),
    (["--docs", "file:/no/such/file"], "cannot read document lengths"),
    (["--window", "0"], "--window"),
    (["--layout", "balanced", "--scheme", "allgather"], "allgather on packed documents"),
])
def test_bad_documents_are_refused_in_one_line(args, message, capsys):
    assert main(["simulate", "--seq", "64k", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_documents_from_a_file_are_drawn_from_its_lengths(tmp_path, capsys):
    f = tmp_path / "lengths.txt"
    f.write_text("1000\n3000\n250\n")
    assert main(["simulate", "--seq", "64k", "--docs", f"file:{f}", "--seed", "2", "--json"]) == 0
    assert '"docs": "sample:1000,3000,250"' in capsys.readouterr().out


def test_a_sweep_gives_mean_and_worst_over_seeds(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text('gpus = 4\nseq = "16k"\nheads = 8\nkv-heads = 8\ndocs = "lognormal:median=1k,sigma=1"\n'
                    'layout = ["zigzag", "balanced"]\nseed = [0, 1, 2]\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "r.csv"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "over 3 seeds" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("zigzag", "balanced"))]
    assert [r[0] for r in rows] == ["zigzag", "balanced"] and all(r[1] == "3" for r in rows)
    assert all(float(r[3]) >= float(r[2]) >= 1.0 for r in rows)      # worst >= mean >= 1


def test_the_planner_ranks_the_packed_layouts(capsys):
    from sim.planning.plan import candidates, request_from
    from sim.scenario.models import model_preset as preset
    from sim.scenario.resolve import hardware_of, workload_of

    req = request_from(preset("llama3-8b"), seq="64k", nodes=1, docs="lognormal:median=2k,sigma=1", seed=4)
    base = req.base_options()
    assert base["docs"] == req.docs and base["seed"] == 4
    tried = candidates(workload_of(base), hardware_of(base), req.n_gpus)
    assert {v.values["layout"] for s, v in tried if s == "ring"} == set(LAYOUTS)
    assert {v.values.get("layout") for s, v in tried if s == "allgather"} == {"contiguous"}
    assert main(["plan", "--model", "llama3-8b", "--seq", "64k", "--docs", "lognormal:median=2k,sigma=1",
                 "--seed", "4", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "packed: " in out and "(seed 4)" in out and "--docs lognormal:median=2k,sigma=1 --seed 4" in out


def test_the_whole_step_plan_refuses_documents_in_one_line(capsys):
    assert main(["plan", "--model", "llama3-8b", "--seq", "64k", "--global-batch", "4M", "--docs", "4k"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--attention-only" in err and "\n" not in err


@pytest.mark.parametrize("args", [["--layout", "balanced"], ["--window", "4k"],
                                  ["--layout", "doc-contiguous", "--no-causal"],
                                  ["--window", "1k", "--no-causal", "--docs", "16k"]])
def test_the_packed_path_without_a_document_list(args, capsys):
    assert main(["simulate", "--seq", "64k", *args]) == 0
    out = capsys.readouterr().out
    assert "packed: " in out and "makespan" in out
