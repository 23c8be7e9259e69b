"""What does the browser's drawing of a timeline cost, and which part of the figure is it?

The dashboard's timeline (dashboard.figures.timeline) of the default scenario at each number
of GPUs, drawn by Plotly.js (the plotly package's own copy) with `Plotly.newPlot` in
headless Chromium without a GPU, as the latency bench drives it: the time from the call
to the frame after it resolves, for the figure as served and for parts of it (its WebGL
lines alone, its invisible hover points alone, the whole at half its height, and the
same marks as SVG bars), each
drawn --repeats times in a fresh element after one untimed draw (WebGL compiles its
shaders on the first). The server's share (computing and sending the
figure) is not in it.

    .venv/bin/python bench/experiments/timeline_render.py [--gpus 64 256 1024] [--repeats 3]
        [--json out.json [--force]]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import add_force, keep_results  # noqa: E402
from sim.files import write_json  # noqa: E402

DRAW = """
const done = arguments[1], fig = JSON.parse(arguments[0]);
const div = document.createElement('div');
div.style.width = '1200px';
document.body.appendChild(div);
const t0 = performance.now();
Plotly.newPlot(div, fig.data, fig.layout).then(() => requestAnimationFrame(() => {
    const t = performance.now() - t0;
    Plotly.purge(div);
    div.remove();
    done(t);
}));
"""


def variants(gpus: int) -> dict[str, str]:
    """The timeline of the default scenario at `gpus` GPUs as JSON: whole, and in parts."""
    import plotly.io as pio

    from dashboard import compute
    from dashboard.figures.timeline import timeline
    from dashboard.state import defaults, scenario_from_values

    trace = compute.run(scenario_from_values(defaults() | {"gpus": gpus})).trace
    whole = timeline(trace)
    out = {"as served": whole}
    if whole.layout.meta["webgl"]:
        lines, points = timeline(trace), timeline(trace)
        lines.data = [t for t in lines.data if not (t.type == "scattergl" and t.mode == "markers")]
        points.data = [t for t in points.data if not (t.type == "scattergl" and t.mode == "lines")]
        half = timeline(trace)
        half.layout.height = whole.layout.height // 2
        out |= {"WebGL lines only": lines, "hover points only": points, "half as tall": half,
                "as SVG bars": timeline(trace, max_bar_spans=10 ** 9)}
    return {name: pio.to_json(fig) for name, fig in out.items()} | {"_marks": str(whole.layout.meta["marks"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    add_force(ap)
    a = ap.parse_args(argv)
    keep_results("timeline_render", a.json, force=a.force)
    if a.repeats < 1 or min(a.gpus) < 1:
        print("timeline_render: --repeats and --gpus must be at least 1", file=sys.stderr)
        return 2
    from plotly.offline import get_plotlyjs

    from bench.speed.dashboard_latency import _browser

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(f"<html><head><script>{get_plotlyjs()}</script></head><body></body></html>")
        driver = _browser()
        try:
            driver.set_script_timeout(300)
            driver.get(page.as_uri())
            print(f"{'GPUs':>5}  {'marks':>6}  {'figure':18}  {'MB':>5}  newPlot ms: median (range)")
            for gpus in a.gpus:
                figs = variants(gpus)
                marks = int(figs.pop("_marks"))
                for name, js in figs.items():
                    driver.execute_async_script(DRAW, js)      # untimed: WebGL's shaders, Plotly's first calc
                    ms = [driver.execute_async_script(DRAW, js) for _ in range(a.repeats)]
                    rows.append({"gpus": gpus, "marks": marks, "figure": name, "mb": len(js) / 1e6, "newplot_ms": ms})
                    print(f"{gpus:>5}  {marks:>6}  {name:18}  {len(js) / 1e6:5.2f}  {statistics.median(ms):.0f} "
                          f"({min(ms):.0f}-{max(ms):.0f})", flush=True)
        finally:
            driver.quit()
    if a.json:
        write_json(a.json, {"what": "Plotly.newPlot of the dashboard's timeline in headless Chromium without a GPU",
                            "repeats": a.repeats, "rows": rows}, overwrite=a.force)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
