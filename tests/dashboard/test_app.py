"""The app's callbacks driven over HTTP (Flask's test client), and the CLI command."""

from __future__ import annotations

import base64
import json

import pytest

from dashboard import export
from dashboard.app import create_app
from dashboard.client import CallbackClient
from dashboard.state import defaults, values_from_query
from sim.cli.main import build_parser, main
from sim.trace.format import Trace
from tests.dashboard.conftest import controls, measured_from


def _store(**changes):
    return {"values": defaults() | changes}


def test_callbacks_are_registered_on_every_app():
    # FIELD-NOTES: module-level callbacks attach to the first app only
    a, b = create_app(), create_app()
    assert len(a.callback_map) == len(b.callback_map) >= 15


def test_page_loads():
    app = create_app()
    c = app.server.test_client()
    assert c.get("/").status_code == 200
    layout = c.get("/_dash-layout").get_json()
    assert "timeline" in json.dumps(layout)


def test_url_sets_controls_and_controls_set_url(client):
    status, out = client.call("scenario.data", {"url.search": "?gpus=16&layout=striped"} | controls(),
                              ["url.search"])
    assert status == 200
    assert out["gpus"]["value"] == 16 and out["layout"]["value"] == "striped"
    assert out["scenario"]["data"]["values"]["gpus"] == 16
    status, out = client.call("scenario.data", controls(gpus=32, layout="contiguous"), ["gpus.value"])
    assert out["url"]["search"] == "?gpus=32&layout=contiguous"
    assert "value" not in out.get("gpus", {})


def test_an_address_change_sets_only_the_controls_it_changes(client):
    # the back button to ?gpus=64 from a page showing the defaults: gpus alone is redrawn
    status, out = client.call("scenario.data", {"url.search": "?gpus=64"} | controls(), ["url.search"])
    assert status == 200 and out["gpus"]["value"] == 64
    assert [cid for cid in out if "value" in out[cid]] == ["gpus"]
    assert out["scenario"]["data"]["values"] == defaults() | {"gpus": 64}
    # the page's first call sets every control, whatever it shows
    status, out = client.call("scenario.data", {"url.search": "?gpus=64"} | controls(), [])
    assert sum("value" in props for props in out.values()) == len(defaults())


def test_invalid_value_shows_a_message_and_keeps_the_last_scenario(client):
    status, out = client.call("scenario.data", controls(**{"kv-heads": 7}), ["kv-heads.value"])
    assert status == 200
    assert "must divide" in out["kv-heads-msg"]["children"]
    assert "scenario" not in out                       # views keep the last valid one
    # the line at the top names the control and says what is wrong with it
    assert "last valid scenario until the highlighted value (K/V heads) is fixed: " in out["banner"]["children"]
    assert out["banner"]["children"].endswith(out["kv-heads-msg"]["children"])
    assert "heads-msg" not in out and "seq-msg" not in out     # no message shown, none sent
    # a line shown for a control now valid is cleared; the banner too
    status, out = client.call("scenario.data", controls() | {"kv-heads-msg.children": "must divide",
                                                             "banner.children": "last valid scenario"},
                              ["kv-heads.value"])
    assert status == 200 and out["kv-heads-msg"]["children"] == "" and out["banner"]["children"] is None
    assert "scenario" in out and "heads-msg" not in out


@pytest.mark.parametrize("lang, words", [("en", "the views show the default scenario"),
                                         ("id", "tampilan menunjukkan skenario bawaan")])
def test_a_link_the_page_cannot_simulate_falls_back_to_the_defaults_and_says_so(client, lang, words):
    search = "?gpus=2000" + ("&lang=id" if lang == "id" else "")
    status, out = client.call("scenario.data", {"url.search": search} | controls(), ["url.search"])
    assert status == 200
    assert out["gpus"]["value"] == 2000                               # the link's value, to fix
    assert out["scenario"]["data"]["values"] == defaults()            # the views: the defaults
    assert words in out["banner"]["children"]
    assert "1,024" in out["gpus-msg"]["children"] or "1.024" in out["gpus-msg"]["children"]
    # the message follows the language switch
    status, out = client.call("scenario.data", {"url.search": search, "lang.value": "id",
                                                "scenario.data": {"values": defaults()}} | controls(gpus=2000),
                              ["lang.value"])
    assert out["gpus-msg"]["children"].startswith("GPU (2.000)")
    assert "scenario" not in out


def test_timeline_redraws_when_the_layout_changes(client):
    values = {"scenario.data": _store(layout="contiguous"), "tabs.value": "timeline",
              "ranks.value": [0, 7]}
    _, out = client.call("timeline.figure", values, ["scenario.data"])
    assert "contiguous" in out["timeline"]["figure"]["layout"]["title"]["text"]
    values["scenario.data"] = _store(layout="striped")
    _, out = client.call("timeline.figure", values, ["scenario.data"])
    assert "striped" in out["timeline"]["figure"]["layout"]["title"]["text"]


def test_hidden_views_do_not_compute(client):
    status, out = client.call("sweep.figure", {"scenario.data": _store(), "tabs.value": "timeline"},
                              ["scenario.data"])
    assert status == 204 and out == {}


@pytest.mark.parametrize("output, tab", [("block-map.figure", "blocks"), ("compare.figure", "compare"),
                                         ("sweep.figure", "sweep"), ("memory.figure", "memory"),
                                         ("merge.figure", "merge")])
def test_each_view_draws(client, output, tab):
    status, out = client.call(output, {"scenario.data": _store(gpus=4, seq=8192), "tabs.value": tab,
                                       "merge-row.value": 5}, ["tabs.value"])
    assert status == 200
    gid = output.split(".")[0]
    assert out[gid]["figure"]["data"]


def test_summary_and_downloads(client):
    _, out = client.call("m-makespan.children", {"scenario.data": _store()}, ["scenario.data"])
    assert out["m-makespan"]["children"].endswith("ms")
    assert "8 × H100-SXM / nvlink4" in out["scenario-line"]["children"]
    _, out = client.call("dl-csv.data", {"dl-csv-btn.n_clicks": 1, "scenario.data": _store()},
                         ["dl-csv-btn.n_clicks"])
    assert out["dl-csv"]["data"]["filename"].endswith(".metrics.csv")
    assert out["dl-csv"]["data"]["content"].startswith("scope,rank,makespan_s")
    _, out = client.call("dl-chrome.data", {"dl-chrome-btn.n_clicks": 1, "scenario.data": _store()},
                         ["dl-chrome-btn.n_clicks"])
    assert "traceEvents" in out["dl-chrome"]["data"]["content"]
    _, out = client.call("dl-trace.data", {"dl-trace-btn.n_clicks": 1, "scenario.data": _store()},
                         ["dl-trace-btn.n_clicks"])
    download = out["dl-trace"]["data"]
    assert download["base64"] and download["filename"].endswith(".trace.npz")
    back = Trace.loads(base64.b64decode(download["content"]))
    assert back.header()["format"] == "ringsim-trace" and back.n_gpus == defaults()["gpus"]


def test_trace_upload_and_overlay(client, small_trace):
    measured = measured_from(small_trace, factor=1.1, noise=0.05)
    url = "data:application/json;base64," + base64.b64encode(export.trace_json(measured).encode()).decode()
    _, out = client.call("measured.data", {"trace-upload.contents": url, "trace-upload.filename": "m.json"},
                         ["trace-upload.contents"])
    token = out["measured"]["data"]
    assert "measured trace, 4 ranks" in out["trace-upload-status"]["children"]
    _, out = client.call("overlay.figure", {"measured.data": token, "scenario.data": _store(),
                                            "tabs.value": "measured"}, ["measured.data"])
    assert out["overlay"]["figure"]["layout"]["title"]["text"].startswith("Model vs measurement")


def test_malformed_upload_shows_a_message(client):
    url = "data:application/json;base64," + base64.b64encode(b"{oops").decode()
    _, out = client.call("measured.data", {"trace-upload.contents": url, "trace-upload.filename": "x.json"},
                         ["trace-upload.contents"])
    assert "x.json: trace: not valid JSON" in out["trace-upload-msg"]["children"]
    assert "measured" not in out


def _profile_url() -> str:
    from sim.hardware.profile import ComputeGroup, LinkFit, Profile
    group = ComputeGroup("bf16", "full", "fwd", ((1e9, 1e-3), (2e9, 2e-3)), 0.0, 1e12)
    prof = Profile("fit", {("bf16", "full", "fwd"): group}, LinkFit(1e-5, 1e9),
                   measured_on={"device": "test-cpu"})
    return "data:application/json;base64," + base64.b64encode(json.dumps(prof.to_dict()).encode()).decode()


def test_profile_upload_drives_the_simulation(client):
    _, out = client.call("profile.data", {"profile-upload.contents": _profile_url(),
                                          "profile-upload.filename": "cpu.json"},
                         ["profile-upload.contents"])
    profile = out["profile"]["data"]
    assert profile["name"] == "cpu.json" and out["profile-msg"]["children"] == ""
    values = {"scenario.data": _store(gpus=4, seq=8192), "profile.data": profile}
    _, with_profile = client.call("m-makespan.children", values, ["profile.data"])
    _, presets = client.call("m-makespan.children", values | {"profile.data": None}, ["profile.data"])
    # 1 TFLOP/s and 1 GB/s are far slower than an H100 over NVLink
    assert with_profile["m-makespan"]["children"] != presets["m-makespan"]["children"]
    assert "cpu.json" in with_profile["scenario-line"]["children"]
    _, out = client.call("profile.data", {"profile-clear.n_clicks": 1}, ["profile-clear.n_clicks"])
    assert out["profile"]["data"] is None


@pytest.mark.parametrize("raw, words", [(b'{"gpu": {}}', "not a ringsim profile"),
                                        (b"\x80\x04pickle", "not valid JSON")])
def test_bad_profile_upload_is_explained(client, raw, words):
    url = "data:application/json;base64," + base64.b64encode(raw).decode()
    _, out = client.call("profile.data", {"profile-upload.contents": url, "profile-upload.filename": "p.json"},
                         ["profile-upload.contents"])
    assert words in out["profile-msg"]["children"]
    assert "profile" not in out


def test_cli_registers_the_dashboard_command(capsys):
    a = build_parser().parse_args(["dashboard"])
    assert (a.host, a.port, a.debug, a.profile) == ("127.0.0.1", 8050, False, None)
    assert main(["dashboard", "--port", "0"]) == 2
    assert "--port must be in 1..65535" in capsys.readouterr().err
    assert main(["dashboard", "--port", "x"]) == 2


def test_the_scenario_line_speaks_the_page_s_language(client):
    """The line above the views, in Indonesian: its words and its numbers (131.072, the
    locale's grouping) as the catalog says them; in English as before."""
    def line(lang):
        _, out = client.call("scenario-line.children", {
            "scenario.data": {"values": defaults()}, "profile.data": None, "tabs.value": "timeline",
            "measured.data": None, "lang.value": lang}, ["lang.value"])
        return out["scenario-line"]["children"]

    en, id_ = line("en"), line("id")
    assert "131,072 tokens (16,384 per GPU)" in en and "zigzag layout, overlap on" in en and "causal" in en
    assert "131.072 token (16.384 per GPU)" in id_ and "tata letak zigzag, tumpang-tindih aktif" in id_
    assert "kausal" in id_ and "tokens" not in id_ and "layout" not in id_


@pytest.mark.parametrize("lang, fast, slow", [("en", "H100-SXM / nvlink4", "H100-SXM / 2.00 GB/s"),
                                              ("id", "H100-SXM / nvlink4", "H100-SXM / 2,00 GB/s")])
def test_the_scenario_line_names_a_link_whose_bandwidth_was_changed_by_its_bandwidth(client, lang, fast, slow):
    def line(values):
        _, out = client.call("scenario-line.children", {
            "scenario.data": {"values": values}, "profile.data": None, "tabs.value": "timeline",
            "measured.data": None, "lang.value": lang}, ["lang.value"])
        return out["scenario-line"]["children"]
    assert fast in line(defaults())
    changed = line(defaults() | {"link-gbps": 2.0, "gpus": 16})
    assert slow in changed and "nvlink4" not in changed


def test_a_new_scenario_starts_its_run_as_the_page_is_sent_it(monkeypatch):
    # the scenario callback starts the page's run (the cards beside every view show its
    # metrics) before the page asks for the cards: not for the same scenario, a refused
    # one, nor on the Measured view (its cards describe the measured run)
    from dashboard.served import Served

    started = []
    monkeypatch.setattr(Served, "start_run", lambda self, data, profile: started.append(data["values"]))
    client = CallbackClient.for_app(create_app())
    client.call("scenario.data", {"url.search": "?gpus=16"} | controls(), ["url.search"])
    assert started == [defaults() | {"gpus": 16}]
    current = {"scenario.data": {"values": defaults() | {"gpus": 16}}}
    client.call("scenario.data", controls(gpus=16) | current, ["gpus.value"])
    client.call("scenario.data", controls(**{"kv-heads": 7}) | current, ["kv-heads.value"])
    client.call("scenario.data", controls(gpus=32) | current | {"tabs.value": "measured"}, ["gpus.value"])
    assert len(started) == 1
    client.call("scenario.data", controls(gpus=32) | current | {"tabs.value": "memory"}, ["gpus.value"])
    assert started[1] == defaults() | {"gpus": 32}


def test_the_started_run_is_the_one_the_cards_then_read(monkeypatch):
    from dashboard import compute
    from dashboard.served import Served
    from dashboard.state import scenario_from_values, scenario_key

    monkeypatch.setattr(compute, "DISK", None)       # this process's memory alone
    compute.clear_caches()
    served, data = Served(), _store(gpus=8, seq=8192)
    served.start_run(data, None).join()
    made = compute.CACHE.peek(scenario_key(scenario_from_values(data["values"]), None))
    assert made is not None and compute.CACHE.misses == 1
    assert served.metrics_of(data, None) is made.metrics and compute.CACHE.misses == 1
    # a run the page cannot make fails in the thread alone: the view asking says why
    served.start_run(_store(gpus=8, seq=8192, heads=7), None).join()


def test_the_layout_strip_is_left_as_drawn_where_the_change_does_not_move_it(client):
    _, out = client.call("layout-strip.figure", {"scenario.data": _store(gpus=8)}, ["scenario.data"])
    drawn = out["layout-strip-drawn"]["data"]
    assert "8 GPUs" in out["layout-strip"]["figure"]["layout"]["title"]["text"]
    # the link's bandwidth moves no token: nothing is sent
    _, out = client.call("layout-strip.figure", {"scenario.data": _store(gpus=8, **{"link-gbps": 100.0}),
                                                 "layout-strip-drawn.data": drawn}, ["scenario.data"])
    assert out == {}
    # another number of GPUs, or another language, is drawn again
    for change in ({"scenario.data": _store(gpus=4)}, {"scenario.data": _store(gpus=8), "lang.value": "id"}):
        _, out = client.call("layout-strip.figure", change | {"layout-strip-drawn.data": drawn}, ["scenario.data"])
        assert out["layout-strip-drawn"]["data"] != drawn and "figure" in out["layout-strip"]


@pytest.mark.parametrize("lang, words", [("en", "Ignored link parameters the page does not know: link-gbps (link_gbps?)."),
                                         ("id", "tidak dikenal halaman ini diabaikan: link-gbps (link_gbps?).")])
def test_a_key_the_page_does_not_know_is_named_with_the_nearest_it_does(client, lang, words):
    status, out = client.call("scenario.data", {"url.search": f"?link-gbps=0&lang={lang}"} | controls(), [])
    assert status == 200 and words in out["banner"]["children"]
    assert out["scenario"]["data"]["values"] == defaults()


@pytest.mark.parametrize("lang, typed, read", [
    ("id", {"link-gbps": "1.000", "seq": "131.072", "efficiency": "0,6"}, {"link-gbps": 1000, "seq": 131072,
                                                                          "efficiency": 0.6}),
    ("id", {"efficiency": "0.6", "seq": "64k"}, {"efficiency": 0.6, "seq": 65536}),
    ("en", {"link-gbps": "1,000", "seq": "131,072", "efficiency": "0.6"}, {"link-gbps": 1000, "seq": 131072,
                                                                          "efficiency": 0.6}),
    ("en", {"link-gbps": "1.000", "seq": "1M"}, {"link-gbps": 1.0, "seq": 1 << 20}),
])
def test_a_typed_number_is_read_as_the_page_s_language_writes_numbers(client, lang, typed, read):
    """The boxes are the page's to read: an Indonesian 1.000 is a thousand (the browser's
    number box took it for 1), 0,6 six tenths; each box read shows the number it was read as,
    and the address carries it."""
    status, out = client.call("scenario.data", controls(**typed) | {"lang.value": lang},
                              [f"{cid}.value" for cid in typed])
    assert status == 200
    assert {cid: out["scenario"]["data"]["values"][cid] for cid in typed} == read
    assert {cid: out[cid]["value"] for cid in typed} == read
    assert {cid: values_from_query(out["url"]["search"])[0][cid] for cid in typed} == read


@pytest.mark.parametrize("cid, typed, words", [
    ("seq", "12x", "must be a whole number, got '12x'"),
    ("window", "abc", "must be a whole number, got 'abc'"),
    ("gpus", "1.2.3", "must be a whole number, got '1.2.3'"),
    ("link-gbps", "fast", "enter a number, got 'fast'"),
])
def test_a_typed_value_that_is_not_a_number_is_refused_by_name_and_kept(client, cid, typed, words):
    """Not read as a number, a box's text is refused under it, in words, and left as typed
    (the browser's number box dropped 12x's x and emptied abc without a word)."""
    status, out = client.call("scenario.data", controls(**{cid: typed}), [f"{cid}.value"])
    assert status == 200
    assert words in out[f"{cid}-msg"]["children"]
    assert "scenario" not in out and "value" not in out.get(cid, {})
