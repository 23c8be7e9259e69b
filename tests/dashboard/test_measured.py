"""The Measured vs simulated view as a new reader meets it: the shipped example runs, the
notice when a trace ran on another machine than the one simulated, and a calibrated
profile that shapes the scenario and names its device in the hardware controls."""

from __future__ import annotations

import base64
import io
import math
import os
import zipfile

import numpy as np
import pytest

from dashboard import export, measured
from dashboard.app import create_app
from dashboard.client import CallbackClient
from dashboard.served import EXAMPLE_PROFILE_TOKEN, MAX_UPLOAD_BYTES
from dashboard.state import defaults, profile_changes
from sim.engine.play import simulate
from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Hardware
from sim.hardware.profile import ComputeGroup, LinkFit, Profile, load_profile
from sim.scenario.config import scenario_from_config
from sim.trace.format import Trace
from tests.dashboard.conftest import controls, measured_from, small_scenario

EXAMPLE_PROFILE_PATH = os.path.join(measured.EXAMPLES_DIR, measured.EXAMPLE_PROFILE)


def _layout_prop(app, cid: str, prop: str):
    """A component's property as the page's layout sends it to the browser."""
    def find(node):
        if isinstance(node, dict):
            if node.get("props", {}).get("id") == cid:
                return node["props"].get(prop)
            return next((r for v in node.values() if (r := find(v)) is not None), None)
        if isinstance(node, list):
            return next((r for v in node if (r := find(v)) is not None), None)
        return None
    return find(app.server.test_client().get("/_dash-layout").get_json())


def _upload_url(raw: bytes) -> str:
    return "data:application/zip;base64," + base64.b64encode(raw).decode()


@pytest.fixture(scope="module")
def plain():
    app = create_app()
    return app, CallbackClient.for_app(app)


@pytest.fixture(scope="module")
def with_profile():
    app = create_app(profile_path=EXAMPLE_PROFILE_PATH)
    return app, CallbackClient.for_app(app)


# --- the examples -----------------------------------------------------------------------

def test_the_package_ships_example_runs_of_the_real_kernel():
    shipped = measured.examples()
    assert 2 <= len(shipped) <= 4
    for e in shipped:
        assert e.trace.source == "measured"
        assert e.trace.hardware["device"] == measured.example_profile().measured_on["device"]
        assert os.path.getsize(os.path.join(measured.EXAMPLES_DIR, e.file)) < 64 * 1024
    assert {e.trace.n_gpus for e in shipped} >= {2, 3}
    readme = open(os.path.join(measured.EXAMPLES_DIR, "README.md")).read()
    assert all(e.file in readme for e in shipped)            # each one's command is written down


def test_the_default_measured_view_overlays_the_first_example(plain):
    app, client = plain
    token = _layout_prop(app, "measured", "data")["token"]
    first = measured.examples()[0]
    assert token == first.token and _layout_prop(app, "measured-example", "value") == token
    _, out = client.call("overlay.figure", {"measured.data": {"token": token}, "scenario.data": {"values": defaults()},
                                            "profile.data": None, "tabs.value": "measured", "lang.value": "en"},
                         ["tabs.value"])
    fig = out["overlay"]["figure"]
    assert fig["layout"]["title"]["text"].startswith("Model vs measurement")
    # independent: the measured makespan from the file's columns, the simulated one from
    # the simulator run on the examples' profile
    c = first.trace.columns
    measured_s = float(np.max(c.end_s) - np.min(c.start_s))
    sim = simulate(scenario_from_config(first.trace.config, Hardware()), load_profile(EXAMPLE_PROFILE_PATH))
    error = fig["layout"]["meta"]["makespan_error"]
    assert math.isfinite(error) and error == pytest.approx((sim.makespan_s - measured_s) / measured_s, rel=1e-9)
    # the example is set against the machine it ran on: nothing to warn about
    assert out["trace-notice"]["children"] is None
    assert out["profile-example"]["style"] == {"display": "none"}


def test_choosing_an_example_and_uploading_a_trace(plain):
    app, client = plain
    second = measured.examples()[1]
    start = _layout_prop(app, "measured", "data")
    _, out = client.call("measured.data", {"measured-example.value": second.token, "lang.value": "id",
                                           "measured.data": start}, ["measured-example.value"])
    assert out["measured"]["data"]["token"] == second.token
    assert "AMD EPYC" in out["trace-upload-status"]["children"] and "Contoh" in out["trace-upload-status"]["children"]
    raw = export.trace_archive(measured_from(simulate(small_scenario()), factor=1.1))
    _, out = client.call("measured.data", {"trace-upload.contents": _upload_url(raw),
                                           "trace-upload.filename": "mine.trace.npz",
                                           "measured-example.value": second.token, "lang.value": "en",
                                           "measured.data": out["measured"]["data"]}, ["trace-upload.contents"])
    assert out["measured"]["data"]["name"] == "mine.trace.npz"       # the upload replaces the example
    assert out["measured-example"]["value"] is None
    assert "measured trace, 4 ranks" in out["trace-upload-status"]["children"]


def _hostile_archive() -> bytes:
    """A version-2 archive whose columns are pickled objects (np.load would run code)."""
    good = export.trace_archive(simulate(small_scenario()))
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.startswith("rank"):
                buf = io.BytesIO()
                np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
                data = buf.getvalue()
            dst.writestr(info, data)
    return out.getvalue()


@pytest.mark.parametrize("raw, words", [(b"{oops", "not valid JSON"), (b"\x80\x04pickle", "neither an archive"),
                                        (None, "Object arrays cannot be loaded")])
def test_examples_pass_the_checks_an_upload_passes(tmp_path, raw, words):
    raw = _hostile_archive() if raw is None else raw
    # the same bytes as an upload and as an example file: refused alike, in one line
    with pytest.raises(RingsimError) as as_upload:
        export.parse_trace_upload(_upload_url(raw), "bad.trace.npz", MAX_UPLOAD_BYTES)
    (tmp_path / "bad.trace.npz").write_bytes(raw)
    measured.examples.cache_clear()
    try:
        with pytest.raises(RingsimError) as as_example:
            measured.examples(str(tmp_path))
    finally:
        measured.examples.cache_clear()
    assert str(as_example.value) == str(as_upload.value)
    assert words in str(as_example.value) and "\n" not in str(as_example.value)
    assert str(as_example.value).startswith("bad.trace.npz: ")


def test_an_oversized_example_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.trace.json"
    path.write_bytes(b" " * (measured.MAX_EXAMPLE_BYTES + 1))
    with pytest.raises(RingsimError, match="big.trace.json: .* over the"):
        measured.read_trace_file(str(path))


def test_the_shipped_examples_upload_as_they_load():
    for e in measured.examples():
        raw = open(os.path.join(measured.EXAMPLES_DIR, e.file), "rb").read()
        up = export.parse_trace_upload(_upload_url(raw), e.file, MAX_UPLOAD_BYTES)
        assert up.header() == e.trace.header()
        assert np.array_equal(up.columns.end_s, e.trace.columns.end_s)


# --- a trace measured elsewhere than the machine simulated --------------------------------

def test_a_cpu_trace_against_the_h100_preset_says_so_and_how_to_fix_it(plain):
    _, client = plain
    first = measured.examples()[0]
    raw = open(os.path.join(measured.EXAMPLES_DIR, first.file), "rb").read()
    _, out = client.call("measured.data", {"trace-upload.contents": _upload_url(raw), "trace-upload.filename": "cpu.npz",
                                           "lang.value": "en"}, ["trace-upload.contents"])
    token = out["measured"]["data"]
    for lang in ("en", "id"):
        _, out = client.call("overlay.figure", {"measured.data": token, "scenario.data": {"values": defaults()},
                                                "profile.data": None, "tabs.value": "measured", "lang.value": lang},
                             ["measured.data"])
        notice = out["trace-notice"]["children"]
        assert "AMD EPYC (2 cores), gloo" in notice and "H100-SXM / nvlink4" in notice
        assert "ringsim dashboard --profile PROFILE.json" in notice and "\n" not in notice
        assert out["overlay"]["figure"]["layout"]["title"]["text"].startswith(
            {"en": "Model vs measurement", "id": "Model dibanding pengukuran"}[lang])
        # the profile shipped with the examples is of this machine: the page offers it
        assert out["profile-example"]["style"] == {}
        assert "AMD EPYC" in out["profile-example"]["children"]


def test_the_offered_profile_loads_and_the_notice_goes(plain):
    _, client = plain
    _, out = client.call("profile.data", {"profile-example.n_clicks": 1}, ["profile-example.n_clicks"])
    profile = out["profile"]["data"]
    assert profile["token"] == EXAMPLE_PROFILE_TOKEN and profile["device"] == "AMD EPYC (2 cores)"
    raw = open(os.path.join(measured.EXAMPLES_DIR, measured.examples()[0].file), "rb").read()
    _, out = client.call("measured.data", {"trace-upload.contents": _upload_url(raw), "trace-upload.filename": "cpu.npz",
                                           "lang.value": "en"}, ["trace-upload.contents"])
    _, out = client.call("overlay.figure", {"measured.data": out["measured"]["data"],
                                            "scenario.data": {"values": defaults()}, "profile.data": profile,
                                            "tabs.value": "measured", "lang.value": "en"}, ["profile.data"])
    assert out["trace-notice"]["children"] is None
    assert math.isfinite(out["overlay"]["figure"]["layout"]["meta"]["makespan_error"])


def _trace_on(hardware: dict, source: str = "measured") -> Trace:
    sim = simulate(small_scenario())
    return Trace(source, sim.n_gpus, sim.columns, sim.config, hardware, {})


def _profile(device: str, backend: str = "gloo") -> Profile:
    group = ComputeGroup("fp32", "full", "fwd", ((1e9, 1e-2), (2e9, 2e-2)), 0.0, 1e11)
    return Profile("fit", {("fp32", "full", "fwd"): group}, LinkFit(1e-4, 1e9),
                   measured_on={"device": device, "kind": "cpu", "backend": backend})


def test_which_machines_count_as_the_same():
    h100 = small_scenario().hardware
    cpu = _trace_on({"kind": "measured", "device": "AMD EPYC (2 cores)", "backend": "gloo"})
    assert measured.mismatch(cpu, h100) == ("AMD EPYC (2 cores), gloo", "H100-SXM / nvlink4")
    assert measured.mismatch(cpu, _profile("AMD EPYC (2 cores)")) is None
    assert measured.mismatch(cpu, _profile("Intel Xeon (8 cores)")) == ("AMD EPYC (2 cores), gloo",
                                                                       "Intel Xeon (8 cores), gloo")
    assert measured.mismatch(cpu, _profile("AMD EPYC (2 cores)", backend="nccl")) is not None
    gpu = _trace_on({"kind": "measured", "device": "NVIDIA H100 80GB HBM3", "backend": "nccl"})
    assert measured.mismatch(gpu, h100) is None
    a100 = Hardware(gpu=Gpu.preset("A100-SXM-80GB"), link=h100.link)
    assert measured.mismatch(gpu, a100) == ("NVIDIA H100 80GB HBM3, nccl", "A100-SXM-80GB / nvlink4")
    custom = Hardware(gpu=Gpu(name="custom", achieved_tflops=1.0), link=h100.link)
    assert measured.mismatch(cpu, custom) is None           # typed-in numbers: nothing to check
    assert measured.mismatch(_trace_on(h100.describe(), source="simulated"), _profile("x")) is None
    # a profile that names no machine: None, which the page says in its own language
    assert measured.mismatch(cpu, _profile("")) == ("AMD EPYC (2 cores), gloo", None)


# --- started with a calibrated profile ------------------------------------------------

def test_a_cpu_profile_at_start_sets_a_scenario_it_can_time(with_profile):
    app, client = with_profile
    profile = _layout_prop(app, "profile", "data")
    assert profile["device"] == "AMD EPYC (2 cores)" and profile["name"] == "cpu-profile.json"
    _, out = client.call("scenario.data", {"url.search": "", "profile.data": profile} | controls(**defaults()), [])
    values = out["scenario"]["data"]["values"]
    prof = load_profile(EXAMPLE_PROFILE_PATH)
    # by hand: it measured fp32 only; 4 processes at once at most; its largest forward
    # block, at 32 heads x 128 (4 x 128 x 32 FLOPs per pair), fits 1086 x 1086 tokens
    assert {k[0] for k in prof.groups} == {"fp32"}
    assert max(p[0] for p in prof.contention.concurrency) == 4
    largest = max(p[0] for k, g in prof.groups.items() if k[2] == "fwd" for p in g.points)
    assert 1024 <= math.sqrt(largest / (4 * 128 * 32)) < 2048
    assert (values["dtype"], values["gpus"], values["seq"]) == ("fp32", 4, 4 * 1024)
    assert out["dtype"]["value"] == "fp32" and out["url"]["search"] == "?seq=4096&dtype=fp32&gpus=4"
    assert "dtype-msg" not in out                    # no message shown before, none now
    _, cards = client.call("m-makespan.children", {"scenario.data": {"values": values}, "profile.data": profile},
                           ["scenario.data"])
    assert all(v["children"] != "–" for v in cards.values())
    assert cards["scenario-line"]["children"].startswith("4 × AMD EPYC (2 cores) (cpu-profile.json)")
    _, hw = client.call("gpu.options", {"profile.data": profile, "gpu.value": "H100-SXM", "link.value": "nvlink4",
                                        "lang.value": "en"}, ["profile.data"])
    assert [o["label"] for o in hw["gpu"]["options"]] == ["AMD EPYC (2 cores) (profile)"]
    assert hw["gpu"]["disabled"] and hw["link"]["disabled"] and hw["tflops"]["disabled"]
    assert f"{prof.link.bandwidth_bytes_per_s / 1e9:.3g} GB/s" in hw["link"]["options"][0]["label"]


def test_a_link_keeps_its_scenario_and_an_unmeasured_dtype_is_named(with_profile):
    app, client = with_profile
    profile = _layout_prop(app, "profile", "data")
    # the browser's first call names the profile and the URL both: the URL's values stay
    _, out = client.call("scenario.data", {"url.search": "?seq=8192&gpus=2", "profile.data": profile}
                         | controls(**defaults()), ["profile.data", "url.search"])
    assert (out["seq"]["value"], out["gpus"]["value"], out["dtype"]["value"]) == (8192, 2, "fp32")
    values = out["scenario"]["data"]["values"]
    _, out = client.call("scenario.data", {"url.search": "?seq=8192&gpus=2&dtype=fp32", "profile.data": profile}
                         | controls(**(values | {"dtype": "bf16"})), ["dtype.value"])
    assert "no compute measurements for bf16 (it has fp32)" in out["dtype-msg"]["children"]
    assert "scenario" not in out                        # the views keep the last valid one
    # past the first scenario, the reader's choices stay, the page's defaults included
    chosen = values | {"gpus": 8, "seq": 131072}
    _, out = client.call("scenario.data", {"url.search": "?dtype=fp32&view=measured", "profile.data": profile,
                                           "scenario.data": {"values": chosen}} | controls(**chosen), ["url.search"])
    # (controls already showing them are left alone: sent only if they change)
    assert [out.get(c, {}).get("value", chosen[c]) for c in ("gpus", "seq")] == [8, 131072]


def test_presets_restore_the_hardware_controls(with_profile):
    _, client = with_profile
    _, hw = client.call("gpu.options", {"profile.data": None, "gpu.value": "H100-SXM", "link.value": "nvlink4",
                                        "lang.value": "en"}, ["profile.data"])
    assert "H100-SXM" in [o["value"] for o in hw["gpu"]["options"]] and not hw["gpu"]["disabled"]


def test_profile_changes_leave_what_the_reader_chose():
    prof = _profile("cpu")
    # only fp32 measured; 1e9..2e9 FLOPs: at 32 x 128 (16384 FLOPs per pair) 349 tokens,
    # so 256 per rank; no concurrency table and no core count: the GPUs stay
    assert profile_changes(defaults(), prof) == {"dtype": "fp32", "seq": 8 * 256}
    assert profile_changes(defaults() | {"seq": 65536, "dtype": "fp32"}, prof) == {}
    gpu_profile = Profile("fit", {("bf16", "full", "fwd"): prof.groups["fp32", "full", "fwd"]}, prof.link,
                          measured_on={"device": "H100", "kind": "cuda"})
    assert profile_changes(defaults() | {"seq": 65536}, gpu_profile) == {}


def test_the_measured_view_s_cards_describe_the_run_it_shows(plain):
    """On the Measured view the summary cards and the scenario line describe the measured
    run's configuration, simulated on the examples' profile, as the overlay sets it; on
    other views, the page's scenario."""
    app, client = plain
    first = measured.examples()[0]
    inputs = {"measured.data": {"token": first.token}, "scenario.data": {"values": defaults()},
              "profile.data": None, "lang.value": "en"}
    _, shown = client.call("m-makespan.children", {**inputs, "tabs.value": "measured"}, ["tabs.value"])
    _, page = client.call("m-makespan.children", {**inputs, "tabs.value": "timeline"}, ["tabs.value"])
    sim = simulate(scenario_from_config(first.trace.config, Hardware()), load_profile(EXAMPLE_PROFILE_PATH))
    want = f"{sim.makespan_s * 1e3:.4g} ms"      # four significant digits, as the cards print
    assert shown["m-makespan"]["children"] == want != page["m-makespan"]["children"]
    line = shown["scenario-line"]["children"]
    assert line.startswith("the measured run, simulated:") and f"{first.trace.n_gpus} ×" in line
    assert measured.example_profile().measured_on["device"] in line


def test_the_measured_view_s_token_strip_and_downloads_are_the_run_it_shows(plain):
    """The token strip and the downloads beside the cards follow them: on the Measured view,
    the measured run's configuration (its GPUs and tokens, and its simulated metrics in the
    CSV); on other views, the page's scenario."""
    app, client = plain
    first = measured.examples()[0]
    inputs = {"measured.data": {"token": first.token}, "scenario.data": {"values": defaults()},
              "profile.data": None, "lang.value": "en", "layout-strip-drawn.data": None}
    _, shown = client.call("layout-strip.figure", {**inputs, "tabs.value": "measured"}, ["tabs.value"])
    _, page = client.call("layout-strip.figure", {**inputs, "tabs.value": "timeline"}, ["tabs.value"])
    seq, gpus = first.trace.config["workload"]["seq"], first.trace.n_gpus
    title = shown["layout-strip"]["figure"]["layout"]["title"]["text"]
    assert f"{seq:,} tokens over {gpus} GPUs" in title
    page_title = page["layout-strip"]["figure"]["layout"]["title"]["text"]
    assert f"{defaults()['seq']:,} tokens over {defaults()['gpus']} GPUs" in page_title
    csv = {}
    for tab in ("measured", "timeline"):
        _, out = client.call("dl-csv.data", {**inputs, "tabs.value": tab, "dl-csv-btn.n_clicks": 1}, ["dl-csv-btn.n_clicks"])
        csv[tab] = out["dl-csv"]["data"]
    assert csv["measured"]["filename"].startswith(f"ringsim-{gpus}gpu-") and f"-{seq}-" in csv["measured"]["filename"]
    sim = simulate(scenario_from_config(first.trace.config, Hardware()), load_profile(EXAMPLE_PROFILE_PATH))
    makespan = next(line for line in csv["measured"]["content"].splitlines() if line.startswith("run,"))
    assert float(makespan.split(",")[2]) == pytest.approx(sim.makespan_s)
    assert csv["timeline"]["filename"].startswith(f"ringsim-{defaults()['gpus']}gpu-")
