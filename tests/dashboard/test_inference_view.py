"""The Inference view: its three charts drawn from the model's answers, and its callback
in both languages over HTTP."""

from __future__ import annotations

import pytest

from dashboard.app import create_app
from dashboard.client import CallbackClient
from dashboard.i18n import Translator
from dashboard.views.inference import crossover, decode_curve, prefill_timelines
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.inference.prefill import PrefillAttention, simulate_prefill_attention
from sim.inference.work import rule_threshold
from sim.trace.format import COMPUTE

HW = Hardware(gpu=Gpu(name="flat", achieved_tflops=100.0, memory_bandwidth_gbps=1000.0),
              link=Link(bandwidth_gbps=50.0, latency_us=2.0), gpus_per_node=1, comm_cost="link")


def test_the_timeline_draws_every_attention_call_of_both_rings():
    traces = {s: simulate_prefill_attention(PrefillAttention(n_ranks=4, cached=4096, new=1024, heads=8, kv_heads=1,
                                                             scheme=s), HW) for s in ("pass-kv", "pass-q")}
    fig = prefill_timelines(traces)
    bars = [t for t in fig.data if t.name == "attention"]
    assert len(bars) == 2
    for bar, trace in zip(bars, traces.values()):
        c = trace.columns
        ran = (c.stream == COMPUTE) & (c.end_s > c.start_s)
        assert len(bar.x) == ran.sum()
    # pass-Q returns its partials: drawn on its row alone
    assert [t.name for t in fig.data].count("partials returned") == 1


def test_the_crossover_marks_where_the_rule_turns():
    rows = [{"cached_share": x, "pass-kv": 1.0 + x, "pass-q": 2.0 - x, "allgather": 1.5} for x in (0, 0.5, 0.9)]
    fig = crossover(rows, rule_threshold(64, 8))
    (line,) = [s for s in fig.layout.shapes if s.type == "line"]
    assert line.x0 == pytest.approx(1 - 2 * 8 / 64)
    assert [t.name for t in fig.data] == ["pass-KV", "pass-Q", "all-gather"]
    assert list(fig.data[0].y) == [1.0 + x for x in (0, 0.5, 0.9)]          # seconds: the largest is 2 s


def test_the_decode_curve_has_the_step_and_its_parts():
    rows = [{"context": c, "tpot_s": 0.01 + c * 1e-9, "attention_s": c * 1e-9, "merge_s": 1e-4}
            for c in (8192, 65536)]
    fig = decode_curve(rows)
    assert len(fig.data) == 3 and fig.layout.xaxis.type == "log"
    assert list(fig.data[0].x) == [8192, 65536]


@pytest.mark.parametrize("lang", ["en", "id"])
def test_the_callback_answers_in_each_language(lang):
    client = CallbackClient.for_app(create_app())
    values = {"inf-model.value": "llama3-8b", "inf-cluster.value": "dgx-h100", "inf-nodes.value": 2,
              "inf-context.value": 32768, "inf-new.value": 0.125, "tabs.value": "inference", "lang.value": lang}
    status, out = client.call("inf-prefill.figure", values, ["inf-model.value"])
    assert status == 200
    t = Translator(lang)
    assert out["inf-model-label"]["children"] == t("inf.ctl.model")
    assert out["inf-prefill"]["figure"]["layout"]["title"]["text"] == t("inf.timeline.title")
    assert out["inf-crossover"]["figure"]["layout"]["title"]["text"] == t("inf.cross.title")
    # the charts write numbers as the page does ("0,5" on the Indonesian page)
    for graph in ("inf-prefill", "inf-crossover", "inf-decode"):
        assert out[graph]["figure"]["layout"]["separators"] == t.separators()
    assert "4,096" in out["inf-note"]["children"] or "4.096" in out["inf-note"]["children"]
    # the context lengths grouped as the page writes token counts ("131.072" in Indonesian)
    assert [o["label"] for o in out["inf-context"]["options"]] == [t.int(c) for c in (32768, 131072, 262144, 1048576)]
    # the ranks of the prefill's rows are CP ranks (each of TP 8 GPUs), not single GPUs
    assert t("inf.timeline.rank", rank=0) in out["inf-prefill"]["figure"]["layout"]["yaxis"]["ticktext"]
