"""The simulator's sentences in the page's language: what bounds a run (sim.trace.metrics's
clauses, `why.<clause>` in the catalogs) and why a plan's candidate wins or loses (the
sentence sim.planning.plan writes, rebuilt here from the numbers each candidate carries), with the
numbers as precise as the simulator writes them, in the language's format.

Each sentence is also built in English and compared with the simulator's own: where they
differ (the simulator says something these messages do not know), the page shows the
simulator's English sentence rather than a translation that leaves something out. A
reason the configuration gives for refusing a candidate is matched against the English
message of each known reason, and is shown as it is when none matches.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from dashboard.i18n import DEFAULT_LANG, Translator, catalog, layout_label
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.trace.metrics import CLAUSE_SEPARATOR, clause_fields, clauses_from_text, explain_clauses
from sim.units import fmt_bytes, fmt_s

# --- what bounds a run ---------------------------------------------------------------------------

_LINK_PARTS = (
    (re.compile(r"switch (?P<n>\d+) uplink (?P<direction>up|down)"), "why.link.uplink"),
    (re.compile(r"socket (?P<n>\d+) root complex (?P<direction>in|out)"), "why.link.root"),
    (re.compile(r"socket link (?P<a>\d+)->(?P<b>\d+)"), "why.link.socket"),
    (re.compile(r"socket (?P<n>\d+) host memory"), "why.link.memory"),
)


def link_name(t: Translator, name: str) -> str:
    """A PCIe fabric link's name (sim.trace.metrics: "node 0 socket 1 root complex in lane 2")
    in the page's language; as it is when it is none of sim.hardware.pcie's."""
    m = re.fullmatch(r"node (\d+) (.+?)(?: lane (\d+))?", name)
    if m is None:
        return name
    node, resource, lane = m.groups()
    for pattern, key in _LINK_PARTS:
        r = pattern.fullmatch(resource)
        if r is not None:
            fields = r.groupdict()
            if "direction" in fields:
                fields["direction"] = t(f"why.link.{fields['direction']}")
            text = t("why.link.node", node=node, link=t(key, **fields))
            return text if lane is None else t("why.link.lane", link=text, lane=lane)
    return name


def bound(t: Translator, clauses: list[tuple[str, dict[str, Any]]]) -> str:
    """sim.trace.metrics's clauses on what bounds a run as one sentence in `t`'s language."""
    parts = []
    for key, params in clauses:
        fields = {name: t.digits(text) for name, text in clause_fields(params).items()}
        if "kind" in params:
            fields["kind"] = t(f"why.kind.{params['kind']}")
        if "link" in params:
            fields["link"] = link_name(t, params["link"])
            fields["link_kind"] = t(f"why.link-kind.{params['link_kind'].replace(' ', '-')}")
        parts.append(t(f"why.{key}", **fields))
    return CLAUSE_SEPARATOR.join(parts)


def _checked(t: Translator, build, english: str) -> str:
    """`build(t)`, unless its English is not `english` (then `english` itself)."""
    if t.lang == DEFAULT_LANG or build(Translator(DEFAULT_LANG)) != english:
        return english
    return build(t)


def row_bound(t: Translator, row: dict[str, Any]) -> str:
    """What bounds a compared run (a sim.trace.metrics.scheme_row) in `t`'s language."""
    clauses = explain_clauses(row)
    return sentence_bound(t, row["explanation"], clauses)


def sentence_bound(t: Translator, english: str, clauses: list[tuple[str, dict[str, Any]]] | None = None) -> str:
    """sim.trace.metrics.explain's sentence in `t`'s language, from its clauses (read back from
    the sentence when not given)."""
    clauses = clauses if clauses is not None else clauses_from_text(english)
    if clauses is None:
        return english
    return _checked(t, lambda tr: bound(tr, clauses), english)


# --- sentences the catalogs match in English ---------------------------------------------------------

REASONS = ("plan.reason.heads", "plan.reason.kv-heads", "plan.reason.chunks", "plan.reason.gather-chunks",
           "plan.reason.shards")
"""The configuration's reasons for refusing a candidate that the catalogs translate."""
VARIANTS = ("plan.variant.layout", "plan.variant.one-gather", "plan.variant.head-groups", "plan.variant.degree")
"""sim.planning.plan's names of a candidate's variant that the catalogs translate."""


@lru_cache(maxsize=None)
def _english_pattern(key: str) -> re.Pattern:
    parts = re.split(r"{(\w+)}", catalog(DEFAULT_LANG)[key])
    return re.compile("".join(re.escape(p) if i % 2 == 0 else rf"(?P<{p}>[\w./-]+?)" for i, p in enumerate(parts)))


def known(t: Translator, text: str, keys: tuple[str, ...]) -> str | None:
    """`text` in `t`'s language when it is the English message of one of `keys`."""
    for key in keys:
        m = _english_pattern(key).fullmatch(text)
        if m is not None:
            return t(key, **{name: t.digits(value) for name, value in m.groupdict().items()})
    return None


def reason(t: Translator, text: str) -> str:
    """Why the configuration refuses a candidate, in `t`'s language where the catalogs
    know the reason (sim.planning.plan adds why the head count matters to Ulysses)."""
    head, sep, _ = text.partition(" (the head count limits Ulysses)")
    said = known(t, head, REASONS)
    if said is None or (sep and not text.endswith(sep)):
        return text
    return t("plan.reason.head-count", reason=said) if sep else said


def variant(t: Translator, text: str) -> str:
    """A candidate's variant as sim.planning.plan names it ("zigzag layout"), in `t`'s language."""
    return known(t, text, VARIANTS) or text


def compared_variant(t: Translator, scheme: str, text: str) -> str:
    """A variant as `ringsim compare --schemes` names it (sim.planning.compare.scheme_variants: the
    ring's layout, "one gather", "8 head groups", "degree 8"; a hybrid's split and
    placement kept as the command line spells them), in `t`'s language."""
    if scheme == DEFAULT_SCHEME:
        return layout_label(t, text)
    return variant(t, text)


# --- why a plan's candidate wins or loses -----------------------------------------------------------

def _tie(t: Translator, c: dict[str, Any], nxt: dict[str, Any], ahead: float) -> str:
    diffs = []
    mem = nxt["peak_mem_bytes"] - c["peak_mem_bytes"]
    if abs(mem) > 0.05 * max(c["peak_mem_bytes"], 1):
        diffs.append(t("plan.why.less-memory" if mem > 0 else "plan.why.more-memory",
                       bytes=t.digits(fmt_bytes(abs(mem)))))
    exposed = nxt["exposed_comm_s"] - c["exposed_comm_s"]
    if abs(exposed) > 0.02 * c["makespan_s"]:
        diffs.append(t("plan.why.less-exposed" if exposed > 0 else "plan.why.more-exposed",
                       time=t.digits(fmt_s(abs(exposed)))))
    return t("plan.why.tie", scheme=nxt["scheme"], variant=variant(t, nxt["variant"]),
             apart=t.digits(f"{ahead:.1%}"), diffs=t("plan.why.and").join(diffs) if diffs else t("plan.why.same"))


def _does_not_fit(t: Translator, c: dict[str, Any], limit: float, layers: int) -> str:
    mem = c["memory"]
    items = [t("plan.why.kept-for-backward" if "kept_for_backward" in mem else "plan.why.kv-cache",
               bytes=t.digits(fmt_bytes(mem.get("kept_for_backward", mem.get("kv_cache", 0)))),
               layers=str(layers - 1)),
             t("plan.why.working", bytes=t.digits(fmt_bytes(mem["attention_working"])))]
    if "params_and_optimizer" in mem or "params" in mem:
        items.append(t("plan.why.params", bytes=t.digits(fmt_bytes(mem.get("params_and_optimizer", mem.get("params"))))))
    return t("plan.why.no-fit", peak=t.digits(fmt_bytes(c["peak_mem_bytes"])), limit=t.digits(fmt_bytes(limit)),
             items=", ".join(items))


def _plan_why(t: Translator, c: dict[str, Any], plan: dict[str, Any], bound_text: str) -> str:
    from sim.planning.plan import TIE_WITHIN

    ranked = plan["candidates"]
    model = plan["request"]["model"]
    best = next((x for x in ranked if x["fits"]), None)
    parts = []
    if not c["fits"]:
        parts.append(_does_not_fit(t, c, plan["memory_limit_bytes"], model["layers"]))
    elif c is best:
        rest = [x for x in ranked if x["fits"] and x is not c]
        if rest:
            nxt = rest[0]
            ahead = nxt["makespan_s"] / c["makespan_s"] - 1
            parts.append(_tie(t, c, nxt, ahead) if ahead < TIE_WITHIN else
                         t("plan.why.fastest", ahead=t.digits(f"{ahead:.1%}"), scheme=nxt["scheme"],
                           variant=variant(t, nxt["variant"])))
        else:
            parts.append(t("plan.why.only"))
    elif best is not None:
        ratio = c["makespan_s"] / best["makespan_s"]
        parts.append(t("plan.why.slower", pct=t.digits(f"{ratio - 1:.1%}")) if ratio < 1.1 else
                     t("plan.why.times", ratio=t.digits(f"{ratio:.2f}")))
    parts.append(bound_text)
    # the scheme's own notes (sim.schemes.base.Scheme.plan_notes)
    for note, values in get_scheme(c["scheme"]).plan_notes(c["settings"], plan["request"]["gpus"], model["kv_heads"]):
        parts.append(t(f"plan.why.{note}", **{k: str(v) for k, v in values.items()}))
    return "; ".join(p for p in parts if p)


def plan_why(t: Translator, c: dict[str, Any], plan: dict[str, Any]) -> str:
    """Why candidate `c` of `plan` (sim.planning.plan.Plan.to_dict: every candidate, ranked) wins
    or loses, in `t`'s language: sim.planning.plan's sentence, built from the candidate's numbers
    and what bounds it."""
    clauses = clauses_from_text(c["bound"]) if c.get("bound") else None
    if clauses is None:
        return c["why"]
    return _checked(t, lambda tr: _plan_why(tr, c, plan, bound(tr, clauses)), c["why"])


STEP_PARTS = ("gemm_s", "attention_s", "elementwise_s", "tp_comm_s", "recompute_s", "pp_bubble_s", "pp_comm_s",
              "dp_comm_s", "optimizer_s")
"""The parts of a step (sim.training.plan.PARTS) the whole-step plan's sentence may name."""


def step_why(t: Translator, c: dict[str, Any], best: dict[str, Any], limit: float) -> str:
    """Why a whole-step candidate (sim.training.plan) wins or loses, in `t`'s language:
    sim.training.plan's sentence, built from the candidate's numbers (its English when the
    English rebuilt here is not the planner's own)."""
    return _checked(t, lambda tr: _step_why(tr, c, best, limit), c["why"])


def step_split(t: Translator, c: dict[str, Any]) -> str:
    """A whole-step candidate's split (sim.training.plan.label) in `t`'s language."""
    from sim.training.plan import label

    return _checked(t, lambda tr: _step_split(tr, c), label(c))


def _step_split(t: Translator, c: dict[str, Any]) -> str:
    p = c["parallel"]
    out = t("step.split.base", tp=p["tp"], cp=p["cp"], pp=p["pp"], dp=p["dp"], zero=p["zero"],
            recompute=t(f"step.split.recompute.{p['recompute']}"))
    if p["cp"] > 1:
        out += t("step.split.scheme", scheme=p["scheme"])
    if p.get("tp_overlap"):
        out += t("step.split.overlapped")
    if p.get("interleave", 1) > 1:
        out += t("step.split.virtual", v=p["interleave"])
    return out


def _step_why(t: Translator, c: dict[str, Any], best: dict[str, Any], limit: float) -> str:
    if not c["fits"]:
        return t("step.why.unfit", memory=t.digits(f"{c['memory_bytes_per_gpu'] / 1e9:.1f}"),
                 limit=t.digits(f"{limit / 1e9:g}"))
    b = c["breakdown"]
    costs = {k: v for k, v in b.items() if k in STEP_PARTS and k != "gemm_s"}
    worst = max(costs, key=costs.get) if costs else None
    share = t("step.why.share", part=t(f"step.why.part.{worst}"),
              pct=t.digits(f"{b[worst] / c['step_s']:.0%}")) if worst else ""
    if c is best or c.get("rank") == 1:
        return t("step.why.with", stand=t("step.why.fastest"), share=share) if share else t("step.why.fastest")
    slower = best["tokens_per_s_per_gpu"] / c["tokens_per_s_per_gpu"]
    stand = t("step.why.tie") if slower < 1.01 else t("step.why.slower", ratio=t.digits(f"{slower:.2f}"))
    return t("step.why.with", stand=stand, share=share) if share else stand
