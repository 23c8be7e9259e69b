"""`ringsim hw bench --parts collective`: the collectives the all-gather and Ulysses
schemes run, measured over GPU counts and shard sizes, and calibrated into a profile."""

import json

import pytest

from hw.bench.parts import _plan_collectives
from sim.calibration.calibrate import calibrate, merge_benches
from sim.cli.main import main
from sim.errors import RingsimError
from sim.files import read_json
from tests.sim.calibration.test_calibrate_collectives import synthetic_bench


def test_plan_covers_every_op_gpu_count_and_size_once():
    plan = {"parts": ["collective"], "collectives": ["allgather", "alltoall"], "collective_gpus": [2, 3],
            "collective_sizes": [1024, 1026, 4096]}
    seen = {"collective": {("alltoall", 3, 4096)}}
    jobs = _plan_collectives(plan, seen)
    # 1026 bytes is rounded down to whole fp32 elements; one entry already measured
    assert {w: [(e["op"], e["shard_bytes"]) for e in es] for w, es in jobs.items()} == {
        2: [("allgather", 1024), ("allgather", 4096), ("alltoall", 1024), ("alltoall", 4096)],
        3: [("allgather", 1024), ("allgather", 4096), ("alltoall", 1024)]}
    assert all(e["sent_bytes"] == (e["n_gpus"] - 1) * e["shard_bytes"] for es in jobs.values() for e in es)


def test_bad_collective_options_are_refused(capsys, tmp_path):
    for extra, match in ((["--collectives", "broadcast"], "--collectives"),
                         (["--collective-gpus", "1"], "two ranks"),
                         (["--collective-sizes", "huge"], "--collective-sizes")):
        assert main(["hw", "bench", "-o", str(tmp_path / "b.json"), "--parts", "collective", *extra]) == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_collective_part_measures_and_calibrates(capsys, tmp_path):
    path = tmp_path / "coll.json"
    assert main(["hw", "bench", "-o", str(path), "--parts", "collective", "--collective-gpus", "2,3",
                 "--collective-sizes", "4K,64K", "--samples", "2", "--warmup", "1", "--threads", "1"]) == 0
    d = read_json(path)
    assert d["complete"] is True and not d["compute"]
    got = {(e["op"], e["n_gpus"], e["shard_bytes"]) for e in d["collective"]}
    assert got == {(op, w, s) for op in ("allgather", "reducescatter", "alltoall") for w in (2, 3)
                   for s in (4096, 65536)}
    for e in d["collective"]:
        assert e["sent_bytes"] == (e["n_gpus"] - 1) * e["shard_bytes"]
        assert len(e["time_s"]) == 2 and e["median_s"] > 0
        assert e["gbps"] == pytest.approx(e["sent_bytes"] / e["median_s"] / 1e9)
    # merged with compute and transfer measurements of the same device, it calibrates
    other = synthetic_bench()
    other["device"] = d["device"]
    del other["collective"]
    p = calibrate(merge_benches([(other, "a.json"), (d, str(path))]))
    assert set(p.collectives) <= {"allgather", "reducescatter", "alltoall"}
    for op, c in p.report["collectives"].items():
        assert c.get("skipped") or set(c["by_gpus"]) <= {"2", "3"}


def test_benches_of_different_devices_are_not_merged():
    a, b = synthetic_bench(), synthetic_bench()
    b["device"] = {**b["device"], "name": "another cpu"}
    with pytest.raises(RingsimError, match="one device at a time"):
        merge_benches([(a, "a.json"), (b, "b.json")])
    b["device"] = a["device"]
    b["collective"] = b["collective"][:1]
    merged = merge_benches([(a, "a.json"), (b, "b.json")])
    assert len(merged["collective"]) == len(a["collective"]) + 1
    assert json.dumps(a) == json.dumps(synthetic_bench())        # the inputs are left as they were
