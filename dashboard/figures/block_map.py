"""View 3, who computes which block when: the scheme's block map (query chunk x key
chunk, sim.schemes.base.BlockMap) beside the work each GPU computed (docs/design.md, "Work
of a block"). The scheme says what a cell's value is and which rank holds each chunk;
this module only draws it. Packed documents (docs/packed.md): a chunk is a GPU's shard,
whose tokens need not be consecutive, so the document mask is drawn token by token in a
panel of its own (`mask_bins`), each cell coloured by the shard that holds its queries.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from dashboard.figures.documents import kept_keys
from dashboard.figures.style import LABEL_BACKGROUND, TEMPLATE, rank_colors, run_label, scheme_of
from sim.layouts import packed
from sim.reasons import english
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.trace.format import COMPUTE, Trace

MAX_HOVER_CELLS = 128 * 128
"""The block map carries per-cell hover data up to this many cells."""
MAX_MAP_CHUNKS = 256
"""Past this many chunks a side, the map shows every k-th chunk: the map is drawn at most
about 480 px a side, so 256 cells give each about two pixels (512 drew 1.7 MB of JSON at
2,048 chunks, 0.4 MB now, and the page's warm redraw of a 1,024-GPU map took 0.81 s against
0.66 s: bench/results/speed/cpu-2core/dashboard-latency.md)."""
MASK_BINS = 128
"""Packed documents: the token panel bins queries and keys into at most this many bins."""
MAX_DRAWN_BOUNDS = 64
"""...and draws the documents' boundaries over it up to this many documents."""
MAX_WORK_BARS = 128
"""The work per GPU is a bar per GPU up to this many GPUs, a filled step per GPU past it (a
bar would be under a pixel wide): one path, whose figure Plotly builds without checking a
colour string per bar (a 1,024-GPU block map 0.18 s against 0.22 s with the bars, median of
five; the browser draws either in about 50 ms)."""
WORK_LINE = "#636efa"
"""The colour of the work's steps past MAX_WORK_BARS GPUs."""
MAX_DISCRETE_VALUES = 24
"""Integer values 0..k-1 with k up to this get one distinct colour each."""


def _colorscale(value: np.ndarray) -> tuple[object, float, float, list[int] | None]:
    finite = value[np.isfinite(value)]
    top = float(finite.max()) if finite.size else 0.0
    k = int(top) + 1
    if finite.size and (finite == np.rint(finite)).all() and finite.min() >= 0 and k <= MAX_DISCRETE_VALUES:
        # ordered values (ring steps) in ordered shades, not the GPUs' hues of the strip above
        palette = sample_colorscale("Viridis", [i / max(1, k - 1) for i in range(k)])
        scale = []
        for i in range(k):
            scale += [[i / k, palette[i]], [(i + 1) / k, palette[i]]]
        return scale, -0.5, k - 0.5, list(range(k))
    return "Viridis", float(finite.min()) if finite.size else 0.0, top, None


def _what(cfg: dict) -> str:
    """The run in a few words: the ring's (the default scheme's) layout, another scheme's name and
    settings."""
    if cfg.get("scheme", DEFAULT_SCHEME) == DEFAULT_SCHEME:
        return cfg.get("layout", "unknown layout")
    return run_label(cfg)


def mask_bins(p: packed.Packed, bins: int = MASK_BINS) -> tuple[np.ndarray, np.ndarray]:
    """(edges, pairs): the tokens cut into at most `bins` bins (edges, ascending) and the
    (query, key) pairs the document mask keeps in each (query bin, key bin)."""
    seq = p.seq
    edges = np.unique(np.linspace(0, seq, min(bins, seq) + 1).round().astype(np.int64))
    lo, hi = kept_keys(p)
    # a query's keys in bin [s, e): clip(hi + 1, s, e) - clip(lo, s, e), and over a query
    # bin's tokens sum(clip(x, s, e)) = H(e) - H(s) + m s with H(E) = sum(min(x, E))
    return edges, np.diff(_sum_min(hi + 1, edges), axis=1) - np.diff(_sum_min(lo, edges), axis=1)


def _sum_min(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(bins, edges): over the tokens of each bin, the sum of min(x, edge) for every edge."""
    qbin = np.searchsorted(edges, np.arange(len(x)), side="right") - 1
    order = np.lexsort((x, qbin))
    xs = x[order]
    cs = np.r_[0, np.cumsum(xs)]
    span = len(x) + 2
    below = np.searchsorted(qbin[order] * span + xs, np.arange(len(edges) - 1)[:, None] * span + edges[None, :])
    first, end = edges[:-1, None], edges[1:, None]
    return cs[below] - cs[first] + edges[None, :] * (end - below)


def _token_panel(fig: go.Figure, p: packed.Packed, bm, n: int, lab: dict) -> None:
    """Query token x key token, binned: blank where the mask keeps no pair, else the
    colour of the GPU holding most of the bin's queries (its shard's owner)."""
    edges, pairs = mask_bins(p)
    owner = np.empty(p.seq, dtype=np.int64)
    owner[packed.rank_tokens(p)] = np.arange(p.n)[:, None]
    bins = len(edges) - 1
    qbin = np.searchsorted(edges, np.arange(p.seq), side="right") - 1
    shard = np.bincount(qbin * p.n + owner, minlength=bins * p.n).reshape(bins, p.n).argmax(axis=1)
    colors = np.asarray(rank_colors(n), dtype=object)[bm.owner[np.arange(p.n)]]
    scale = [[0.0, colors[0]], [1.0, colors[0]]] if p.n == 1 else \
        [[x, c] for k, c in enumerate(colors) for x in (k / p.n, (k + 1) / p.n)]
    width = np.diff(edges)
    shape = pairs.shape
    # float32, five numbers a cell: 128 x 128 bins stay under half a megabyte
    custom = np.stack([np.broadcast_to(edges[:-1, None], shape), np.broadcast_to(edges[None, :-1], shape),
                       pairs, pairs / np.outer(width, width) * 100,
                       np.broadcast_to(bm.owner[shard][:, None], shape)], axis=-1).astype(np.float32)
    fig.add_trace(go.Heatmap(
        z=np.where(pairs > 0, shard[:, None], np.nan).astype(np.float32), x=edges, y=edges,
        colorscale=scale, zmin=-0.5, zmax=p.n - 0.5, showscale=False, hoverongaps=False, customdata=custom,
        hovertemplate=lab["h_token"] + "<extra></extra>"),
        row=1, col=2)
    cuts = np.asarray(p.bounds[1:-1], dtype=np.float64)
    if 0 < len(cuts) <= MAX_DRAWN_BOUNDS:
        x = np.column_stack([cuts, cuts, np.full_like(cuts, np.nan)]).ravel()
        y = np.tile([0.0, float(p.seq), np.nan], len(cuts))
        line = dict(color="rgba(0,0,0,0.35)", width=1)
        fig.add_trace(go.Scatter(x=np.r_[x, y], y=np.r_[y, x], mode="lines", line=line, hoverinfo="skip",
                                 showlegend=False), row=1, col=2)
    fig.update_xaxes(title_text=lab["key_token"], range=[0, p.seq], row=1, col=2, showgrid=False)
    # no axis title on the left: it would sit under the first panel's colour bar (the
    # panel's title names both axes)
    fig.update_yaxes(range=[p.seq, 0], row=1, col=2, showgrid=False, scaleanchor="x2", constrain="domain")


LABELS = {
    "title": ("Who computes which block when: {run}, {mask}, {gpus} GPUs<br>work imbalance (FLOPs) max/mean "
              "{imbalance}; the cards' load imbalance is of time"),
    "causal": "causal", "nomask": "no mask",
    "chunks": "query chunk × key chunk:{sep}{value} of its compute",
    "tokens": "query token × key token:<br>kept pairs, by the GPU holding the queries",
    "work": "work per GPU", "key": "key {axis}", "query": "query {axis}",
    "shown": " (one chunk in {stride} of {chunks} shown)", "key_token": "key token",
    "tflop": "TFLOP computed", "mean": "mean",
    # hover templates: Plotly's placeholders only, numbers in the figure's `separators`
    "h_cell": "query chunk %{y} × key chunk %{x}",
    "h_cell_gpus": "query chunk %{y} (GPU %{customdata[0]}) × key chunk %{x} (K/V of GPU %{customdata[1]})",
    "h_pairs": "%{customdata[2]:,} unmasked pairs (%{customdata[3]:.1f}% of the block)",
    "h_token": ("queries from token %{customdata[0]:,} × keys from token %{customdata[1]:,}<br>"
                "%{customdata[2]:,} kept pairs (%{customdata[3]:.1f}% of the bin)<br>"
                "queries mostly on GPU %{customdata[4]}"),
    "separators": ".,",
}
"""The figure's texts in English: `block_map(labels=...)` replaces any of them, and adds
how numbers read (`digits`), the run in words (`run`, from the trace's header)
and the scheme's own words for the map's values and axes (`sim`: a sim.reasons clause in words)."""


def block_map(trace: Trace, *, labels: dict | None = None) -> go.Figure:
    """Query chunk x key chunk, colored by the scheme's value (the ring: the step of its
    compute); masked blank; work per GPU beside. Packed documents: the document mask token
    by token between them. `labels`: the texts in the page's language (LABELS)."""
    lab = {**LABELS, "digits": str, "run": _what, "sim": english, **(labels or {})}
    bm = scheme_of(trace).block_map(trace)
    n = trace.n_gpus
    chunks = bm.value.shape[0]
    stride = -(-chunks // MAX_MAP_CHUNKS)
    ids = np.arange(0, chunks, stride)
    value = bm.value[::stride, ::stride]
    p = _packed_of(trace, chunks)
    value_label, axis_label = lab["sim"](bm.value_label), lab["sim"](bm.axis_label)
    work_col = 2 if p is None else 3
    fig = make_subplots(rows=1, cols=work_col,
                        column_widths=[0.58, 0.42] if p is None else [0.32, 0.38, 0.30],
                        # room between the map and the work for the colour bar, its title on its side,
                        # and the work's axis title: none of them meet
                        horizontal_spacing=0.2 if p is None else 0.07,
                        # three panels side by side: each title on two lines
                        subplot_titles=(lab["chunks"].format(sep=" " if p is None else "<br>", value=value_label),
                                        *([] if p is None else [lab["tokens"]]), lab["work"]))
    fig.update_layout(template=TEMPLATE, height=560 if p is None else 600, separators=lab["separators"])
    colorscale, zmin, zmax, tickvals = _colorscale(value)
    custom = None
    hover = f"{lab['h_cell']}<br>{value_label} %{{z}}<extra></extra>"
    if value.size <= MAX_HOVER_CELLS:
        work = bm.work[::stride, ::stride]
        owner = bm.owner[ids]
        frac = work / float(bm.chunk_size * bm.chunk_size)
        # a typed 3-D array: plotly.js decodes it without a nested list per cell
        custom = np.stack([np.broadcast_to(owner[:, None], work.shape),
                           np.broadcast_to(owner[None, :], work.shape), work, frac * 100],
                          axis=-1).astype(np.float64)
        hover = f"{lab['h_cell_gpus']}<br>{value_label} %{{z}}<br>{lab['h_pairs']}<extra></extra>"
    fig.add_trace(go.Heatmap(
        z=value.astype(np.float32), x=ids if stride > 1 else None, y=ids if stride > 1 else None,
        colorscale=colorscale, zmin=zmin, zmax=zmax, customdata=custom,
        hovertemplate=hover, hoverongaps=False, xgap=1 if chunks <= 64 else 0,
        ygap=1 if chunks <= 64 else 0,
        colorbar=dict(title=dict(text=value_label, side="right") if p is None else None,
                      x=0.475 if p is None else 0.29, len=0.9, tickvals=tickvals, thickness=18 if p is None else 12)),
        row=1, col=1)
    shown = "" if stride == 1 else lab["shown"].format(stride=stride, chunks=chunks)
    # square cells: the panel gives up width (next to its colour bar) or height, never shows
    # chunks that are not there
    fig.update_xaxes(title_text=lab["key"].format(axis=axis_label) + shown, row=1, col=1, showgrid=False,
                     constrain="domain", constraintoward="right")
    fig.update_yaxes(title_text=lab["query"].format(axis=axis_label), autorange="reversed", row=1, col=1,
                     showgrid=False, scaleanchor="x", constrain="domain")
    if p is not None:
        _token_panel(fig, p, bm, n, lab)
    c = trace.columns
    comp = c.stream == COMPUTE
    flops = np.bincount(c.rank[comp], c.flops[comp], minlength=n)[:n]
    mean = flops.mean() if n else 0.0
    if n <= MAX_WORK_BARS:
        fig.add_trace(go.Bar(x=np.arange(n), y=flops / 1e12, marker_color=list(rank_colors(n)),
                             hovertemplate="GPU %{x}: %{y:.4g} TFLOP<extra></extra>", showlegend=False),
                      row=1, col=work_col)
    else:
        # one step per GPU, as wide as its bar would be: a single path
        steps = np.append(flops, flops[-1:]) / 1e12
        fig.add_trace(go.Scatter(x=np.arange(n + 1) - 0.5, y=steps, customdata=np.minimum(np.arange(n + 1), n - 1),
                                 mode="lines", line=dict(shape="hv", width=1, color=WORK_LINE), fill="tozeroy",
                                 hovertemplate="GPU %{customdata}: %{y:.4g} TFLOP<extra></extra>",
                                 showlegend=False),
                      row=1, col=work_col)
    fig.add_hline(y=mean / 1e12, line=dict(color="#444", dash="dash", width=1), row=1, col=work_col,
                  annotation_text=lab["mean"], annotation_position="top left",
                  # above the line and the bars' tops, on white: not struck through
                  annotation=dict(yshift=4, bgcolor=LABEL_BACKGROUND))
    imbalance = flops.max() / mean if mean > 0 else 1.0
    fig.update_xaxes(title_text="GPU", row=1, col=work_col)
    fig.update_yaxes(title_text=lab["tflop"], row=1, col=work_col)
    cfg = trace.config
    causal = bool(cfg.get("workload", {}).get("causal", True))
    fig.update_layout(
        # two lines: one would run under the plot's toolbar at the top right
        title=dict(text=lab["title"].format(run=lab["run"](cfg), mask=lab["causal" if causal else "nomask"],
                                            gpus=n, imbalance=lab["digits"](f"{imbalance:.3f}")),
                   font=dict(size=13)),
        margin=dict(t=90 if p is None else 150), meta={"imbalance": float(imbalance), "chunks": chunks,
                                                       "stride": stride,
                                 "packed": p is not None})
    return fig


def _packed_of(trace: Trace, chunks: int) -> packed.Packed | None:
    """The packed sequence whose shards are the map's `chunks` chunks (the ring's layout on
    them; one shard: all of it), or None for one document."""
    cfg = trace.config
    try:
        return packed.from_header(cfg, chunks, cfg["layout"] if chunks > 1 else "contiguous")
    except (KeyError, TypeError, ValueError):
        return None
