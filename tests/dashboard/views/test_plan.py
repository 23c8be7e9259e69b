"""The Plan view: its chart, a candidate loaded into the other views through the URL,
and its callbacks driven over HTTP."""

from __future__ import annotations

import pytest

from dashboard.app import create_app
from dashboard.figures.plan import plan_chart
from dashboard.i18n import Translator
from dashboard.state import CONTROL_IDS, control_label, values_from_query
from dashboard.views.plan import DEFAULTS, INPUT_IDS, MAX_GPUS, query_for_candidate, request_of
from sim.errors import RingsimError

GIB = 2 ** 30


def _cand(rank, scheme, step_s, mem_gib, fits):
    return {"rank": rank, "scheme": scheme, "variant": f"v{rank}", "step_s": step_s, "makespan_s": step_s / 4,
            "peak_mem_bytes": mem_gib * GIB, "fits": fits}


def test_the_chart_has_a_point_per_candidate_and_the_limit():
    cands = [_cand(1, "hybrid", 2.0, 40, True), _cand(2, "ring", 2.5, 30, True),
             _cand(3, "ring", 3.0, 35, True), _cand(4, "ulysses", 2.2, 90, False)]
    fig = plan_chart(cands, 80 * GIB)
    points = {}
    for tr in fig.data:
        for x, y, i in zip(tr.x, tr.y, tr.customdata):
            points[i] = (x, y, tr.marker.symbol)
    assert sorted(points) == [0, 1, 2, 3]
    assert points[3] == (90, 2.2, "circle-open") and points[0] == (40, 2.0, "circle")
    (line,) = [s for s in fig.layout.shapes if s.type == "line"]
    assert line.x0 == line.x1 == 80
    assert fig.layout.meta["limit_gib"] == 80


COMMAND = ("ringsim simulate --gpus 64 --seq 1048576 --batch 1 --heads 64 --kv-heads 8 --head-dim 128 "
           "--dtype bf16 --pass fwdbwd --gpu H100-SXM --link nvlink4 --inter-link ib-ndr --gpus-per-node 8 "
           "--scheme hybrid --ulysses-degree 8 --ring-degree 8 --placement ring-inner --layout striped")


def test_a_candidate_becomes_the_pages_controls():
    query, dropped = query_for_candidate(COMMAND)
    values, ignored = values_from_query(query)
    assert ignored == []
    assert (values["gpus"], values["seq"], values["heads"], values["kv-heads"]) == (64, 1048576, 64, 8)
    assert (values["pass"], values["inter-link"], values["layout"], values["gpus-per-node"]) == (
        "fwdbwd", "ib-ndr", "striped", 8)
    # the scheme's options: a control of the page where it has one, else named as left out
    for flag, value in (("scheme", "hybrid"), ("ulysses-degree", 8), ("ring-degree", 8),
                        ("placement", "ring-inner")):
        assert (flag in CONTROL_IDS and values[flag] == value) or f"--{flag} {value}" in dropped
    # simulate's defaults are not reported as left out
    assert not any(d.startswith("--batch") or d.startswith("--head-groups") for d in dropped)


def test_the_inputs_make_the_planners_request():
    req = request_of(dict(DEFAULTS, **{"plan-seq": "1M", "plan-nodes": 2}))
    assert req.seq == 2 ** 20 and req.n_gpus == 16 and req.inter_link == "ib-ndr"
    assert request_of(DEFAULTS).inter_link is None            # one node: no link between nodes
    for change, match in [({"plan-seq": "1Q"}, "size such as"), ({"plan-nodes": 0}, "nodes"),
                          ({"plan-nodes": MAX_GPUS}, "at most"), ({"plan-headroom": "lots"}, "headroom"),
                          ({"plan-model": "custom", "plan-layers": None}, "layers")]:
        with pytest.raises(RingsimError, match=match):
            request_of(dict(DEFAULTS, **change))



def _inputs(**changes):
    vals = dict(DEFAULTS, **changes)
    return {f"{cid}.value": vals[cid] for cid in INPUT_IDS}


def test_the_view_plans_draws_and_loads_a_candidate(client):
    status, out = client.call("plan-result.data", {"tabs.value": "plan", "plan-run.n_clicks": 0,
                                                   **_inputs(**{"plan-seq": "16k", "plan-model": "llama3-8b"})},
                              ["tabs.value"])
    assert status == 200 and out["plan-msg"]["children"] == ""
    data = out["plan-result"]["data"]
    assert data["simulated"] == len(data["candidates"]) > 10 and data["request"]["seq"] == 16384
    status, out = client.call("plan-chart.figure", {"plan-result.data": data, "lang.value": "id",
                                                    "plan-top.value": 5}, ["plan-result.data"])
    assert status == 200
    assert sum(len(tr["x"]) for tr in out["plan-chart"]["figure"]["data"]) == len(data["candidates"])
    assert "memori per GPU" in str(out["plan-chart"]["figure"]["layout"])
    assert str(out["plan-table"]["children"]).count("plan-load") == 5
    ring = next(i for i, c in enumerate(data["candidates"]) if c["scheme"] == "ring")
    status, out = client.call("plan-load-msg.children",
                              {"plan-chart.clickData": {"points": [{"customdata": ring}]}, "plan-result.data": data,
                               "url.search": "?lang=id&view=plan", "lang.value": "id"},
                              ["plan-chart.clickData"])
    assert status == 200 and out["plan-load-msg"]["children"] == ""
    # the page's own query changes (no reload): the timeline, the default view, in the same language
    search = out["url"]["search"]
    assert search.startswith("?") and "view=" not in search and "lang=id" in search
    assert out["tabs"]["value"] == "timeline"
    values, _ = values_from_query(search)
    assert (values["seq"], values["gpus"], values["pass"]) == (16384, 8, "fwdbwd")
    assert values["layout"] == data["candidates"][ring]["settings"]["layout"]
    # a hybrid loads only where the page has controls for its scheme's options
    hybrid = next(i for i, c in enumerate(data["candidates"]) if c["scheme"] == "hybrid")
    status, out = client.call("plan-load-msg.children",
                              {"plan-load.n_clicks": None, "plan-chart.clickData": {"points": [{"customdata": hybrid}]},
                               "plan-result.data": data, "url.search": "", "lang.value": "en"},
                              ["plan-chart.clickData"])
    if "scheme" in CONTROL_IDS and "ulysses-degree" in CONTROL_IDS:
        assert "scheme=hybrid" in out["url"]["search"]
    else:
        assert "url" not in out
        msg = out["plan-load-msg"]["children"]
        assert "--scheme hybrid" in msg and data["candidates"][hybrid]["command"] in msg


def test_a_mistake_is_a_message_beside_the_button(client):
    status, out = client.call("plan-result.data", {"tabs.value": "plan", "plan-run.n_clicks": 1,
                                                   **_inputs(**{"plan-seq": "lots"})}, ["plan-run.n_clicks"])
    assert status == 200 and "size such as 128k or 1M" in out["plan-msg"]["children"]
    assert "plan-result" not in out


@pytest.mark.browser
def test_in_a_browser_a_candidate_loads_into_the_timeline(dash_duo):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    dash_duo.start_server(create_app())
    dash_duo.driver.get(dash_duo.server_url + "/?view=plan")
    dash_duo.wait_for_element("#plan-table table", timeout=60)
    seq = dash_duo.find_element("#plan-seq")
    seq.send_keys(Keys.CONTROL, "a")
    seq.send_keys("64k", Keys.ENTER)
    dash_duo.find_element("#plan-run").click()
    dash_duo.wait_for_contains_text("#plan-summary", "65,536 tokens", timeout=60)
    dash_duo.wait_for_element("#plan-chart .main-svg", timeout=60)
    row = dash_duo.driver.find_element(By.XPATH, "//*[@id='plan-table']//tr[td[2][normalize-space()='ring']]")
    button = row.find_element(By.TAG_NAME, "button")
    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'});", button)
    button.click()
    dash_duo.wait_for_contains_text("#timeline .gtitle", "8 GPUs", timeout=60)
    url = dash_duo.driver.current_url
    assert "seq=65536" in url and "pass=fwdbwd" in url and "view=" not in url
    # the plan's inputs are still there when the reader comes back
    dash_duo.driver.find_element(By.XPATH, "//*[@id='tabs']//*[normalize-space()='Plan']").click()
    dash_duo.wait_for_element("#plan-table table", timeout=60)
    assert dash_duo.find_element("#plan-seq").get_attribute("value") == "64k"
    assert [e for e in (dash_duo.get_logs() or []) if e.get("level") == "SEVERE"] == []


def test_the_batch_input_reaches_the_planner(client):
    """The view's batch is the plan's: in the request, and through the page's callback,
    whose every candidate then simulates (and reproduces with) that batch."""
    assert request_of(dict(DEFAULTS, **{"plan-batch": 3})).batch == 3
    runs = {}
    for batch in (1, 2):
        status, out = client.call("plan-result.data", {"tabs.value": "plan", "plan-run.n_clicks": 0,
                                                       **_inputs(**{"plan-seq": "16k", "plan-model": "llama3-8b",
                                                                    "plan-batch": batch})}, ["tabs.value"])
        assert status == 200 and out["plan-msg"]["children"] == ""
        runs[batch] = out["plan-result"]["data"]
    assert runs[2]["request"]["batch"] == 2 and runs[1]["request"]["batch"] == 1
    assert all("--batch 2" in c["command"] for c in runs[2]["candidates"])


def test_with_a_global_batch_the_view_plans_the_whole_step(client):
    status, out = client.call("plan-result.data", {"tabs.value": "plan", "plan-run.n_clicks": 0,
                                                   **_inputs(**{"plan-seq": "8k", "plan-global-batch": "256k"})},
                              ["tabs.value"])
    assert status == 200 and out["plan-msg"]["children"] == ""
    data = out["plan-result"]["data"]
    assert data["mode"] == "step" and data["global_batch"] == 256 * 1024 and data["gpus"] == 8
    cands = data["candidates"]
    assert cands and all(c["command"].startswith("ringsim step ") for c in cands)
    status, out = client.call("plan-chart.figure", {"plan-result.data": data, "lang.value": "id",
                                                    "plan-top.value": 4}, ["plan-result.data"])
    assert status == 200
    fig = out["plan-chart"]["figure"]
    # every candidate's bars add up to its step
    for i, c in enumerate(cands[:4]):
        assert sum(tr["x"][i] for tr in fig["data"]) * _unit_scale(fig) == pytest.approx(c["step_s"], rel=1e-6)
    assert "perkalian matriks (GEMM)" in str(fig["data"])                    # the parts in the page's language
    assert str(out["plan-table"]["children"]).count("ringsim step") == 4
    assert "komputasi ulang" in str(out["plan-table"]["children"]) and "recompute" not in str(fig["data"])
    pipe = out["plan-pipeline"]["figure"]
    assert pipe["layout"]["meta"]["stages"] == cands[0]["parallel"]["pp"]
    assert out["plan-pipeline-box"]["style"] == {}
    # a step's row has no view of its own to load into
    status, out = client.call("plan-load-msg.children",
                              {"plan-chart.clickData": {"points": [{"customdata": 0}]}, "plan-result.data": data,
                               "url.search": "", "lang.value": "en"}, ["plan-chart.clickData"])
    assert status == 204 or "url" not in out


def _unit_scale(fig) -> float:
    title = fig["layout"]["xaxis"]["title"]["text"]
    return {"(s)": 1.0, "(ms)": 1e-3, "(us)": 1e-6, "(µs)": 1e-6}[title[title.rindex("("):]]


@pytest.mark.parametrize("parallel, english, indonesian", [
    (dict(tp=8, cp=1, pp=1, dp=4, zero=3, recompute="none"), "TP 8 CP 1 PP 1 DP 4, ZeRO-3, recompute none",
     "TP 8 CP 1 PP 1 DP 4, ZeRO-3, komputasi ulang tidak ada"),
    (dict(tp=8, cp=4, pp=4, dp=2, zero=1, recompute="selective", scheme="allgather", tp_overlap=True, interleave=2),
     "TP 8 CP 4 PP 4 DP 2, ZeRO-1, recompute selective, CP allgather, TP overlapped, 2 virtual stages",
     "TP 8 CP 4 PP 4 DP 2, ZeRO-1, komputasi ulang selektif, CP all-gather, TP ditumpangtindihkan, 2 tahap virtual"),
])
def test_a_steps_split_reads_in_the_pages_language(parallel, english, indonesian):
    from dashboard.explain import step_split
    from dashboard.i18n import Translator
    from sim.training.plan import label

    c = {"parallel": {"scheme": "ring", "tp_overlap": False, "interleave": 1} | parallel}
    assert label(c) == english
    assert step_split(Translator("en"), c) == english
    assert step_split(Translator("id"), c) == indonesian


@pytest.mark.parametrize("lang, typed, words", [
    ("en", {"plan-nodes": 0}, "Nodes must be a whole number more than 0, got 0"),
    ("id", {"plan-nodes": 0}, "Simpul harus bilangan bulat lebih dari 0, bukan 0"),
    ("en", {"plan-seq": "lots"}, "must be a whole number more than 0 or a size such as 128k or 1M (2^20), got 'lots'"),
    ("id", {"plan-seq": "lots"}, "harus bilangan bulat lebih dari 0 atau ukuran seperti 128k atau 1M (2^20), bukan 'lots'"),
    ("id", {"plan-global-batch": "16Q"}, "harus bilangan bulat lebih dari 0 atau ukuran seperti"),
    ("id", {"plan-headroom": "banyak"}, "harus bagian seperti 10% atau jumlah seperti 8GiB, bukan 'banyak'"),
])
def test_a_mistake_names_the_input_as_labelled_in_the_page_s_language(client, lang, typed, words):
    status, out = client.call("plan-result.data", {"tabs.value": "plan", "plan-run.n_clicks": 1, "lang.value": lang,
                                                   **_inputs(**typed)}, ["plan-run.n_clicks"])
    t = Translator(lang)
    label = control_label(t, next(iter(typed)))
    assert status == 200 and words in out["plan-msg"]["children"]
    assert out["plan-msg"]["children"].startswith(label) and "seq " not in out["plan-msg"]["children"]


@pytest.mark.parametrize("lang, seq", [("id", "1,5M"), ("en", "1.5M"), ("id", "1.572.864"), ("en", "1,572,864")])
def test_a_size_reads_as_the_page_s_language_writes_it(lang, seq):
    from dashboard.views.plan import read_plan

    assert read_plan(dict(DEFAULTS, **{"plan-seq": seq}), lang)["plan-seq"] == "1572864"
