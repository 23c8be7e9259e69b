"""`ringsim infer`: its JSON, and every bad input as one line with exit status 2."""

import json

import pytest

from sim.cli.main import main
from sim.inference.work import rule_scheme

BASE = ["infer", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "2"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_prefill_json_holds_the_answer_and_both_choices(capsys):
    code, out, _ = run(capsys, *BASE, "--phase", "prefill", "--context", "64k", "--new", "4k", "--json")
    assert code == 0
    d = json.loads(out)
    for key in ("prefill_s", "tpot_s", "kv_cache_gib_per_gpu", "rule_scheme", "chosen_scheme", "parts",
                "scheme_attention_s"):
        assert key in d
    assert d["cached"] == 65536 - 4096 and d["cp"] == 2 and d["tp"] == 8
    assert d["rule_scheme"] == rule_scheme(65536 - 4096, 4096, 64, 8)
    assert d["chosen_scheme"] == min(("pass-kv", "pass-q"), key=d["scheme_attention_s"].get)
    assert d["prefill_s"] == pytest.approx(sum(d["parts"].values()))


def test_decode_and_request(capsys):
    code, out, _ = run(capsys, *BASE, "--phase", "decode", "--context", "64k,16k", "--new", "128", "--json")
    d = json.loads(out)
    assert code == 0 and d["prompts"] == [65536 - 128, 16384 - 128] and d["tpot_s"] > 0
    code, out, _ = run(capsys, *BASE, "--phase", "request", "--context", "32k", "--new", "1k", "--output", "64",
                       "--json")
    d = json.loads(out)
    assert code == 0 and d["total_s"] == pytest.approx(d["ttft_s"] + 63 * d["tpot_s"])
    code, out, _ = run(capsys, *BASE, "--phase", "request", "--context", "32k", "--output", "64")
    assert code == 0 and "time to first token" in out


def test_trace_is_written(capsys, tmp_path):
    from sim.trace.format import Trace

    path = tmp_path / "prefill.npz"
    code, _, _ = run(capsys, *BASE, "--phase", "prefill", "--context", "16k", "--scheme", "pass-q",
                     "--trace", str(path))
    trace = Trace.load(path)
    assert code == 0 and trace.config["kind"] == "prefill" and trace.config["scheme"] == "pass-q"


@pytest.mark.parametrize("argv,words", [
    (["--phase", "prefill", "--context", "8k", "--cached", "16k"], "longer than the context"),
    (["--phase", "prefill", "--context", "8k", "--new", "16k"], "more than --context"),
    (["--phase", "prefill", "--context", "8k", "--new", "0"], "1 new token"),
    (["--phase", "prefill", "--context", "8k", "--cached", "8k"], "1 new token"),
    (["--phase", "prefill", "--context", "8k", "--heads", "12", "--kv-heads", "4"], "does not divide"),
    (["--phase", "decode", "--context", "4M", "--nodes", "1"], "does not fit"),
    (["--phase", "prefill", "--context", "8k", "--scheme", "ring"], "--scheme"),
    (["--phase", "decode", "--context", "8k", "--merge-by", "reduce"], "--merge"),
    (["--phase", "prefill"], "--context"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, words):
    argv = [*BASE, *argv]
    if "--nodes" in argv[len(BASE):]:
        i = BASE.index("--nodes")
        argv = BASE[:i] + BASE[i + 2:] + argv[len(BASE):]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err
