"""View 2, how K/V blocks travel: per GPU three lanes (compute, send, receive), exposed
communication in red on the compute lane (docs/design.md, Definitions).

The figure reads the trace's columns (sim.trace.format.SpanTable) over a window of ranks. A
simulated trace lists its spans rank by rank, so a window is one contiguous slice of
every column, found by binary search; a trace in another order is sorted by rank once.
The names and colours of computes and transfers are those of the trace's scheme
(`op_kinds`): the ring's K/V and dK/dV hops, and the flows of the collectives
(all-gather, reduce-scatter, all-to-all); a hover says what the operation is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import COLORS, TEMPLATE, lighter, run_label, scheme_of, time_unit, wrap_title
from sim.schemes.base import Scheme
from sim.trace.format import COMPUTE, KIND_NAMES, KINDS, STREAMS, SpanTable, Trace

LANE_COLORS = {"send": "#009E73", "recv": "#56B4E9", "exposed": "#D55E00"}
"""Sends, receives and exposed waits in three hues of Okabe and Ito's palette, told apart with
every common form of colour blindness (Okabe & Ito 2008, "Color Universal Design"); a
scheme's second transfer kind (the ring's dK/dV) in a lighter shade of the same hue."""
TRANSFER_SHADES = (0.0, 0.45, -0.4, 0.25, -0.2)
"""A scheme's transfer kinds in turn: its first kind's send and receive colours as they are,
then mixed with white (positive) or black (negative) by these amounts (style.lighter)."""
MIN_WIDTH_SHARE = 0.002
"""A span is drawn at least this share of the run wide (about 2 px of a 1,000 px chart), so
that a transfer of a microsecond in a run of a second is still seen and clicked; its hover
and details give its true length."""
MAX_BAR_SPANS = 10_000
"""Past this many spans a timeline draws WebGL line segments instead of SVG bars."""
MAX_DRAWN_SPANS = 20_000
"""A timeline draws at most this many marks (a span, or spans merged where they are closer
than a pixel); it narrows its window of ranks to fit. Headless Chromium took about 1.8 s
longer to draw 60,000 than 20,000 (bench/speed/dashboard_latency.py, 1,024 GPUs, warm: 4.1 s
against 2.3 s)."""
MAX_WINDOW_SPANS = 400_000
"""A window of ranks holds at most this many spans before they merge into marks (32 GPUs of a
1,024-GPU ring hold about 140,000); the merge reads each of them."""
PIXELS = 2_000
"""The time shown is drawn at this many columns, finer than the chart's pixels on a 1,920 px
screen: spans of one series on one lane whose drawn extents come closer than one column
merge into one mark, which looks the same at this zoom (a ring of 1,024 steps draws a few
marks per GPU instead of thousands); zooming in draws them again at the finer scale."""

BAR_THICKNESS = 0.8
"""A span's bar, in lanes (the gap between lanes keeps GPUs apart)."""
MIN_BUSY_DRAWN = 0.15
"""A merged mark is as thick as its stretch is busy, and at least this share of a bar (a
stretch busy 1% of its time is still seen)."""

LANES = ("compute", "send", "recv")
MAX_LISTED_CHUNKS = 4
"""A hover lists up to this many chunks of an operation; a wider set (an all-gather's
flow, a call against the whole gathered K/V) reads as its first, last and count."""

TRANSFER_MEANING = {
    "kv": "a K/V block passed one hop around the ring",
    "dkv": "dK/dV accumulators passed one hop behind the K/V",
    "ag": "a flow of the all-gather of K/V (every GPU ends with every token's K/V)",
    "rs": "a flow of the reduce-scatter of dK/dV partial sums (fp32) to the GPUs that hold those tokens",
    "a2a": "a flow of the all-to-all between token shards and head shards (Q, K, V in, the output back)",
}
"""What a transfer of each kind is, for its hover (the name and colour are the scheme's)."""
CARRIES = {"kv": "block chunks", "dkv": "dK/dV of chunks", "ag": "K/V of chunks",
           "rs": "dK/dV of chunks", "a2a": "tokens of chunks"}
LABELS = {
    "idle": "idle", "exposed": "exposed communication", "send": "send {label}", "recv": "receive {label}",
    "op.fwd": "compute (forward)", "op.bwd": "compute (backward)",
    "h_compute": "GPU %{{customdata[0]}} computes, step %{{customdata[1]}}",
    "h_chunks": "query chunks {q} × K/V block chunks {k}",
    "h_when": "start %{{customdata[2]:.4g}} {unit}, lasts %{{customdata[3]:.4g}} {unit}",
    "h_wait": "GPU %{{customdata[0]}} waits for the {label} (exposed communication), step %{{customdata[1]}}",
    "h_needs": "needs {carries} {k}", "h_idle": "GPU %{{customdata[0]}} idle, step %{{customdata[1]}}",
    "h_transfer": "GPU %{{customdata[0]}} {arrow} GPU %{{customdata[4]}}, step %{{customdata[1]}}",
    "h_carries": "{name}: {carries} {k}", "h_summary": "{first}…{last} ({count} chunks)", "h_chunks_of": "chunks",
    "h_merged": "GPU %{{customdata[0]}}: %{{customdata[6]}} × {name}, steps %{{customdata[1]}}–%{{customdata[4]}}",
    "h_merged_when": "from %{{customdata[2]:.4g}} {unit} for %{{customdata[3]:.4g}} {unit}, "
                     "busy %{{customdata[5]:.4g}} {unit} of it",
    "h_zoom": "closer than a pixel at this zoom: zoom in to see each",
    **{f"carries.{k}": v for k, v in CARRIES.items()}, **{f"meaning.{k}": v for k, v in TRANSFER_MEANING.items()},
}
"""The figure's texts in English (`timeline(labels=...)` replaces any of them; the page's are
the catalogs' `tl.<name>`): series names, the hovers' lines (Plotly's placeholders doubled
braces) and what each kind of transfer carries and is."""


def _series_table() -> tuple[tuple[str, ...], np.ndarray]:
    """The timeline's series, in drawing order, and the series of each (stream code,
    kind code): a compute's kind, "idle" for a wait on nothing in flight, "exposed
    <kind>" for a wait on a transfer, "<stream> <kind>" for a transfer."""
    names = ["idle", *KINDS["compute"], *[f"exposed {k}" for k in KINDS["wait"] if k != "idle"]]
    names += [f"{s} {k}" for s in ("send", "recv") for k in KINDS[s]]
    table = np.full((len(STREAMS), len(KIND_NAMES)), -1, dtype=np.int8)
    for stream, kinds in KINDS.items():
        for kind in kinds:
            if stream == "compute":
                name = kind
            elif stream == "wait":
                name = "idle" if kind == "idle" else f"exposed {kind}"
            else:
                name = f"{stream} {kind}"
            table[STREAMS.index(stream), KIND_NAMES.index(kind)] = names.index(name)
    return tuple(names), table


SERIES, _SERIES_OF = _series_table()
_LANE_OF = {name: LANES.index(name.split()[0]) if name.split()[0] in LANES else 0 for name in SERIES}


def series_styles(scheme: Scheme, labels: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Legend name and colour of each series: a compute or transfer as the scheme names
    and colours its operation kind (a compute in `labels`' words, LABELS), exposed
    communication and idle as everywhere."""
    lab = {**LABELS, **(labels or {})}
    out = {"idle": (lab["idle"], COLORS["idle"])}
    for kind in KINDS["wait"]:
        if kind != "idle":
            out[f"exposed {kind}"] = (lab["exposed"], LANE_COLORS["exposed"])
    for kind in KINDS["compute"]:
        op = scheme.op_kinds.get(kind)
        name = lab.get(f"op.{kind}", op.label if op else f"compute ({kind})")
        out[kind] = (name, op.color if op else COLORS["compute"])
    transfer_kinds = [k for k in KINDS["send"] if k in scheme.op_kinds]
    for kind in KINDS["send"]:
        op = scheme.op_kinds.get(kind)
        label = op.label if op else kind
        # one hue for sends and one for receives; a scheme's later kinds other shades of it,
        # lighter then darker (a third kind as light as 0.9 was all but white)
        shade = TRANSFER_SHADES[transfer_kinds.index(kind) % len(TRANSFER_SHADES)] if kind in transfer_kinds else 0.0
        out[f"send {kind}"] = (lab["send"].format(label=label), lighter(LANE_COLORS["send"], shade))
        out[f"recv {kind}"] = (lab["recv"].format(label=label), lighter(LANE_COLORS["recv"], shade))
    return out


def rank_starts(columns: SpanTable, n: int) -> np.ndarray | None:
    """Where each rank's spans begin (n + 1 offsets into the columns) when the spans are
    grouped by rank in ascending order, as a simulated trace's are; None otherwise."""
    r = columns.rank
    if len(r) > 1 and not (r[1:] >= r[:-1]).all():
        return None
    return np.searchsorted(r, np.arange(n + 1, dtype=r.dtype))


def _window(columns: SpanTable, n: int, ranks: tuple[int, int] | None, limit: int,
            starts: np.ndarray | None) -> tuple[int, int, slice | np.ndarray]:
    """The inclusive window of ranks (narrowed to at most `limit` spans) and the rows it
    holds: a slice when the columns are grouped by rank, positions otherwise."""
    lo, hi = ranks if ranks is not None else (0, n - 1)
    lo, hi = max(0, min(int(lo), n - 1)), max(0, min(int(hi), n - 1))
    if hi < lo:
        lo, hi = hi, lo
    order = None
    if starts is None:
        starts = rank_starts(columns, n)
    if starts is None:
        order = np.argsort(columns.rank, kind="stable")
        starts = np.searchsorted(columns.rank[order], np.arange(n + 1))
    held = starts[lo + 1:hi + 2] - starts[lo]          # spans of ranks lo..r, for each r
    if held.size and held[-1] > limit:
        hi = lo + max(0, int(np.searchsorted(held, limit, side="right")) - 1)
    rows = slice(int(starts[lo]), int(starts[hi + 1]))
    return lo, hi, rows if order is None else order[rows]


def _chunk_ids(sets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(rows, widest) chunk ids of the rows' chunk-set ids, -1 padded; `sets` is the
    (sets + 1, widest) padded table, its last row the empty set (id -1)."""
    used = np.unique(ids)
    width = int((sets[used] >= 0).sum(axis=1).max(initial=0))
    return sets[ids, :width]


def _chunk_columns(sets: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, bool]:
    """The hover columns of the rows' chunk sets: the ids themselves (-1 padded) up to
    MAX_LISTED_CHUNKS wide, else (first, last, count); and whether they are the latter."""
    chunks = _chunk_ids(sets, ids)
    if chunks.shape[1] <= MAX_LISTED_CHUNKS:
        return chunks, False
    held = chunks >= 0
    first = np.where(held, chunks, np.iinfo(chunks.dtype).max).min(axis=1, initial=np.iinfo(chunks.dtype).max)
    last = chunks.max(axis=1, initial=-1)
    return np.column_stack([np.where(held.any(axis=1), first, -1), last, held.sum(axis=1)]), True


def _set_table(columns: SpanTable) -> np.ndarray:
    sets = columns.chunk_sets
    table = np.full((len(sets) + 1, max((len(s) for s in sets), default=0)), -1, dtype=np.int32)
    for i, chunks in enumerate(sets):
        table[i, :len(chunks)] = chunks
    return table


def _chunk_text(at: int, n: int, summary: bool, lab: dict[str, str] = LABELS) -> str:
    if summary:
        return lab["h_summary"].format(first=f"%{{customdata[{at}]}}", last=f"%{{customdata[{at + 1}]}}",
                                       count=f"%{{customdata[{at + 2}]}}")
    return ", ".join(f"%{{customdata[{at + i}]}}" for i in range(n))


def _hover(series: str, name: str, nq: int, nk: int, unit: str, q_summary: bool = False,
           kv_summary: bool = False, op_labels: dict[str, str] | None = None,
           labels: dict[str, str] | None = None) -> str:
    lab = {**LABELS, **(labels or {})}
    base = 6
    q = _chunk_text(base, nq, q_summary, lab)
    k = _chunk_text(base + nq, nk, kv_summary, lab)
    when = lab["h_when"].format(unit=unit)
    kind = series.split()[-1]
    carries = lab.get(f"carries.{kind}", lab["h_chunks_of"])
    if series in KINDS["compute"]:
        lines = [lab["h_compute"].format(), lab["h_chunks"].format(q=q, k=k), when,
                 "%{customdata[5]:.4g} TFLOP"]
    elif series.startswith("exposed"):
        label = (op_labels or {}).get(kind, kind)
        lines = [lab["h_wait"].format(label=label), lab["h_needs"].format(carries=carries, k=k), when]
    elif series == "idle":
        lines = [lab["h_idle"].format(), when]
    else:
        arrow = "→" if series.startswith("send") else "←"
        lines = [lab["h_transfer"].format(arrow=arrow), lab["h_carries"].format(name=name, carries=carries, k=k),
                 when, "%{customdata[5]:.4g} MiB"]
        if f"meaning.{kind}" in lab:
            lines.append(f"<i>{lab[f'meaning.{kind}']}</i>")
    return "<br>".join(lines) + "<extra></extra>"


def timeline(trace: Trace, ranks: tuple[int, int] | None = None, *,
             max_bar_spans: int = MAX_BAR_SPANS, max_spans: int = MAX_DRAWN_SPANS,
             title: str | None = None, starts: np.ndarray | None = None,
             labels: dict[str, str] | None = None, time_range_s: tuple[float, float] | None = None) -> go.Figure:
    """Per GPU, three lanes (compute, send, receive); exposed communication in red.

    `labels` (the page's language): "window", the window's note with {lo}, {hi} and {n};
    "time", the time axis with {unit}; "separators", Plotly's decimal and grouping signs;
    and any of LABELS, the series' names and the hovers' lines.

    `ranks` is an inclusive window; it narrows further if it holds more than
    `max_spans` marks. `time_range_s` (seconds from the run's start) shows that stretch
    of time only (a zoom), its spans drawn at its scale; by default the whole run. Spans
    closer than a column of PIXELS merge into one mark (`merge_marks`). Past
    `max_bar_spans` marks the lanes are WebGL line segments. `starts` is
    rank_starts(trace.columns, trace.n_gpus), when the caller keeps it.
    """
    c = trace.columns
    lo, hi, rows = _window(c, trace.n_gpus, ranks, MAX_WINDOW_SPANS, starts)
    t0 = float(c.start_s.min()) if len(c) else 0.0
    makespan = float(c.end_s.max()) - t0 if len(c) else 0.0   # trace.makespan_s, one pass each
    scale, unit = time_unit(makespan or 1e-6)
    zoomed = time_range_s is not None
    a_s, b_s = (0.0, makespan) if not zoomed else (max(0.0, float(time_range_s[0])), float(time_range_s[1]))
    if b_s <= a_s:
        a_s, b_s, zoomed = 0.0, makespan, False
    idx = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else np.asarray(rows)
    if zoomed:
        rel_start, rel_end = c.start_s[idx] - t0, c.end_s[idx] - t0
        idx = idx[(rel_end >= a_s) & (rel_start <= b_s)]
    shown_s = (b_s - a_s) or 1e-6
    marks = merge_marks(c, idx, t0, min_width_s=MIN_WIDTH_SHARE * shown_s, column_s=shown_s / PIXELS)
    hi = min(hi, lo + marks.ranks_within(lo, max_spans) - 1) if len(marks) > max_spans else hi
    marks = marks.of_ranks(lo, hi)
    use_gl = len(marks) > max_bar_spans
    shown = hi - lo + 1
    n_rows = shown * len(LANES)
    height = int(min(1400, max(320, 110 + n_rows * 11)))
    traces = _lane_traces(c, marks, lo, t0, scale, unit, scheme_of(trace), use_gl, lane_px=(height - 110) / n_rows,
                          labels=labels)
    if title is None:
        what = run_label(trace.config)
        title = (f"{trace.source.capitalize()} timeline: {trace.n_gpus} GPUs"
                 + (f", {what}" if what else "") + f" — makespan {makespan * scale:.4g} {unit}")
    lab = {"window": " (GPUs {lo}–{hi} of {n})", "window_one": " (GPU {gpu} of {n})", "time": "time ({unit})",
           "separators": ".,", **(labels or {})}
    if (lo, hi) != (0, trace.n_gpus - 1):
        count = lab.get("int", str)           # the page's grouping: "1,024" and "1.024" as in the title
        title += (lab["window_one"].format(gpu=count(lo), n=count(trace.n_gpus)) if lo == hi else
                  lab["window"].format(lo=count(lo), hi=count(hi), n=count(trace.n_gpus)))
    title = wrap_title(title)
    lines = title.count("<br>")
    x_range = {"range": [a_s * scale, b_s * scale]} if use_gl or zoomed else {}
    layout: dict[str, Any] = dict(
        template=TEMPLATE, height=height, barmode="overlay", bargap=0,
        # the title at the top, the legend (the template's: bottom-anchored at y=1.02)
        # between it and the plot, in a top margin that holds both
        # at the left: the toolbar takes the top right (at 1,280 px a centred Indonesian title
        # of 64 GPUs ran under it)
        title=dict(text=title, font=dict(size=13), y=1, yref="container", yanchor="top", x=0.01, xanchor="left",
                   pad=dict(t=16)),      # at 10 px the first line's ascenders touched the edge
        # the hover points would pad an automatic range: the run is the range
        separators=lab["separators"],
        xaxis=dict(title=lab["time"].format(unit=unit), rangemode="tozero", **x_range),
        yaxis=_gpu_axis(lo, hi),
        meta={"ranks": [lo, hi], "webgl": use_gl, "spans": marks.spans, "marks": len(marks), "run_s": makespan,
              "merged": marks.merged, "unit": unit, "scale": scale,
              "time_range_s": [a_s, b_s] if zoomed else None},
        hovermode="closest", margin=dict(t=90 + 16 * lines),
    )
    # one constructor call: plotly validates the layout once instead of once per update
    fig = go.Figure(data=traces, layout=layout)
    return fig


class Marks:
    """What a timeline draws of a set of spans: each mark one span, or consecutive spans of
    one series on one GPU's lane merged (merge_marks), as columns over the marks, ordered
    by rank, series and start. `first` is each mark's first span (a row of the trace's
    columns); times are seconds from the run's start; `drawn_end_s` is where it is drawn
    to, at least the minimum width past its start."""

    def __init__(self, **columns: np.ndarray):
        self.rank, self.series, self.first = columns["rank"], columns["series"], columns["first"]
        self.count, self.start_s, self.end_s = columns["count"], columns["start_s"], columns["end_s"]
        self.drawn_end_s, self.busy_s = columns["drawn_end_s"], columns["busy_s"]
        self.first_step, self.last_step = columns["first_step"], columns["last_step"]

    def __len__(self) -> int:
        return len(self.rank)

    @property
    def spans(self) -> int:
        return int(self.count.sum())

    @property
    def merged(self) -> int:
        """Marks of more than one span."""
        return int((self.count > 1).sum())

    def busy_share(self) -> np.ndarray:
        """Of each mark's stretch (its first start to its last end), the share its spans
        take (1 for a single span)."""
        stretch = self.end_s - self.start_s
        return np.where(stretch > 0, self.busy_s / np.where(stretch > 0, stretch, 1.0), 1.0)

    def ranks_within(self, lo: int, budget: int) -> int:
        """How many ranks from `lo` on fit in `budget` marks (at least one)."""
        per_rank = np.bincount(self.rank - lo)
        return max(1, int(np.searchsorted(np.cumsum(per_rank), budget, side="right")))

    def of_ranks(self, lo: int, hi: int) -> "Marks":
        keep = (self.rank >= lo) & (self.rank <= hi)
        if keep.all():
            return self
        return Marks(**{k: v[keep] for k, v in vars(self).items()})


def merge_marks(c: SpanTable, rows: np.ndarray, t0: float, min_width_s: float, column_s: float) -> Marks:
    """The marks of the spans `rows` of `c`: each span drawn from its start to its end, or
    `min_width_s` past its start where it is narrower; consecutive spans of one series on
    one GPU that are both narrower merge where the later starts within `column_s` of every
    drawn end before it, so the marks cover what the spans cover, gaps of a column or less
    filled."""
    series = _SERIES_OF[c.stream[rows], c.kind[rows]].astype(np.int64)
    drawn = series >= 0
    rows, series = rows[drawn], series[drawn]
    rank = c.rank[rows].astype(np.int64)
    start = c.start_s[rows] - t0
    end = c.end_s[rows] - t0
    order = np.lexsort((start, series, rank))
    rows, rank, series, start, end = rows[order], rank[order], series[order], start[order], end[order]
    drawn_end = np.maximum(end, start + min_width_s)
    new = np.ones(len(rows), dtype=bool)
    if len(rows) > 1:
        same = (rank[1:] == rank[:-1]) & (series[1:] == series[:-1])
        # the furthest drawn end so far within each (rank, series): every group lifted past
        # the one before it, so that one running maximum serves them all
        group = np.concatenate([[0], np.cumsum(~same)]).astype(float)
        lift = group * (2.0 * float(drawn_end.max()) + 1.0)
        furthest = np.maximum.accumulate(drawn_end + lift)
        # only spans drawn wider than they are merge: a wider one stays itself (back-to-back
        # blocks in alternate shades), as do its neighbours
        narrow = end - start < min_width_s
        new[1:] = ~same | (start[1:] + lift[1:] > furthest[:-1] + column_s) | ~narrow[1:] | ~narrow[:-1]
    firsts = np.flatnonzero(new)
    if not len(rows):
        empty = np.zeros(0)
        return Marks(rank=empty.astype(np.int64), series=empty.astype(np.int64), first=empty.astype(np.int64),
                     count=empty.astype(np.int64), start_s=empty, end_s=empty, drawn_end_s=empty, busy_s=empty,
                     first_step=empty.astype(np.int64), last_step=empty.astype(np.int64))
    step = c.step[rows].astype(np.int64)
    return Marks(rank=rank[firsts], series=series[firsts], first=rows[firsts],
                 count=np.diff(np.append(firsts, len(rows))), start_s=start[firsts],
                 end_s=np.maximum.reduceat(end, firsts), drawn_end_s=np.maximum.reduceat(drawn_end, firsts),
                 busy_s=np.add.reduceat(end - start, firsts),
                 first_step=np.minimum.reduceat(step, firsts), last_step=np.maximum.reduceat(step, firsts))


def _lane_traces(c: SpanTable, marks: Marks, lo: int, t0: float, scale: float, unit: str, scheme: Scheme,
                 use_gl: bool, lane_px: float, labels: dict[str, str] | None = None) -> list:
    """The `marks` of the columns `c` on their GPUs' lanes from GPU `lo` down, a trace (or
    with `use_gl` a pair) per series for its single spans and one for its merged marks,
    times in `unit` (`scale` per second)."""
    styles = series_styles(scheme, labels)
    lab = {**LABELS, **(labels or {})}
    op_labels = {k: op.label for k, op in scheme.op_kinds.items()}
    sets = _set_table(c)
    traces = []
    legend_shown: set[str] = set()       # exposed communication of every kind: one legend entry
    for code, series in enumerate(SERIES):
        of_series = marks.series == code
        if not of_series.any():
            continue
        name, color = styles[series]
        group = "exposed" if series.startswith("exposed") else series
        y_lane = _LANE_OF[series]
        single = np.flatnonzero(of_series & (marks.count == 1))
        merged = np.flatnonzero(of_series & (marks.count > 1))
        for kind, sel in (("span", single), ("merged", merged)):
            if not sel.size:
                continue
            s, true_end = marks.start_s[sel] * scale, marks.end_s[sel] * scale
            e = marks.drawn_end_s[sel] * scale
            y = (marks.rank[sel] - lo) * len(LANES) + y_lane
            if kind == "span":
                rows = marks.first[sel]
                stream = c.stream[rows]
                amount = np.where(stream == COMPUTE, c.flops[rows] / 1e12, c.bytes[rows] / 2 ** 20)
                (qc, q_sum), (kc, kv_sum) = _chunk_columns(sets, c.q_chunks[rows]), _chunk_columns(sets, c.kv_chunks[rows])
                # the last column names the series: the details on click read it
                cd = np.column_stack([c.rank[rows], c.step[rows], s, true_end - s, c.peer[rows], amount, qc, kc,
                                      np.full(len(sel), code)]).astype(np.float32)
                hover = _hover(series, name, qc.shape[1], kc.shape[1], unit, q_sum, kv_sum, op_labels, labels)
                shade: Any = color
                if series in KINDS["compute"] and not use_gl:
                    # alternate shades by step so that back-to-back blocks stay distinguishable
                    shade = np.where(c.step[rows] % 2 == 1, lighter(color), color)
                thickness: Any = BAR_THICKNESS
            else:
                cd = np.column_stack([marks.rank[sel], marks.first_step[sel], s, true_end - s, marks.last_step[sel],
                                      marks.busy_s[sel] * scale, marks.count[sel],
                                      np.full(len(sel), code)]).astype(np.float32)
                hover = "<br>".join([lab["h_merged"].format(name=name), lab["h_merged_when"].format(unit=unit),
                                     f"<i>{lab['h_zoom']}</i>"]) + "<extra></extra>"
                shade = color
                # as thick as the stretch is busy, and on the compute lane stacked as a bar of
                # shares: computes from the lane's top, waits from its bottom (a stretch busy
                # 70% computing and 30% waiting draws 0.7 of the bar blue over 0.3 red)
                thickness = BAR_THICKNESS * np.clip(marks.busy_share()[sel], MIN_BUSY_DRAWN, 1.0)
                if y_lane == 0:
                    side = 1.0 if series == "idle" or series.startswith("exposed") else -1.0
                    y = y + side * (BAR_THICKNESS - thickness) / 2
            legend = group not in legend_shown
            legend_shown.add(group)
            traces += _drawn(s, e, true_end, y, cd, name, color, shade, hover, group, legend, use_gl, lane_px,
                             meta={"marks": kind}, thickness=thickness)
    return traces


def _drawn(s: np.ndarray, e: np.ndarray, true_end: np.ndarray, y: np.ndarray, cd: np.ndarray, name: str, color: str,
           shade: Any, hover: str, group: str, legend: bool, use_gl: bool, lane_px: float,
           meta: dict[str, Any], thickness: Any = None) -> list:
    """One series' marks from `s` to `e` on lanes `y`: SVG bars `thickness` of a lane thick
    (one value, or one per mark), or with `use_gl` WebGL line segments that do not hover
    and invisible points at their middles that do (hover data once per mark, not thrice)."""
    if use_gl:
        nan = np.full(len(s), np.nan)
        return [go.Scattergl(
                    x=np.column_stack([s, e, nan]).ravel().astype(np.float32),
                    y=np.column_stack([y, y, nan]).ravel().astype(np.float32), mode="lines", name=name,
                    line=dict(color=color, width=float(np.clip(0.75 * lane_px, 1, 12))),
                    connectgaps=False, hoverinfo="skip", legendgroup=group, showlegend=legend, meta=meta),
                go.Scattergl(
                    x=((s + true_end) / 2).astype(np.float32), y=y.astype(np.float32), mode="markers",
                    name=name, marker=dict(color=color, opacity=0, size=4), customdata=cd,
                    hovertemplate=hover, legendgroup=group, showlegend=False, meta=meta)]
    return [go.Bar(x=e - s, base=s, y=y.astype(np.float32), orientation="h",
                   width=BAR_THICKNESS if thickness is None else thickness, name=name,
                   marker=dict(color=shade, line=dict(width=0)), customdata=cd, hovertemplate=hover,
                   legendgroup=group, showlegend=legend, meta=meta)]


def _gpu_axis(lo: int, hi: int) -> dict[str, Any]:
    """The lanes' axis: GPUs lo to hi down the page, a label on every GPU's middle lane
    (on one in `shown // 32` past 32 of them)."""
    shown = hi - lo + 1
    n_rows = shown * len(LANES)
    tick_ranks = list(range(lo, hi + 1, max(1, shown // 32)))
    # the GPUs shown are the window's (the page's slider chooses them): a zoom is in time only
    axis = dict(autorange="reversed", tickmode="array", fixedrange=True,
                tickvals=[(r - lo) * len(LANES) + 1 for r in tick_ranks],
                ticktext=[f"GPU {r}" for r in tick_ranks], showgrid=False,
                range=[n_rows - 0.5, -0.5])
    if shown <= 64:
        # separators between GPUs as minor grid lines: one array, where 63 layout shapes
        # cost ~20 ms of validation on a 64-GPU figure
        axis["minor"] = dict(tickmode="array", ticks="", showgrid=True, gridcolor="#bbb",
                             gridwidth=0.5,
                             tickvals=[r * len(LANES) - 0.5 for r in range(1, shown)])
    return axis
