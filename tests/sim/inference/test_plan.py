"""`ringsim plan --phase`: every split tried, the ranking for a latency target, and the
refusals with their reason."""

import json

from sim.cli.main import main
from sim.hardware.cluster import Hardware, Link
from sim.inference.plan import plan_inference
from sim.scenario.models import model_preset

HW = Hardware(inter_link=Link.preset("ib-ndr"))


def test_a_target_puts_the_fewest_gpus_that_meet_it_first():
    result = plan_inference(model_preset("llama3-8b"), HW, 4, "prefill", 65536, 65536)
    fastest = result["candidates"][0]["latency_s"]
    slowest = max(r["latency_s"] for r in result["candidates"])
    target = (fastest + slowest) / 2
    ranked = plan_inference(model_preset("llama3-8b"), HW, 4, "prefill", 65536, 65536,
                            latency_target_s=target)["candidates"]
    meets = [r for r in ranked if r["meets"]]
    assert meets and all(r["latency_s"] <= target for r in meets)
    assert ranked[:len(meets)] == meets                       # those that meet it first
    assert [r["gpus"] for r in meets] == sorted(r["gpus"] for r in meets)
    assert all(not r["meets"] for r in ranked[len(meets):])
    # without a target: by latency
    times = [r["latency_s"] for r in result["candidates"]]
    assert times == sorted(times)


def test_every_split_of_the_nodes_is_tried_once():
    result = plan_inference(model_preset("llama3-70b"), HW, 2, "decode", 32768, 64)
    splits = {(r["nodes"], r["tp"]) for r in result["candidates"] + result["refused"]}
    assert splits == {(n, t) for n in (1, 2) for t in (1, 2, 4, 8)}
    # TP 1 holds every weight of a 70B model on one GPU: refused, with the reason
    assert all("weights do not fit" in r["refused"] for r in result["refused"] if r["tp"] == 1)


def test_the_command_dispatches_and_keeps_seq_for_training(capsys):
    code = main(["plan", "--phase", "decode", "--model", "llama3-8b", "--context", "16k", "--new", "64",
                 "--cluster", "dgx-h100", "--json", "--top", "3"])
    out, _ = capsys.readouterr()
    d = json.loads(out)
    assert code == 0 and len(d["candidates"]) == 3 and "--cluster dgx-h100" in d["candidates"][0]["command"]
    assert main(["plan", "--model", "llama3-8b"]) == 2
    assert "--seq" in capsys.readouterr().err
    assert main(["plan", "--phase", "prefill", "--model", "llama3-8b"]) == 2
    assert "--context" in capsys.readouterr().err
