"""A profiled run's refusals, assumptions, unmatched calls and notes are sim.reasons clauses
whose English is the sentence the importer wrote before they were data (copied here from that
version's output), and the notes survive the Parquet table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.errors import RingsimError
from sim.profiler.reader import read_run, read_table, write_table
from sim.profiler.ring import find_ring
from sim.reasons import clause, english

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
FWDBWD = DATA / "cpu" / "ring-contiguous-full-fwdbwd-3r"
ZIGZAG = DATA / "cpu" / "ring-zigzag-causal-fwd-2r"


def _refusal(*args, **kw) -> RingsimError:
    with pytest.raises(RingsimError) as caught:
        read_run(*args, **kw)
    return caught.value


def test_the_readers_refusals_are_the_sentences_it_wrote():
    e = _refusal([FWDBWD / "rank0.json.gz", FWDBWD / "rank2.json.gz"])
    assert str(e) == "rank 1 of 3 missing (given 0, 2); pass --partial to read only these"
    assert e.reason == clause("profiler.rank-missing", rank_list="1", world=3, given_list="0, 2", code="--partial")
    e = _refusal([ZIGZAG / "rank0.json.gz", FWDBWD / "rank1.json.gz"])
    assert str(e) == "ranks of different runs mixed: world sizes 2 (rank0.json.gz), 3 (rank1.json.gz)"
    assert str(_refusal([])) == "no trace files given"
    assert english(_refusal([DATA / "nowhere"]).reason) == f"{DATA / 'nowhere'}: no such file or folder"


def test_the_ring_finders_refusals_are_the_sentences_it_wrote():
    with pytest.raises(RingsimError) as caught:
        find_ring(read_run([DATA / "megatron-tp8-a100.rank0.json.gz"], partial=True))
    assert str(caught.value) == ("no attention calls with recorded shapes in the trace: record it with "
                                 "torch.profiler(record_shapes=True) around the attention")
    assert caught.value.reason["clause"] == "profiler.no-attention" and caught.value.reason["shapeless"] is None
    assert english(clause("profiler.no-attention", code="torch.profiler(record_shapes=True)",
                          shapeless=clause("profiler.shapeless", calls=3))).endswith(
        "around the attention (3 attention calls had no Input Dims)")
    with pytest.raises(RingsimError) as caught:
        find_ring(read_run([DATA / "tracelens-qwen0.5b-h100.json.gz"]))
    assert str(caught.value) == "no transfers between ranks in the trace: not a context-parallel ring (world size 1)"


def test_what_was_assumed_and_noted_is_the_english_it_was():
    ring = find_ring(read_run([DATA / "cpu" / "torchcp-allgather-causal-2r"]))
    assert ring.config.assumed == (
        "dtype: the attention calls' input type is not in the table; fp32 assumed",
        "torch's allgather rotation played as the ring (its one all-gather behind the first step; the same bytes; "
        "exact at 2 ranks)")
    assert [c["clause"] for c in ring.config.assumed_clauses] == ["profiler.assumed-dtype",
                                                                  "profiler.assumed-allgather"]
    # the configuration's JSON (validate --trace --json) holds the English, not the clauses
    d = ring.config.to_dict()
    assert d["assumed"] == list(ring.config.assumed) and "assumed_clauses" not in d
    json.dumps(d)
    assert english(clause("profiler.extra-steps", count=2, n=4, rank=1, iteration=3, phase="bwd")) == (
        "2 rank-iterations hold more steps than a ring of 4 ranks (first: rank 1, iteration 3, bwd); their extra "
        "calls are played as they fall")
    assert english(clause("profiler.clock-aligned", rank=1, ref=0, shift=-0.01234, how=clause("profiler.by-step", step=2),
                          drift=clause("profiler.clock-drift"))) == (
        "rank 1's clock aligned to rank 0's by -0.012 ms (ProfilerStep#2's start): more than synchronized hosts "
        "drift; check these files are of one run")


def test_the_notes_survive_the_table_and_an_older_tables_notes_read_as_written(tmp_path):
    pytest.importorskip("pyarrow")
    run = read_run([FWDBWD / "rank0.json.gz", FWDBWD / "rank2.json.gz"], partial=True)
    assert run.notes == ("ranks 0, 2 of 3 read, 1 not given",)
    write_table(run, tmp_path / "run.parquet")
    back = read_table(tmp_path / "run.parquet")
    assert back.note_clauses == run.note_clauses and back.notes == run.notes
    # a table written before the notes were clauses: its English kept as it was written
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "run.parquet")
    meta = json.loads(table.schema.metadata[b"ringsim_profiler_run"])
    del meta["note_clauses"]
    pq.write_table(table.replace_schema_metadata({"ringsim_profiler_run": json.dumps(meta)}), tmp_path / "old.parquet")
    old = read_table(tmp_path / "old.parquet")
    assert old.notes == run.notes
    assert old.note_clauses == (clause("profiler.note", detail="ranks 0, 2 of 3 read, 1 not given"),)
