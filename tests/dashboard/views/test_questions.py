"""The Questions view without a browser: each explanation's numbers against closed forms
written from docs/design.md (or a numpy merge written here), the answer and score callbacks,
and the URL's view/question/language."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from dashboard import nav
from dashboard.i18n import Translator
from dashboard.quiz_explain import explain, merge_size
from dashboard.state import defaults, scenario_from_values
from dashboard.views.questions import ANSWERS, score
from sim.hardware.cluster import Gpu, Hardware, Link
from sim.scenario.config import Scenario, Workload
from tests.dashboard.conftest import controls
from tests.reference import token_owner

DEFAULT = scenario_from_values(defaults())
SMALL = Scenario(workload=Workload(seq=32768, heads=16, kv_heads=4, head_dim=64, dtype="fp16",
                                   causal=True),
                 n_gpus=4, layout="contiguous")
SCENARIOS = [pytest.param(DEFAULT, id="default"), pytest.param(SMALL, id="small")]


def _sizes(sc: Scenario):
    w = sc.workload
    return w, sc.n_gpus, w.seq // sc.n_gpus, {"fp32": 4, "bf16": 2, "fp16": 2}[w.dtype]


@pytest.mark.parametrize("sc", SCENARIOS)
@pytest.mark.parametrize("lang", ["en", "id"])
def test_question_1_tokens_per_gpu(sc, lang):
    w, n, c, b = _sizes(sc)
    t = Translator(lang)
    ex = explain(1, sc, t)
    assert ex.numbers["tokens_per_gpu"] == ex.numbers["tokens_per_gpu_min"] == c
    assert ex.numbers["shard_bytes"] == w.batch * c * (w.heads + 2 * w.kv_heads) * w.head_dim * b
    assert t.int(c) in ex.live and t.int(w.seq) in ex.live
    assert ex.figure.layout.meta["tokens_per_gpu"] == c


@pytest.mark.parametrize("sc", SCENARIOS)
def test_question_2_kv_block_per_hop(sc):
    w, n, c, b = _sizes(sc)
    t = Translator("en")
    ex = explain(2, sc, t)
    block = 2 * w.batch * w.kv_heads * c * w.head_dim * b       # docs/design.md: bytes of a ring step
    assert ex.numbers["kv_block_bytes"] == block
    assert ex.numbers["hops"] == n - 1
    assert ex.numbers["total_bytes"] == pytest.approx(n * (n - 1) * block)   # forward only
    assert t.bytes(block) in ex.live
    assert len(ex.figure.frames) == n                           # one frame per ring step


def _reference_rows(sc: Scenario, row: int):
    """Ring merge of one query row, from the definitions: rank r holds its layout's
    tokens, at step k it merges the K/V of rank (r - k) mod N; online softmax."""
    n, seq = merge_size(sc)
    rng = np.random.default_rng(0)             # sim.scenario.online_softmax.example's inputs
    q, k, v = (rng.standard_normal((seq, 16)) for _ in range(3))
    q *= 2.0
    s = q[row] @ k.T / math.sqrt(16)
    owner = np.array([token_owner(sc.layout, seq, n, tok) for tok in range(seq)])
    r = owner[row]
    m, steps = -math.inf, []
    for step in range(n):
        keys = np.flatnonzero((owner == (r - step) % n) & (np.arange(seq) <= row))
        block_max = s[keys].max() if keys.size else -math.inf
        new = max(m, block_max)
        steps.append((m, new, block_max))
        m = new
    full = np.exp(s[: row + 1] - s[: row + 1].max())
    return steps, (full / full.sum()) @ v[: row + 1]


@pytest.mark.parametrize("sc", SCENARIOS)
def test_questions_3_and_7_merge_of_one_row(sc):
    n, seq = merge_size(sc)
    row = seq - 1
    steps, _ = _reference_rows(sc, row)
    t = Translator("id")
    ex3 = explain(3, sc, t, query_row=row)
    assert ex3.numbers["query_row"] == row and ex3.numbers["steps"] == n
    assert ex3.numbers["max_abs_error"] < 1e-12                 # exact up to float64 rounding
    ex7 = explain(7, sc, t, query_row=row)
    rises = [i for i, (m_old, m_new, _) in enumerate(steps) if i > 0 and math.isfinite(m_old)
             and m_new > m_old]
    assert ex7.numbers["step"] == (rises[0] if rises else None)
    if rises:
        m_old, m_new, block_max = steps[rises[0]]
        assert ex7.numbers["m_old"] == pytest.approx(m_old)
        assert ex7.numbers["m_new"] == pytest.approx(m_new) == pytest.approx(block_max)
        assert ex7.numbers["factor"] == pytest.approx(math.exp(m_old - m_new))
        assert t.num(math.exp(m_old - m_new), 4) in ex7.live


def test_question_7_row_without_a_rise_says_so():
    sc = DEFAULT
    n, seq = merge_size(sc)
    for row in range(seq):
        steps, _ = _reference_rows(sc, row)
        if not any(i > 0 and math.isfinite(a) and b > a for i, (a, b, _) in enumerate(steps)):
            ex = explain(7, sc, Translator("en"), query_row=row)
            assert ex.numbers["step"] is None and "never rose" in ex.live
            return
    pytest.skip("every row's maximum rises in this example")


@pytest.mark.parametrize("sc", SCENARIOS)
def test_question_4_kv_held(sc):
    w, n, c, b = _sizes(sc)
    ex = explain(4, sc, Translator("en"))
    kv = 2 * w.batch * w.kv_heads * w.head_dim * b
    assert ex.numbers["kv_held_bytes"] == 3 * kv * c            # own shard + 2 buffers
    assert ex.numbers["full_kv_bytes"] == kv * w.seq
    assert ex.numbers["share"] == pytest.approx(3 / n)
    assert Translator("en").pct(3 / n) in ex.live


# the closed form of fact 5 is the flat model's (one rate for every block, no merge) on the
# link's alpha-beta (not NCCL's costs)
FLAT = [pytest.param(scenario_from_values(defaults() | {"efficiency": 0.5, "comm-cost": "link"}), id="default-flat"),
        pytest.param(SMALL.with_(hardware=Hardware(gpu=Gpu.preset("H100-SXM", efficiency=0.5), comm_cost="link")),
                     id="small-flat")]
# ... with no fixed cost on either side (launch overhead, link latency): the curves then cross
# where the slopes do
NO_FIXED_COSTS = [pytest.param(scenario_from_values(defaults() | {"efficiency": 0.5, "comm-cost": "link",
                                                                   "overhead-us": 0.0, "link-latency-us": 0.0}),
                               id="default-flat"),
                  pytest.param(SMALL.with_(hardware=Hardware(
                      gpu=Gpu.preset("H100-SXM", efficiency=0.5, launch_overhead_us=0.0),
                      link=Link(bandwidth_gbps=450.0, latency_us=0.0), comm_cost="link")), id="small-flat")]


@pytest.mark.parametrize("sc", NO_FIXED_COSTS)
def test_question_5_crossover_and_bandwidth(sc):
    w, n, c, b = _sizes(sc)
    rate = sc.hardware.gpu.rate_flops(w.dtype)
    # compute 4 c^2 d H B / F = transfer 2 c d H_kv B b / W  <=>  W = H_kv b F / (2 c H)
    b_star = w.kv_heads * b * rate / (2 * c * w.heads) / 1e9
    t = Translator("en")
    ex = explain(5, sc, t)
    assert ex.numbers["crossover_bandwidth_gbps"] == pytest.approx(b_star, rel=2e-6)
    link = sc.hardware.link
    assert ex.numbers["bandwidth_gbps"] == link.bandwidth_gbps
    assert ex.numbers["transfer_s"] == pytest.approx(
        link.latency_us * 1e-6 + 2 * w.kv_heads * c * w.head_dim * b / (link.bandwidth_gbps * 1e9))
    assert ex.numbers["crossover_tokens"] == pytest.approx(
        w.kv_heads * b * rate / (2 * w.heads * link.bandwidth_gbps * 1e9), rel=2e-6)
    assert t.gbps(b_star) in ex.live
    # moving the bandwidth across the crossover flips the verdict and the simulation
    nocausal = sc.with_(workload=replace(sc.workload, causal=False))
    slow = explain(5, nocausal, t, bandwidth_gbps=b_star / 3)
    fast = explain(5, nocausal, t, bandwidth_gbps=b_star * 3)
    assert not slow.numbers["hides"] and fast.numbers["hides"]
    assert "exposed" in slow.live and "hides" in fast.live
    assert slow.numbers["exposed_comm_s"] > 0.1 * slow.numbers["makespan_s"]
    assert fast.numbers["exposed_comm_s"] == 0


@pytest.mark.parametrize("sc", FLAT)     # work shares are time shares when every block runs at one rate
@pytest.mark.parametrize("lang", ["en", "id"])
def test_questions_6_and_8_causal_work(sc, lang):
    w, n, c, b = _sizes(sc)
    S = w.seq
    first = c * (c + 1) / 2                                     # contiguous rank 0: a triangle
    last = c * c * (n - 1) + first                              # rank n-1: n-1 squares + triangle
    t = Translator(lang)
    ex6 = explain(6, sc, t)
    assert ex6.numbers["ratio"] == pytest.approx(last / first)
    assert ex6.numbers["imbalance_contiguous"] == pytest.approx(last / (S * (S + 1) / 2 / n), rel=1e-2)
    assert ex6.numbers["imbalance_balanced"] == pytest.approx(1.0, abs=1e-2)
    assert t.num(last / first) in ex6.live
    ex8 = explain(8, sc, t)
    assert ex8.numbers["last_share"] == pytest.approx(last / (S * (S + 1) / 2))
    assert ex8.numbers["first_share"] == pytest.approx(first / (S * (S + 1) / 2))
    assert ex8.numbers["last_keys"] == S and t.int(S) in ex8.live
    assert t.pct(last / (S * (S + 1) / 2)) in ex8.live


def test_causal_questions_turn_the_mask_on():
    sc = DEFAULT.with_(workload=Workload(causal=False))
    ex = explain(6, sc, Translator("en"))
    assert ex.numbers["ratio"] > 10 and "turns it on" in ex.live


def test_a_custom_link_changes_question_5():
    sc = DEFAULT.with_(hardware=Hardware(link=Link(name="custom", bandwidth_gbps=5.0)))
    ex = explain(5, sc, Translator("en"))
    assert ex.numbers["bandwidth_gbps"] == 5.0 and not ex.numbers["hides"]


def test_score_counts_first_answers():
    answers = {"1": {"first": ANSWERS[1], "last": ANSWERS[1]},
               "2": {"first": (ANSWERS[2] + 1) % 4, "last": ANSWERS[2]},
               "bogus": {"first": 0}}
    assert score(answers) == (1, 2)
    assert score(None) == (0, 0)


# --- the URL ---------------------------------------------------------------------------

def test_parse_nav_reads_and_ignores():
    assert nav.parse_nav("?view=questions&q=5&lang=id&gpus=16") == (
        {"view": "questions", "q": 5, "lang": "id"}, [])
    parsed, ignored = nav.parse_nav("?view=nope&q=99&lang=xx&q=abc")
    assert parsed == {"view": "timeline", "q": 1, "lang": "en"}
    assert ignored == ["view=nope", "q=99", "lang=xx", "q=abc"]


def test_with_nav_keeps_both_halves():
    assert nav.with_nav("?gpus=16", "?view=questions&q=3&lang=id") == "?gpus=16&view=questions&q=3&lang=id"
    assert nav.with_nav("?gpus=16", "?gpus=8&view=questions&q=3", q=4) == "?gpus=16&view=questions&q=4"
    assert nav.with_nav("", "", view="timeline", lang="en") == ""
    assert nav.with_nav("", "?q=7", view="memory") == "?view=memory"   # q only with the questions


# --- callbacks over HTTP ------------------------------------------------------------------



def test_link_opens_view_question_and_language(client):
    status, out = client.call("nav-msg.children", {"url.pathname": "/",
                                                   "url.search": "?view=questions&q=5&lang=id"})
    assert status == 200
    assert out["tabs"]["value"] == "questions" and out["quiz-q"]["value"] == 5
    assert out["lang"]["value"] == "id" and "nav-msg" not in out      # nothing to say, nothing shown
    status, out = client.call("nav-msg.children", {"url.pathname": "/", "url.search": "?q=0&lang=klingon"})
    assert status == 200 and out["quiz-q"]["value"] == 1 and out["lang"]["value"] == "en"
    said = out["nav-msg"]["children"]
    assert "q=0" in said and "lang=klingon" in said
    # the same line again is left alone; a good link then clears it
    _, out = client.call("nav-msg.children", {"url.pathname": "/", "url.search": "?q=0&lang=klingon",
                                              "nav-msg.children": said})
    assert "nav-msg" not in out
    _, out = client.call("nav-msg.children", {"url.pathname": "/", "url.search": "?q=2", "nav-msg.children": said})
    assert out["nav-msg"]["children"] is None


def test_view_question_and_language_go_into_the_url_in_the_browser(client):
    # the callback that writes the query from the view, question and language runs in the
    # browser (dashboard.nav.TO_URL_JS; tests/dashboard/test_browser_questions.py runs it
    # against dashboard.nav.with_nav); a plan's candidate writes the query too, on the server
    writers = [d for d in client.deps if d["output"].startswith("url.search@")
               and [i["id"] for i in d["inputs"]] == ["tabs", "quiz-q", "lang"]]
    assert len(writers) == 1 and writers[0].get("clientside_function")


def test_a_control_change_keeps_the_view_in_the_url(client):
    status, out = client.call("scenario.data", {"url.search": "?view=questions&q=3&lang=id"}
                              | controls(gpus=16) | {"scenario.data": {"values": defaults()}},
                              ["gpus.value"])
    assert out["url"]["search"] == "?gpus=16&view=questions&q=3&lang=id"


def test_a_link_that_only_moves_the_view_keeps_the_scenario(client):
    values = defaults() | {"gpus": 16}
    status, out = client.call("scenario.data", {"url.search": "?gpus=16&view=memory"} | controls()
                              | {"scenario.data": {"values": values}}, ["url.search"])
    assert status in (200, 204) and "scenario" not in out


def _explanation(client, q, answers, lang="en", **extra):
    values = {"quiz-answers.data": answers, "quiz-q.value": q, "lang.value": lang,
              "scenario.data": {"values": defaults()}, "quiz-bw.value": None,
              "quiz-row.value": None, "tabs.value": "questions"} | extra
    return client.call("quiz-verdict.children", values, ["quiz-answers.data"])


@pytest.mark.parametrize("q", sorted(ANSWERS))
@pytest.mark.parametrize("lang", ["en", "id"])
def test_each_answer_explains_and_draws(client, q, lang):
    t = Translator(lang)
    right = {str(q): {"first": ANSWERS[q], "last": ANSWERS[q]}}
    status, out = _explanation(client, q, right, lang)
    assert status == 200
    assert out["quiz-verdict"]["children"] == "✓ " + t("quiz.right")
    assert out["quiz-why"]["children"] == t(f"q{q}.why")
    fig = out["quiz-figure"]["figure"]
    assert fig["data"] and fig["layout"]["meta"]["q"] == q
    assert out["quiz-right"]["style"] == {}
    wrong = (ANSWERS[q] + 1) % 4
    status, out = _explanation(client, q, {str(q): {"first": wrong, "last": wrong}}, lang)
    assert out["quiz-verdict"]["children"].startswith("✗ ")
    assert t(f"q{q}.choice.{ANSWERS[q]}") in out["quiz-verdict"]["children"]


def test_unanswered_question_hides_the_view(client):
    status, out = _explanation(client, 4, {})
    assert out["quiz-verdict"]["children"] == Translator("en")("quiz.prompt")
    assert out["quiz-right"]["style"] == {"display": "none"} and "quiz-figure" not in out


def test_final_score_after_eight_answers(client):
    answers = {str(q): {"first": a, "last": a} for q, a in ANSWERS.items()}
    answers["8"] = {"first": (ANSWERS[8] + 1) % 4, "last": ANSWERS[8]}
    status, out = _explanation(client, 8, answers, "id")
    assert out["quiz-final"]["children"] == Translator("id")("quiz.final", right=7, total=8)


def test_bandwidth_control_moves_question_5(client):
    answers = {"5": {"first": 1, "last": 1}}
    status, out = _explanation(client, 5, answers, **{"quiz-bw.value": math.log10(2.0)})
    meta = out["quiz-figure"]["figure"]["layout"]["meta"]
    assert meta["bandwidth_gbps"] == pytest.approx(2.0, rel=1e-3) and not meta["hides"]


def test_answer_records_first_and_last(client):
    values = {"quiz-choice.value": 2, "quiz-q.value": 3, "quiz-answers.data": {}}
    status, out = client.call("quiz-answers.data", values, ["quiz-choice.value"])
    assert out["quiz-answers"]["data"] == {"3": {"first": 2, "last": 2}}
    values |= {"quiz-choice.value": 0, "quiz-answers.data": out["quiz-answers"]["data"]}
    status, out = client.call("quiz-answers.data", values, ["quiz-choice.value"])
    assert out["quiz-answers"]["data"] == {"3": {"first": 2, "last": 0}}
    status, out = client.call("quiz-answers.data", values | {"quiz-next.n_clicks": 1},
                              ["quiz-next.n_clicks"])
    assert out["quiz-q"]["value"] == 4
    status, out = client.call("quiz-answers.data", values | {"quiz-restart.n_clicks": 1},
                              ["quiz-restart.n_clicks"])
    assert out["quiz-answers"]["data"] == {} and out["quiz-q"]["value"] == 1


def test_language_switch_translates_the_page(client):
    status, out = client.call("tab-questions.label", {"lang.value": "id"}, ["lang.value"])
    assert out["tab-questions"]["label"] == "Pertanyaan"
    assert out["gpus-label"]["children"] == "GPU" and out["seq-label"]["children"] == "Panjang urutan"
    assert out["overlap"]["options"][0]["label"] == "aktif"
    status, out = client.call("tab-questions.label", {"lang.value": "en"}, ["lang.value"])
    assert out["seq-label"]["children"] == "Sequence length"


def test_a_large_ring_is_drawn_on_sixteen_gpus_and_says_so():
    sc = DEFAULT.with_(n_gpus=64)
    ex = explain(2, sc, Translator("en"))
    assert len(ex.figure.frames) == 16 and ex.numbers["hops"] == 63
    assert "yours has 64" in ex.live and "yours has 64" in ex.figure.layout.title.text
    # frame k puts block j on GPU (j + k) mod n: at the last step GPU r holds block r + 1
    last = ex.figure.frames[-1].data[0]
    assert [h.split()[-1] for h in last.hovertext] == [str(j) for j in range(16)]
    assert last.hovertext[0] == "GPU 15 holds the K/V block of GPU 0"
