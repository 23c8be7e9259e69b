"""What the views say of a run, checked against numbers worked out here: a run that does not
fit its GPU says so on the peak-memory card, the plan chart's range holds its candidates
and not an empty span up to the GPU's memory, a clicked span's record is listed, and a run
whose transfers all hide says so on the timeline."""

from __future__ import annotations

from dashboard.figures.plan import plan_chart
from dashboard.i18n import Translator
from dashboard.state import defaults, scenario_from_values
from sim.scenario.memory import peak_memory

GIB = 2 ** 30


def _store(**changes):
    return {"values": defaults() | changes}


def _text(node) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return " ".join(_text(n) for n in node)
    if isinstance(node, dict):
        return _text(node.get("props", {}).get("children", ""))
    return ""


def test_a_run_past_the_gpus_memory_says_it_does_not_fit(client):
    seq = 1 << 27
    peak = peak_memory(scenario_from_values(defaults() | {"seq": seq}))["total"]
    assert peak > 80e9                     # an H100's 80 GB: it cannot fit
    _, out = client.call("m-memory.children", {"scenario.data": _store(seq=seq), "profile.data": None,
                                              "tabs.value": "memory", "lang.value": "en"}, ["scenario.data"])
    card = _text(out["m-memory"]["children"])
    assert f"{peak / GIB:.3g}".rstrip("0").rstrip(".") in card.replace(",", "") and "does not fit" in card
    _, out = client.call("m-memory.children", {"scenario.data": _store(), "profile.data": None,
                                              "tabs.value": "memory", "lang.value": "id"}, ["scenario.data"])
    assert "muat" not in _text(out["m-memory"]["children"]) and "GiB" in _text(out["m-memory"]["children"])


def test_the_plan_charts_range_holds_its_candidates():
    cands = [{"scheme": "ring", "variant": "zigzag", "rank": i + 1, "fits": True, "step_s": 0.1 + 0.01 * i,
              "peak_mem_bytes": (11 + 0.2 * i) * GIB} for i in range(4)]
    lo, hi = plan_chart(cands, 80e9).layout.xaxis.range
    assert lo <= 11 and hi >= 11.6 and hi - lo < 3            # not 0-75 GiB
    near = plan_chart(cands, 12 * GIB).layout.xaxis.range     # a limit among them is drawn, in range
    assert near[1] >= 12
    # a limit past them is named at the edge, its number as the page's language writes it
    t = Translator("id")
    far = plan_chart(cands, 80e9, {"number": t.num, "limit": "batas memori", "separators": t.separators()})
    assert [a.text for a in far.layout.annotations] == ["batas memori: 74,5 GiB →"]


def test_a_clicked_span_lists_its_record(client):
    """The page's click names the chart's trace and point only (as dcc.Graph sends it): the
    details are the record of that span in the simulated trace."""
    import re

    import numpy as np

    from dashboard import compute
    from sim.trace.format import SEND

    store = _store(gpus=4, seq=8192)
    values = {"scenario.data": store, "profile.data": None, "ranks.value": [0, 3], "tabs.value": "timeline",
              "lang.value": "en"}
    _, out = client.call("timeline.figure", values, ["scenario.data"])
    data = out["timeline"]["figure"]["data"]
    curve = next(i for i, tr in enumerate(data) if tr["name"] == "send K/V")
    _, out = client.call("timeline-details.children",
                         {**values, "timeline.clickData": {"points": [{"curveNumber": curve, "pointNumber": 0}]}},
                         ["timeline.clickData"])
    text = _text(out["timeline-details"]["children"])
    assert "send K/V" in text, text
    gpu, step = map(int, re.search(r"GPU (\d+) ring step (\d+)", text).groups())
    c = compute.run(scenario_from_values(store["values"])).trace.columns
    (span,) = np.flatnonzero((c.stream == SEND) & (c.rank == gpu) & (c.step == step))
    assert f"other GPU {int(c.peer[span])}" in text
    assert f"{c.bytes[span] / 2 ** 20:.2f} MiB" in text       # MiB, as the tables and the questions say
    _, out = client.call("timeline-details.children",
                         {**values, "timeline.clickData": {"points": [{"curveNumber": 999, "pointNumber": 0}]}},
                         ["timeline.clickData"])
    assert "Click a span" in _text(out["timeline-details"]["children"])      # no such point: the hint


def test_a_run_with_nothing_exposed_says_so(client):
    values = {"scenario.data": _store(), "profile.data": None, "tabs.value": "timeline", "lang.value": "en"}
    _, out = client.call("timeline-hidden.style", values, ["scenario.data"])
    from dashboard import compute

    exposed = max(r.exposed_comm_s for r in compute.metrics(scenario_from_values(defaults())).ranks)
    assert (out["timeline-hidden"]["style"] == {}) == (exposed == 0)


def test_a_zoom_on_time_draws_that_stretch_span_by_span(client):
    """At 512 GPUs a step is narrower than the drawn minimum: the whole run draws each GPU's
    spans merged; a zoom (Plotly's relayout event, as the page sends it) draws the stretch
    shown span by span, each span of the window's GPUs in it; a double-click the whole run;
    a click on a merged mark lists how many operations it holds."""
    import numpy as np

    from dashboard import compute

    store = _store(gpus=512)
    values = {"scenario.data": store, "profile.data": None, "ranks.value": [0, 3], "tabs.value": "timeline",
              "lang.value": "en", "timeline-zoom.data": None}
    _, out = client.call("timeline.figure", values, ["scenario.data"])
    whole = out["timeline"]["figure"]
    meta = whole["layout"]["meta"]
    assert meta["merged"] > 0 and meta["marks"] < meta["spans"] / 20 and meta["time_range_s"] is None
    c = compute.run(scenario_from_values(store["values"])).trace.columns
    t0 = float(c.start_s.min())
    a, b = 0.40 * float(c.end_s.max() - t0), 0.41 * float(c.end_s.max() - t0)
    relayout = {"xaxis.range[0]": a * meta["scale"], "xaxis.range[1]": b * meta["scale"]}
    _, out = client.call("timeline-zoom.data", {**values, "timeline.relayoutData": relayout},
                         ["timeline.relayoutData"])
    zoom = out["timeline-zoom"]["data"]
    assert zoom["range"] == [a * meta["scale"], b * meta["scale"]]
    _, out = client.call("timeline.figure", {**values, "timeline-zoom.data": zoom}, ["timeline-zoom.data"])
    near = out["timeline"]["figure"]["layout"]["meta"]
    assert np.allclose(near["time_range_s"], [a, b], rtol=1e-9)
    inside = (c.rank <= 3) & (c.end_s - t0 >= near["time_range_s"][0]) & (c.start_s - t0 <= near["time_range_s"][1])
    assert near["merged"] == 0 and near["spans"] == near["marks"] == int(inside.sum())
    # a double-click: the whole run; a zoom made on another run does not hold
    _, out = client.call("timeline-zoom.data", {**values, "timeline.relayoutData": {"xaxis.autorange": True}},
                         ["timeline.relayoutData"])
    assert out["timeline-zoom"]["data"]["range"] is None
    _, out = client.call("timeline.figure", {**values, "scenario.data": _store(gpus=4), "timeline-zoom.data": zoom},
                         ["scenario.data"])
    assert out["timeline"]["figure"]["layout"]["meta"]["time_range_s"] is None
    # a click on a merged mark: its operations, their steps
    curve = next(i for i, tr in enumerate(whole["data"]) if tr.get("meta", {}).get("marks") == "merged"
                 and tr["name"] == "compute (forward)")
    _, out = client.call("timeline-details.children",
                         {**values, "timeline.clickData": {"points": [{"curveNumber": curve, "pointNumber": 0}]}},
                         ["timeline.clickData"])
    text = _text(out["timeline-details"]["children"])
    assert "Operations merged at this zoom" in text and "Zoom in" in text, text


def test_a_library_faster_than_the_fused_kernel_row_is_said_to_be_and_why():
    """TransformerEngine forwards each block as it arrives: on the default scenario it runs
    ahead of the fused-kernel row (forwarded per step, as the controls set it), and the
    libraries' sentences say that row is not a bound; a comparison where it is fastest says nothing."""
    from dashboard import compute
    from dashboard.views.schemes import _schemes_why
    rows = compute.impl_rows(scenario_from_values(defaults()))
    ideal = next(r for r in rows if r["impl"] == "ideal")
    te = next(r for r in rows if r["impl"] == "te")
    assert te["makespan_s"] < ideal["makespan_s"]
    said = _schemes_why(rows, Translator("en"))[-1].children
    assert said.startswith("ring (te) ahead of ring (ideal)") and "not a bound" in said
    slower = [r | {"makespan_s": max(r["makespan_s"], ideal["makespan_s"])} for r in rows]
    assert "not a bound" not in str(_schemes_why(slower, Translator("en")))
