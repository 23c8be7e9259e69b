import json

import pytest

from sim.cli import main
from sim.trace import Trace


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_json_has_the_documented_fields(capsys):
    code, out, _ = run(capsys, "simulate", "--gpus", "4", "--seq", "8192", "--json")
    assert code == 0
    d = json.loads(out)
    for key in ("makespan_s", "ideal_s", "efficiency", "load_imbalance", "overlap_efficiency",
                "total_flops", "total_bytes"):
        assert isinstance(d[key], float)
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3]
    for r in d["ranks"]:
        assert {"compute_s", "comm_s", "exposed_comm_s", "idle_s", "flops", "peak_mem_bytes"} <= r.keys()


def test_overrides_replace_the_presets(capsys):
    _, out, _ = run(capsys, "simulate", "--gpus", "2", "--seq", "4096", "--no-causal", "--json",
                    "--tflops", "100", "--link-gbps", "10", "--link-latency-us", "0",
                    "--overhead-us", "0", "--heads", "8", "--kv-heads", "8", "--head-dim", "64")
    d = json.loads(out)
    t_c = 4 * 2048 * 2048 * 64 * 8 / 100e12
    t_x = 2 * 8 * 2048 * 64 * 2 / 10e9
    assert d["makespan_s"] == pytest.approx(t_c + max(t_c, t_x))


def test_simulate_writes_trace_and_chrome_trace(capsys, tmp_path):
    t, c = tmp_path / "t.json", tmp_path / "c.json"
    code, out, _ = run(capsys, "simulate", "--gpus", "2", "--seq", "4096", "--trace", str(t),
                       "--chrome-trace", str(c))
    assert code == 0 and "makespan" in out
    assert Trace.load(t).world_size == 2
    assert "traceEvents" in json.loads(c.read_text())
    code, _, err = run(capsys, "simulate", "--gpus", "2", "--seq", "4096", "--trace", str(t))
    assert code == 2 and "exists" in err


def test_compare_lists_every_layout_with_and_without_overlap(capsys):
    code, out, _ = run(capsys, "compare", "--gpus", "4", "--seq", "16384", "--json")
    rows = json.loads(out)["rows"]
    assert {(r["layout"], r["overlap"]) for r in rows} == {
        (lay, ov) for lay in ("contiguous", "striped", "zigzag") for ov in (True, False)}
    code, out, _ = run(capsys, "compare", "--gpus", "4", "--seq", "16384")
    assert code == 0 and out.count("zigzag") == 2


@pytest.mark.parametrize("argv,match", [
    (["simulate", "--gpus", "3", "--seq", "1000"], "does not divide"),
    (["simulate", "--gpus", "4", "--seq", "1004", "--layout", "zigzag"], "multiple of 8"),
    (["simulate", "--gpus", "0"], "n_gpus"),
    (["simulate", "--seq", "-8"], "seq"),
    (["simulate", "--heads", "32", "--kv-heads", "5"], "kv_heads"),
    (["simulate", "--gpu", "Z80"], "unknown GPU preset"),
    (["simulate", "--link", "carrier-pigeon"], "unknown link preset"),
    (["simulate", "--tflops", "-1"], "achieved_tflops"),
    (["simulate", "--link-gbps", "0"], "bandwidth_gbps"),
    (["simulate", "--efficiency", "1.5"], "efficiency"),
    (["simulate", "--gpus", "two"], "invalid int"),
    (["simulate", "--bogus"], "unrecognized"),
    (["simulate", "--profile", "/nonexistent/profile.json"], "profile"),
])
def test_bad_input_is_one_line_and_status_2(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert match in err
    assert err.count("\n") == 1 and "Traceback" not in err
