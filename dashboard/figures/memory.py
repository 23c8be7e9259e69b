"""View 6, memory: peak bytes per GPU against sequence length and GPU count, beside the
full K/V no ring GPU needs to hold (docs/design.md, fact 4), and every scheme's own memory
model (sim.schemes, `peak_memory`): all-gather holds the whole K/V, the ring its shard
and the blocks in flight (two, one on two GPUs). Draws the table of dashboard.compute.memory_table."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import COLORS, TEMPLATE, scheme_color
from sim.schemes import DEFAULT as DEFAULT_SCHEME

GIB = 2 ** 30
ITEM_GROUPS = (
    ("gathered", "the gathered K/V (every token)", COLORS["full"]),
    ("kv", "K/V: own shard, ring buffers", COLORS["transfer"]),
    ("other", "the rest: Q, output, statistics, gradients, head shards", "#b8bcc6"),
)
"""How the bars group a scheme's items (sim.schemes' item names): the K/V gathered from
every GPU, the K/V a GPU holds of its own or in flight, everything else."""


def item_group(name: str) -> str:
    if name == "kv_gathered":
        return "gathered"
    return "kv" if name.startswith("kv_") else "other"


def _gib(x: float | None) -> float | None:
    return None if x is None else x / GIB


LABELS = {
    "headline": "The full K/V would take {full} GiB; the ring holds {ring} GiB of it per GPU",
    "gathered_whole": ", all-gather {gathered} GiB (the whole K/V)",
    "gathered_part": ", all-gather {gathered} GiB ({share} of the K/V at once, pipelined)",
    "scheme_now": "{scheme}: {total} GiB per GPU now", "detail": "{scheme} now: {detail}",
    "not_here": "not possible here: {items}",
    "by_seq": "against sequence length ({gpus} GPUs)", "by_gpus": "against GPU count ({tokens} tokens)",
    "items": "each scheme now ({tokens} tokens on {gpus} GPUs), item by item",
    "ring_peak": "ring: peak per GPU", "ring_kv": "ring: K/V held per GPU (own shard + up to 2 in flight)",
    "ring_kv_short": "ring: K/V held per GPU", "one_gpu": "one GPU, whole sequence (no ring)",
    "full": "the full K/V on one GPU", "fixed_shard": "ring, {tokens} tokens per GPU (sequence grows)",
    "peak": "{run}: peak per GPU", "capacity": "GPU memory ({gib} GiB)", "capacity_hover": "GPU memory {gib} GiB",
    "full_hover": "full K/V {gib} GiB", "ring": "ring",
    "gathered": ITEM_GROUPS[0][1], "kv": ITEM_GROUPS[1][1], "other": ITEM_GROUPS[2][1],
    # hover templates: Plotly's placeholders only, numbers in the figure's `separators`
    "h_tokens": "%{x:,} tokens: %{y:.4g} GiB per GPU", "h_gpus": "%{x} GPUs: %{y:.4g} GiB per GPU",
    "h_kv_tokens": "%{x:,} tokens: K/V held %{y:.4g} GiB per GPU",
    "h_kv_gpus": "%{x} GPUs: K/V held %{y:.4g} GiB per GPU",
    "h_one_gpu": "%{x:,} tokens on one GPU: %{y:.4g} GiB", "h_full_tokens": "%{x:,} tokens: full K/V %{y:.4g} GiB",
    "h_full": "full K/V %{y:.4g} GiB",
    "seq_axis": "sequence length (tokens)", "gpus_axis": "GPUs", "gib_per_gpu": "GiB per GPU",
    "separators": ".,",
    # a scheme's memory items (sim.schemes' names), in words
    "item.q": "Q",
    "item.kv_own": "own K/V shard",
    "item.kv_buffers": "K/V blocks in flight",
    "item.kv_gathered": "gathered K/V",
    "item.out": "output",
    "item.out_accum": "output accumulator",
    "item.softmax_stats": "softmax statistics",
    "item.qkv_tokens": "Q/K/V, token shard",
    "item.out_tokens": "output, token shard",
    "item.qkv_heads": "Q/K/V, head shard",
    "item.out_heads": "output, head shard",
    "item.dkv_buffers": "dK/dV blocks in flight",
    "item.dkv_partial": "dK/dV partial sums",
    "item.dout": "output gradient",
    "item.dq_accum": "dQ accumulator",
    "item.dqkv": "dQ/dK/dV",
}
"""The figure's texts in English: `memory(labels=...)` replaces any of them, and adds how
numbers read (`digits`: a number as Python writes it, in the language's decimal sign;
`int`: a whole number, grouped) and a scheme variant's name (`run`: from its entry of
dashboard.compute.scheme_memory, its `label` in English)."""


def memory(table: dict[str, Any], *, labels: dict[str, Any] | None = None) -> go.Figure:
    """Peak memory per GPU against sequence length and GPU count (the ring and every
    other scheme), beside the full K/V; under them each scheme's memory now, item by
    item, against the full K/V. `labels`: the texts in the page's language (LABELS)."""
    lab = {**LABELS, "digits": str, "int": lambda x: f"{x:,.0f}", "run": lambda v: v["label"], "scheme_name": str,
           "refused": lambda r: f"{r['scheme']} ({r['refused']})",
           **(labels or {})}
    whole = lab["int"]
    fig = make_subplots(
        rows=2, cols=2, specs=[[{}, {}], [{"colspan": 2}, None]], row_heights=[0.55, 0.45],
        horizontal_spacing=0.1, vertical_spacing=0.16, subplot_titles=(
            lab["by_seq"].format(gpus=whole(table["gpus_now"])),
            lab["by_gpus"].format(tokens=whole(table["seq_now"])),
            lab["items"].format(tokens=whole(table["seq_now"]), gpus=whole(table["gpus_now"]))))
    traces = _ring_lines(table, lab) + _scheme_lines(table, lab) + _capacity_lines(table, lab) + _items_now(table, lab)
    # one call: plotly validates the figure once rather than once per trace
    fig.add_traces([tr for tr, _, _ in traces], rows=[r for _, r, _ in traces], cols=[c for _, _, c in traces])
    _axes_and_titles(fig, table, lab)
    return fig


_Placed = tuple[Any, int, int]
"""A trace and the subplot (row, column) it goes in."""


def _line(x, y, name: str, row_col: tuple[int, int], **kw) -> _Placed:
    return (go.Scatter(x=x, y=y, name=name, **kw), *row_col)


def _ring_lines(table: dict[str, Any], lab: dict[str, Any]) -> list[_Placed]:
    """The ring's peak and K/V held per GPU against sequence length (beside one GPU
    holding the whole sequence) and against GPU count (beside a shard of fixed size), each
    with the full K/V."""
    whole, ring = lab["int"], lab["ring"]
    bs, bg = table["by_seq"], table["by_gpus"]
    seqs, counts = [r["seq"] for r in bs], [r["gpus"] for r in bg]
    return [
        _line(seqs, [r["ring_bytes"] / GIB for r in bs], lab["ring_peak"], (1, 1), legendgroup="ring",
              mode="lines+markers", line=dict(color=COLORS["ring"]),
              hovertemplate=f"{ring}, {lab['h_tokens']}<extra></extra>"),
        _line(seqs, [r["ring_kv_bytes"] / GIB for r in bs], lab["ring_kv"],
              (1, 1), legendgroup="ringkv", mode="lines+markers", line=dict(color=COLORS["transfer"]),
              marker=dict(symbol="square", size=5),
              hovertemplate=f"{lab['h_kv_tokens']}<extra></extra>"),
        _line(seqs, [r["one_gpu_bytes"] / GIB for r in bs], lab["one_gpu"], (1, 1),
              mode="lines", line=dict(color="#555555", dash="dot"),
              hovertemplate=f"{lab['h_one_gpu']}<extra></extra>"),
        _line(seqs, [r["full_kv_bytes"] / GIB for r in bs], lab["full"], (1, 1), legendgroup="full",
              mode="lines", line=dict(color=COLORS["full"], dash="dash"),
              hovertemplate=f"{lab['h_full_tokens']}<extra></extra>"),
        _line(counts, [r["ring_bytes"] / GIB for r in bg], lab["ring_peak"], (1, 2), legendgroup="ring",
              showlegend=False, mode="lines+markers", line=dict(color=COLORS["ring"]),
              hovertemplate=f"{ring}, {lab['h_gpus']}<extra></extra>"),
        _line(counts, [r["ring_kv_bytes"] / GIB for r in bg], lab["ring_kv_short"], (1, 2), legendgroup="ringkv",
              showlegend=False, mode="lines+markers", line=dict(color=COLORS["transfer"]),
              marker=dict(symbol="square", size=5),
              hovertemplate=f"{lab['h_kv_gpus']}<extra></extra>"),
        _line(counts, [r["fixed_shard_bytes"] / GIB for r in bg],
              lab["fixed_shard"].format(tokens=whole(table["tokens_per_rank"])), (1, 2),
              mode="lines+markers", line=dict(color="#8e44ad", dash="dot"),
              hovertemplate=f"{lab['h_gpus']}<extra></extra>"),
        _line(counts, [r["full_kv_bytes"] / GIB for r in bg], lab["full"], (1, 2), legendgroup="full",
              showlegend=False, mode="lines", line=dict(color=COLORS["full"], dash="dash"),
              hovertemplate=f"{lab['h_full']}<extra></extra>"),
    ]


def _scheme_lines(table: dict[str, Any], lab: dict[str, Any]) -> list[_Placed]:
    """Every other scheme's peak per GPU on both plots, from its own memory model."""
    seqs, counts = [r["seq"] for r in table["by_seq"]], [r["gpus"] for r in table["by_gpus"]]
    out = []
    seen: dict[str, int] = {}
    for v in table.get("schemes", []):
        if v["scheme"] == DEFAULT_SCHEME:
            continue
        k = seen[v["scheme"]] = seen.get(v["scheme"], -1) + 1
        style = dict(color=scheme_color(v["scheme"]), dash=("solid", "dot", "dashdot")[k % 3], width=2)
        run = lab["run"](v)
        for col, xs, ys, what in ((1, seqs, v["by_seq"], lab["h_tokens"]), (2, counts, v["by_gpus"], lab["h_gpus"])):
            out.append(_line(xs, [_gib(y) for y in ys], lab["peak"].format(run=run), (1, col),
                             legendgroup=v["label"], showlegend=col == 1, mode="lines+markers", line=style,
                             marker=dict(size=4), connectgaps=False,
                             hovertemplate=f"{run}, {what}<extra></extra>"))
    return out


def _capacity_lines(table: dict[str, Any], lab: dict[str, Any]) -> list[_Placed]:
    """The GPU's memory across both plots."""
    seqs, counts = [r["seq"] for r in table["by_seq"]], [r["gpus"] for r in table["by_gpus"]]
    cap = table["capacity_bytes"] / GIB
    # the capacity as a trace: an annotated hline would be placed in log10 units on a log axis
    # three significant digits, as the Plan view and the cards write a GPU's memory (74.5 GiB)
    cap_text = lab["digits"](f"{cap:.3g}")
    return [_line(xs, [cap, cap], lab["capacity"].format(gib=cap_text), (1, col), mode="lines", legendgroup="cap",
                  showlegend=col == 1, line=dict(color=COLORS["capacity"], width=1, dash="dashdot"),
                  hovertemplate=lab["capacity_hover"].format(gib=cap_text) + "<extra></extra>")
            for col, xs in ((1, [seqs[0], seqs[-1]]), (2, [counts[0], counts[-1]]))]


def _items_now(table: dict[str, Any], lab: dict[str, Any]) -> list[_Placed]:
    """Each scheme now, item by item (one trace per item name, a segment per scheme that
    has it): the gathered K/V, the K/V held, the rest; and the full K/V across them."""
    schemes = table.get("schemes", [])
    full_now = table["full_kv_now_bytes"] / GIB
    runs = {v["label"]: lab["run"](v) for v in schemes}
    labels_now = list(runs.values())
    names = list(dict.fromkeys(k for v in schemes for k in v["items"] if k != "total"))
    out: list[_Placed] = []
    shown_groups: set[str] = set()
    for name in names:
        group = item_group(name)
        color = next(c for g, _, c in ITEM_GROUPS if g == group)
        having = [v for v in schemes if name in v["items"]]
        out.append((go.Bar(
            y=[runs[v["label"]] for v in having], x=[v["items"][name] / GIB for v in having], orientation="h",
            name=lab[group], legendgroup=f"items-{group}", showlegend=group not in shown_groups,
            marker=dict(color=color, line=dict(color="white", width=1)),
            hovertemplate=f"%{{y}}: {lab.get(f'item.{name}', name)} %{{x:.4g}} GiB<extra></extra>"), 2, 1))
        shown_groups.add(group)
    if labels_now:
        out.append((go.Scatter(
            x=[full_now, full_now], y=[labels_now[0], labels_now[-1]], mode="lines", name=lab["full"],
            legendgroup="full", showlegend=False, line=dict(color=COLORS["full"], dash="dash", width=2),
            hovertemplate=lab["full_hover"].format(gib=lab["digits"](f"{full_now:.4g}")) + "<extra></extra>"), 2, 1))
    return out


def _axes_and_titles(fig: go.Figure, table: dict[str, Any], lab: dict[str, Any]) -> None:
    """The log axes with the scenario now marked, the items' axes, the title (the
    headline, and the scheme's items now under it) and the layout."""
    d = lab["digits"]
    now = dict(color="#444444", width=1, dash="dot")
    fig.add_vline(x=table["seq_now"], line=now, row=1, col=1)
    fig.add_vline(x=table["gpus_now"], line=now, row=1, col=2)
    fig.update_xaxes(type="log", title_text=lab["seq_axis"], row=1, col=1)
    fig.update_xaxes(type="log", title_text=lab["gpus_axis"], row=1, col=2)
    fig.update_yaxes(type="log", title_text="GiB", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_xaxes(title_text=lab["gib_per_gpu"], rangemode="tozero", row=2, col=1)
    # the runs' names in full, however long in the page's language (the left margin grows for them)
    fig.update_yaxes(autorange="reversed", automargin=True, row=2, col=1)
    items = table["scheme_items"]
    # in the chart's unit: one unit for memory on the page
    detail = ", ".join(f"{lab.get(f'item.{k}', k)} {d(f'{v / GIB:.3g}')} GiB" for k, v in items.items()
                       if k != "total")
    sub = lab["detail"].format(scheme=lab["scheme_name"](table["scheme"]), detail=detail)
    if table.get("refused"):
        # a scheme missing from the lines is said to be, and why
        sub += "<br>" + lab["not_here"].format(items="; ".join(lab["refused"](r) for r in table["refused"]))
    fig.update_layout(
        template=TEMPLATE, barmode="stack", height=980, separators=lab["separators"],
        title=dict(text=f"{_headline(table, lab)}<br><sup>{sub}</sup>", font=dict(size=13)),
        legend=dict(orientation="h", yanchor="top", y=-0.11, x=0),   # below the items axis title
        margin=dict(l=170, t=106 if table.get("refused") else 90, b=310),
        meta={"full_kv_bytes": table["full_kv_now_bytes"],
              "totals": {v["label"]: v["items"]["total"] for v in table.get("schemes", [])}})


def _headline(table: dict[str, Any], lab: dict[str, Any]) -> str:
    """What the view shows, in one line: the ring's K/V stays at its shard while
    all-gather's holds every token's, or the plain fact 4 when no all-gather runs here."""
    d = lab["digits"]
    full = table["full_kv_now_bytes"]
    ring = table["items"]
    ring_kv = sum(b for k, b in ring.items() if item_group(k) == "kv")
    text = lab["headline"].format(full=d(f"{full / GIB:.3g}"), ring=d(f"{ring_kv / GIB:.3g}"))
    # the first variant that gathers K/V (all-gather's single gather)
    gathered = next((v["items"]["kv_gathered"] for v in table.get("schemes", []) if "kv_gathered" in v["items"]),
                    None)
    if gathered:
        text += (lab["gathered_whole"].format(gathered=d(f"{gathered / GIB:.3g}")) if gathered >= full else
                 lab["gathered_part"].format(gathered=d(f"{gathered / GIB:.3g}"), share=d(f"{gathered / full:.0%}")))
    total = d(f"{table['scheme_items']['total'] / GIB:.3g}")
    return text + " — " + lab["scheme_now"].format(scheme=lab["scheme_name"](table["scheme"]), total=total)
