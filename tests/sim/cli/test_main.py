import json
import re

import pytest

from sim.cli.main import main
from sim.trace.format import Trace


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
        assert {"compute_s", "comm_s", "exposed_comm_s", "idle_s", "flops", "peak_mem_bytes", "bytes_sent"} <= r.keys()
    # bytes sent per rank: a zigzag ring sends (N-1) K/V shards, 2 * 8 heads * 2048 tokens * 128 * 2 B
    assert d["bytes_sent"] == [3 * 2 * 8 * 2048 * 128 * 2] * 4
    assert d["total_bytes"] == sum(d["bytes_sent"])


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
    assert Trace.load(t).n_gpus == 2
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
    (["simulate", "--gpus", "0"], "--gpus must be"),
    (["simulate", "--seq", "-8"], "seq"),
    (["simulate", "--heads", "32", "--kv-heads", "5"], "--kv-heads (5) must divide"),
    (["simulate", "--gpu", "Z80"], "unknown GPU preset"),
    (["simulate", "--link", "carrier-pigeon"], "unknown link preset"),
    (["simulate", "--tflops", "-1"], "--tflops must be"),
    (["simulate", "--link-gbps", "0"], "--link-gbps must be"),
    (["simulate", "--efficiency", "1.5"], "efficiency"),
    (["simulate", "--gpus", "two"], "invalid int"),
    (["simulate", "--bogus"], "unrecognized"),
    (["simulate", "--profile", "/nonexistent/profile.json"], "profile"),
    (["simulate", "--scheme", "ulysses", "--gpus", "3", "--seq", "3072"], "does not divide the 32 query heads"),
    (["simulate", "--scheme", "hybrid", "--gpus", "8", "--ulysses-degree", "4", "--ring-degree", "4"],
     "not the 8 GPUs"),
    (["simulate", "--scheme", "hybrid", "--gpus", "8", "--ulysses-degree", "3"], "does not divide the 8 GPUs"),
    (["simulate", "--scheme", "allgather", "--head-groups", "3"], "must divide the 8 K/V heads"),
    (["simulate", "--scheme", "allgather", "--gpus", "12", "--seq", "12288"], "whole nodes"),
    (["simulate", "--scheme", "ring", "--ulysses-degree", "2"], "does not apply to the ring scheme"),
    (["simulate", "--gpus-per-node", "8", "--nics-per-node", "3"], "must divide --gpus-per-node"),
    (["simulate", "--cluster", "abacus"], "unknown cluster preset"),
    (["compare", "--schemes", "ring,tree"], "unknown scheme 'tree'"),
])
def test_bad_input_is_one_line_and_status_2(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert match in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_simulate_runs_every_scheme_across_nodes(capsys):
    for scheme in ("allgather", "ulysses", "hybrid"):
        code, out, _ = run(capsys, "simulate", "--scheme", scheme, "--gpus", "16", "--seq", "32768",
                           "--cluster", "dgx-h100", "--json")
        d = json.loads(out)
        assert code == 0 and d["scheme"] == scheme and len(d["bytes_sent"]) == 16
        assert d["scenario"]["scheme"] == scheme
    code, out, _ = run(capsys, "simulate", "--scheme", "hybrid", "--gpus", "16", "--seq", "32768",
                       "--gpus-per-node", "8", "--inter-link", "ib-ndr", "--placement", "ring-inner", "--json")
    assert json.loads(out)["scenario"]["placement"] == "ring-inner"


def test_cluster_presets_set_the_hardware_and_flags_override_them(capsys):
    from sim.cli.main import build_parser
    from sim.cli.options import hardware_from_args

    a = build_parser().parse_args(["simulate", "--cluster", "dgx-a100", "--nic-gbps", "12.5"])
    hw = hardware_from_args(a)
    assert (hw.gpu.name, hw.link.name, hw.inter_link.name, hw.gpus_per_node, hw.nics_per_node) == (
        "A100-SXM-80GB", "nvlink3", "ib-hdr", 8, 8)
    assert hw.inter_link.bandwidth_gbps == 12.5
    a = build_parser().parse_args(["simulate", "--cluster", "pcie-a100", "--gpus-per-node", "4", "--nics-per-node", "4"])
    hw = hardware_from_args(a)
    assert (hw.link.name, hw.gpus_per_node, hw.nics_per_node) == ("pcie4", 4, 4)


def test_compare_all_schemes_lists_every_scheme_and_names_the_fastest(capsys):
    code, out, _ = run(capsys, "compare", "--schemes", "all", "--gpus", "8", "--seq", "16384", "--json")
    d = json.loads(out)
    assert code == 0
    rows = d["rows"]
    # every split u x r the 32/8 heads allow with 1 < u < 8: 4 x 2 and 2 x 4
    assert [r["scheme"] for r in rows] == ["ring"] * 3 + ["allgather"] * 2 + ["hybrid"] * 2 + ["ulysses"]
    assert [r["variant"] for r in rows if r["scheme"] == "hybrid"] == ["4 x 2", "2 x 4"]
    fastest = min(rows, key=lambda r: r["makespan_s"])
    assert d["fastest"] == [fastest["scheme"], fastest["variant"]]
    # every other run within 5% of the fastest (the model's error) ties with it, fastest first
    close = sorted((r for r in rows if r["makespan_s"] < fastest["makespan_s"] * 1.05), key=lambda r: r["makespan_s"])
    assert d["tied"] == ([[r["scheme"], r["variant"]] for r in close] if len(close) > 1 else [])
    for r in rows:
        assert r["explanation"] and r["bytes_sent_per_gpu"] > 0 and r["peak_mem_bytes"] > 0
    code, out, _ = run(capsys, "compare", "--schemes", "all", "--gpus", "8", "--seq", "16384")
    assert code == 0 and out.count("\n") >= 10 and "fastest:" in out
    assert ("a tie: within the model's error of 5%" in out) == (len(close) > 1)
    # a scheme the configuration refuses is a row saying why
    code, out, _ = run(capsys, "compare", "--schemes", "ulysses,ring", "--gpus", "64", "--seq", "65536", "--json")
    rows = json.loads(out)["rows"]
    assert [r["scheme"] for r in rows] == ["ring"] * 3 + ["ulysses"]
    assert "does not divide the 32 query heads" in rows[-1]["refused"]


def test_a_ring_too_large_for_the_machine_is_refused_in_one_line_before_it_is_built(capsys, monkeypatch):
    from sim.engine import host_memory

    # 512 GPUs forward: 512^2 computes + 512 x 511 hops = 523,776 operations x 130 bytes = 64.9 MiB
    monkeypatch.setattr(host_memory, "available_memory_bytes", lambda: 100 * 2 ** 20)
    code, out, err = run(capsys, "simulate", "--gpus", "512", "--seq", str(512 * 64))
    assert code == 0 and "512 x H100-SXM" in out
    monkeypatch.setattr(host_memory, "available_memory_bytes", lambda: 50 * 2 ** 20)
    code, out, err = run(capsys, "simulate", "--gpus", "512", "--seq", str(512 * 64), "--json")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "ringsim: error: ring on 512 GPUs is 523,776 operations: simulating it takes about 64.9 MiB, "
        "and this machine has 50.0 MiB available; use fewer GPUs or a machine with more memory"]


def test_seq_takes_a_size_as_the_sweep_specs_do(capsys):
    _, by_size, _ = run(capsys, "simulate", "--gpus", "4", "--seq", "8k", "--json")
    _, by_number, _ = run(capsys, "simulate", "--gpus", "4", "--seq", "8192", "--json")
    assert json.loads(by_size) == json.loads(by_number)
    out = json.loads(run(capsys, "simulate", "--gpus", "2", "--seq", "1.5k", "--json")[1])
    assert out["scenario"]["workload"]["seq"] == 1536


@pytest.mark.parametrize("seq,says", [("64q", "a size such as 128k"), ("0", "must be positive"),
                                      ("1.5", "not a whole number")])
def test_a_bad_seq_is_one_line(capsys, seq, says):
    code, out, err = run(capsys, "simulate", "--seq", seq)
    assert code == 2 and out == ""
    assert says in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv,says", [
    (["simulate", "--seq", "-1k"], "tokens must be a positive whole number or a size"),
    (["simulate", "--gpus", "0"], "--gpus must be a positive integer, got 0"),
    (["simulate", "--link-gbps", "-3"], "--link-gbps must be a positive finite number"),
    (["simulate", "--inter-link", "ib-ndr", "--nic-gbps", "-3"], "--nic-gbps must be a positive finite number"),
    (["simulate", "--tflops", "-1"], "--tflops must be a positive finite number"),
    (["simulate", "--heads", "0"], "--heads must be a positive integer"),
    (["simulate", "--kv-heads", "5"], "--kv-heads (5) must divide heads (32)"),
    (["simulate", "--cluster", "pcie-a100", "--gpus-per-node", "6"], "give --nics-per-node"),
    (["sweep", "spec.toml"], "sweep needs --out"),
])
def test_a_mistake_names_the_flag_the_user_typed(capsys, argv, says):
    code, _, err = run(capsys, *argv)
    assert code == 2 and says in err and err.count("\n") == 1
    for field in ("n_gpus", "bandwidth_gbps", "achieved_tflops", "kv_heads", "nics_per_node"):
        assert field not in err


def test_a_cluster_on_smaller_nodes_keeps_its_gpus_per_nic(capsys):
    """dgx-h100 has a NIC per GPU: on nodes of 4 GPUs it has 4 NICs, as `--nics-per-node`
    unset means (one per GPU); pcie-a100's NIC serves 4 GPUs, on nodes of 4 there is one."""
    from sim.cli.main import build_parser
    from sim.cli.options import hardware_from_args

    hw = hardware_from_args(build_parser().parse_args(["simulate", "--cluster", "dgx-h100", "--gpus-per-node", "4"]))
    assert (hw.gpus_per_node, hw.nics_per_node) == (4, 4)
    hw = hardware_from_args(build_parser().parse_args(["simulate", "--cluster", "pcie-a100", "--gpus-per-node", "4"]))
    assert (hw.gpus_per_node, hw.nics_per_node) == (4, 1)
    code, out, _ = run(capsys, "simulate", "--cluster", "dgx-h100", "--gpus-per-node", "4", "--gpus", "8", "--json")
    assert code == 0 and json.loads(out)["makespan_s"] > 0


def test_a_sweep_dry_run_needs_no_output(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text('gpus = [2, 4]\nseq = "8k"\n')
    code, out, _ = run(capsys, "sweep", str(spec), "--dry-run")
    assert code == 0 and "2 distinct configurations" in out


def test_many_ranks_are_summarised_and_all_of_them_on_request(capsys):
    _, out, _ = run(capsys, "simulate", "--gpus", "64", "--seq", "64k")
    rows = [line for line in out.splitlines() if line[:1].isdigit() and "ms" in line]
    assert len(rows) < 64 and "ranks shown" in out
    assert {int(r.split()[0]) for r in rows} >= {0, 1, 2, 3, 60, 61, 62, 63}
    _, out, _ = run(capsys, "simulate", "--gpus", "64", "--seq", "64k", "--all-ranks")
    assert len([line for line in out.splitlines() if line[:1].isdigit() and "ms" in line]) == 64
    _, out, _ = run(capsys, "simulate", "--gpus", "8", "--seq", "64k")
    assert "ranks shown" not in out


def test_compare_schemes_keeps_its_lines_short_and_says_what_bounds_each(capsys):
    code, out, _ = run(capsys, "compare", "--schemes", "all", "--gpus", "32", "--cluster", "dgx-h100",
                       "--seq", "128k")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 140
    table, _, notes = out.partition("what bounds each:")
    numbered = [line for line in notes.splitlines() if re.match(r"\d+\. ", line)]
    rows = [line for line in table.splitlines() if re.match(r"\d+\s{2}", line)]
    # 3 ring layouts, 2 all-gathers, Ulysses, and the splits 16 x 2, 8 x 4, 4 x 8, 2 x 16
    # in each placement (the GPUs span nodes)
    assert len(numbered) == len(rows) == 14
