"""A calibrated hardware profile: measured compute, link and contention models.

`ringsim calibrate` writes it from `ringsim hw bench` measurements; the simulator uses
it in place of a datasheet preset (`ringsim simulate --profile FILE`): a hardware model
(sim.hardware.model.HardwareModel) like `sim.hardware.cluster.Hardware`, with a `contention`
model (sim.hardware.contention).

Compute: per (dtype, mask kind, pass) group, measured block times against FLOPs, used
either as an interpolated table or as a fitted line time = overhead + FLOPs / rate,
whichever predicted held-out points better at calibration (recorded with residuals).
A group knows the heads (times batch) and head dim of the blocks it measured; a block
with other heads, such as Ulysses' H/N heads over the whole sequence, or a model with
more heads than the microbenchmarks, is priced as k measured blocks of its own extent
(k = its heads / theirs, its heads read off its FLOPs and extent in whole heads of the
measured head dim: sim.hardware.kernel_model.whole_heads), since a kernel call runs its heads
one after another and its rate follows its extent, not its FLOPs (a causal block's rate
grows with its length). A profile from before heads were kept prices a block by its
FLOPs alone. A group that was not measured falls back, in order: backward to forward (backward
FLOPs are 2.5x, so the rate carries over), diagonal to full; a dtype that was not
measured is an error. Links: alpha-beta fitted for transfers in both directions at
once (what a ring does: every rank sends and receives together). Contention
(sim.hardware.contention): the slowdown of compute while a transfer is in flight and, on a CPU
host, the host model (`contention.host`: cores, threads per rank, the cores a transfer
in flight demands, the measured sharing law) or, in profiles made before it, measured
concurrency or compute slots. Collectives: per collective (all-gather, reduce-scatter,
all-to-all) a latency per round and a bandwidth, which time each flow of the rounds the
simulator plays (sim.hardware.topology); a collective the profile did not measure is played on
the point-to-point link.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sim.errors import RingsimError
from sim.files import write_json
from sim.hardware.contention import PLACEMENTS, Contention, Host
from sim.hardware.kernel_model import whole_heads
from sim.hardware.model import HardwareModel
from sim.inputs import read_json

FORMAT = "ringsim-profile"
VERSION = 1
MAX_PROFILE_BYTES = 16 * 1024 * 1024
SIM_COLLECTIVES = {"ag": "allgather", "rs": "reducescatter", "a2a": "alltoall"}
"""The simulator's collective operation kinds and the collectives that measure them."""


@dataclass(frozen=True)
class ComputeGroup:
    dtype: str
    mask: str
    kind: str
    points: tuple[tuple[float, float], ...]
    """(FLOPs, median seconds), ascending in FLOPs."""
    overhead_s: float
    flops_per_s: float
    heads: int | None = None
    """Heads (times batch) of every block the points were measured on; None where they
    differ or the profile did not keep them."""
    head_dim: int | None = None
    """The head dim of those blocks (with `heads`)."""

    def fit_s(self, flops: float) -> float:
        return self.overhead_s + flops / self.flops_per_s

    def table_s(self, flops: float) -> float:
        """Piecewise-linear through the points; the fitted line outside them."""
        xs = [p[0] for p in self.points]
        if len(xs) < 2 or flops <= xs[0] or flops >= xs[-1]:
            if not xs:
                return self.fit_s(flops)
            # outside the table: the fit, shifted to meet the nearest measured point
            edge = self.points[0] if flops <= xs[0] else self.points[-1]
            return max(0.0, edge[1] + (flops - edge[0]) / self.flops_per_s)
        i = bisect.bisect_right(xs, flops)
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        return y0 + (y1 - y0) * (flops - x0) / (x1 - x0)


@dataclass(frozen=True)
class LinkFit:
    latency_s: float
    bandwidth_bytes_per_s: float

    def time_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class CollectiveFit:
    """One collective's flows: `rounds` fitted over every GPU count (time = rounds x
    latency + bytes sent / bandwidth), `by_gpus` fitted at each measured GPU count
    (time = latency + bytes sent / bandwidth, shared out over its rounds)."""

    rounds: LinkFit
    by_gpus: dict[int, LinkFit] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"latency_per_round_s": self.rounds.latency_s,
                "bandwidth_bytes_per_s": self.rounds.bandwidth_bytes_per_s,
                "by_gpus": {str(w): {"latency_per_round_s": f.latency_s,
                                      "bandwidth_bytes_per_s": f.bandwidth_bytes_per_s}
                             for w, f in sorted(self.by_gpus.items())}}


@dataclass(frozen=True)
class Profile(HardwareModel):
    compute_model: str
    """'table' or 'fit'."""
    groups: dict[tuple[str, str, str], ComputeGroup]
    link: LinkFit
    contention: Contention = field(default_factory=Contention)
    measured_on: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    """Residuals and fitted values as calibration found them (for the record)."""
    source: str = ""
    collectives: dict[str, CollectiveFit] = field(default_factory=dict)
    """Per collective ('allgather', 'reducescatter', 'alltoall'): the fits of its flows."""

    @property
    def p2p_queue(self) -> bool:
        """Measured through NCCL: one queue of point-to-point batches per device (sim.engine.queues)."""
        return self.measured_on.get("backend") == "nccl"

    @property
    def inline_send_after_s(self) -> float | None:
        """Measured through gloo: a send posted once its receiver's word that it posted
        the receive has come (the link's latency after it) is written by the posting
        thread before the post returns (sim.engine.players.times_simpy); None on NCCL."""
        return max(self.link.latency_s, 0.0) if self.measured_on.get("backend") == "gloo" else None

    def _group(self, dtype: str, mask: str, kind: str) -> ComputeGroup:
        for key in ((dtype, mask, kind), (dtype, mask, "fwd"), (dtype, "full", kind),
                    (dtype, "full", "fwd")):
            if key in self.groups:
                return self.groups[key]
        have = sorted({k[0] for k in self.groups})
        raise RingsimError(f"profile {self.source or ''} has no compute measurements for {dtype} "
                           f"(it has {', '.join(have) or 'none'})")

    def compute_time_s(self, flops: float, *, dtype: str, kind: str, mask: str, q_tokens: int, kv_tokens: int,
                       head_dim: int | None = None, kv_heads_per_head: float | None = None,
                       sliced: bool = False, alone: bool = False, isolated: bool = False,
                       opens: bool = False) -> float:
        """The measured group's time for `flops` (its heads read off the block's FLOPs and
        extent, see the module's docstring); the head geometry and the call order do not
        change it: the groups were measured on their own."""
        g = self._group(dtype, mask, kind)
        price = g.table_s if self.compute_model == "table" else g.fit_s
        if g.heads and flops > 0 and q_tokens > 0 and kv_tokens > 0:
            # the block's heads (whole heads of the measured head dim) against the measured
            # blocks': k measured blocks of its extent, one after another
            heads = whole_heads(kind, mask, flops, q_tokens, kv_tokens, g.head_dim)
            if heads > 0:
                k = heads / g.heads
                return price(flops / k) * k
        return price(flops)

    def transfer_time_s(self, nbytes: float, src: int, dst: int) -> float:
        return self.link.time_s(nbytes)

    @property
    def times_collectives(self) -> bool:
        """Whether a collective was measured (its flows then take its fit)."""
        return bool(self.collectives)

    def collective_times_s(self, kind: np.ndarray, nbytes: np.ndarray, default: np.ndarray, *,
                           group: np.ndarray | None = None) -> np.ndarray:
        """The time of each collective flow (`kind`: names 'ag', 'rs', 'a2a'; `group`: the
        ranks of its collective): the fit of that GPU count where one was measured, else
        the fit over every GPU count; `default` where the collective was not measured."""
        out = np.array(default, dtype=np.float64)
        group = np.zeros(len(out), dtype=np.int64) if group is None else np.asarray(group)
        for name, op in SIM_COLLECTIVES.items():
            fit = self.collectives.get(op)
            sel = kind == name
            if fit is None or not sel.any():
                continue
            out[sel] = fit.rounds.time_s(nbytes[sel])
            for n_gpus, per_gpus in fit.by_gpus.items():
                at = sel & (group == n_gpus)
                out[at] = per_gpus.time_s(nbytes[at])
        return out

    def at_compute_speed(self, factor: float) -> "Profile":
        """This profile on a host that computes `factor` times slower (every block time,
        table and fit, times `factor`; links, collectives and contention as they are):
        what the profile predicts once the host's speed of the moment is known
        (hw.reference)."""
        if not (factor > 0 and np.isfinite(factor)):
            raise RingsimError(f"a compute speed factor must be positive, got {factor!r}")
        groups = {key: ComputeGroup(g.dtype, g.mask, g.kind, tuple((f, s * factor) for f, s in g.points),
                                    g.overhead_s * factor, g.flops_per_s / factor, g.heads, g.head_dim)
                  for key, g in self.groups.items()}
        return Profile(self.compute_model, groups, self.link, self.contention, self.measured_on,
                       self.report, self.source, self.collectives)

    def at_host_state(self, speed: float, sharing: float) -> "Profile":
        """This profile on a host that computes `speed` times slower alone and whose cores
        serve more than one process `sharing` times worse (hw.reference: both read
        again, over the profile's): compute times as at_compute_speed, the host's
        sharing law as sim.hardware.contention.Host.with_sharing. A profile without a host model
        takes the speed only."""
        at = self.at_compute_speed(speed)
        host = self.contention.host
        if host is None:
            return at
        return replace(at, contention=replace(self.contention, host=host.with_sharing(sharing)))

    def rate_flops(self, dtype: str, head_dim: int | None = None) -> float:
        """Achieved FLOP/s on full blocks (the slope of the fit), whatever the head dim."""
        return self._group(dtype, "full", "fwd").flops_per_s

    def describe(self) -> dict[str, Any]:
        return {"kind": "profile", "name": self.measured_on.get("device", "calibrated"),
                "source": self.source, "compute_model": self.compute_model,
                "link": {"latency_s": self.link.latency_s,
                         "bandwidth_bytes_per_s": self.link.bandwidth_bytes_per_s},
                "contention": {"slowdown_in_flight": self.contention.slowdown_in_flight,
                               "slowdown_in_flight_bwd": self.contention.slowdown_in_flight_bwd,
                               "compute_slots": self.contention.compute_slots,
                               "concurrency": self.contention.concurrency,
                               "host": host_to_dict(self.contention.host)},
                "collectives": {op: f.to_dict() for op, f in self.collectives.items()},
                "measured_on": self.measured_on}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "measured_on": self.measured_on,
            "compute": {"model": self.compute_model, "groups": [
                {"dtype": g.dtype, "mask": g.mask, "kind": g.kind,
                 "points": [list(p) for p in g.points],
                 "fit": {"overhead_s": g.overhead_s, "flops_per_s": g.flops_per_s},
                 **({"heads": g.heads, "head_dim": g.head_dim} if g.heads else {})}
                for g in self.groups.values()]},
            "link": {"latency_s": self.link.latency_s,
                     "bandwidth_bytes_per_s": self.link.bandwidth_bytes_per_s},
            "contention": {"slowdown_in_flight": self.contention.slowdown_in_flight,
                           "slowdown_in_flight_bwd": self.contention.slowdown_in_flight_bwd,
                           "compute_slots": self.contention.compute_slots,
                           "concurrency": ([list(p) for p in self.contention.concurrency]
                                           if self.contention.concurrency else None),
                           "host": host_to_dict(self.contention.host)},
            "collectives": {op: f.to_dict() for op, f in self.collectives.items()},
            "report": self.report,
        }

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> None:
        write_json(path, self.to_dict(), overwrite=overwrite)


MIN_BLOCK_S = 1e-7
"""The shortest measured block time a profile takes: 100 ns, below the launch of any kernel
(a few microseconds on a GPU) and the dispatch of any CPU operator; a shorter or zero time
is a broken measurement, and a block timed from it would beat every bound."""
MAX_BLOCK_S = 3600.0
"""The longest: an hour, beyond any microbenchmark sample (a bench of every block runs for
minutes); 1e300 is a broken file."""
MAX_RATE_FLOPS = 2.25e16
"""The fastest rate a profile's point or fit may claim: ten times the fastest dense 16-bit
datasheet rate among the presets (B200, 2,250 TFLOP/s, sim.hardware.presets)."""


def _num(x: Any, what: str, *, positive: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x in (float("inf"), float("-inf")):
        raise RingsimError(f"profile: {what} must be a finite number, got {x!r}")
    if x < 0 or (positive and x == 0):
        raise RingsimError(f"profile: {what} must be {'positive' if positive else 'non-negative'}, got {x!r}")
    return float(x)


def _block_s(x: Any, what: str) -> float:
    """A measured block time: a finite number of seconds from MIN_BLOCK_S to MAX_BLOCK_S."""
    t = _num(x, what, positive=True)
    if not MIN_BLOCK_S <= t <= MAX_BLOCK_S:
        raise RingsimError(f"profile: {what} {t:g} lies outside the {MIN_BLOCK_S:g} to {MAX_BLOCK_S:g} s a "
                           "measured block can take")
    return t


def host_to_dict(host: Host | None) -> dict[str, Any] | None:
    if host is None:
        return None
    return {"cores": host.cores, "threads_per_rank": host.threads_per_rank,
            "transfer_cores": host.transfer_cores, "transfer_weight": host.transfer_weight,
            "law": [list(p) for p in host.law] if host.law else None,
            "law_bwd": [list(p) for p in host.law_bwd] if host.law_bwd else None,
            "spread": [list(p) for p in host.spread] if host.spread else None,
            "placement": host.placement}


def _host(h: Any) -> Host | None:
    """The host model of a profile's contention (absent from profiles made before it)."""
    if h is None:
        return None
    if not isinstance(h, dict):
        raise RingsimError("profile: contention.host must be an object")
    laws = {}
    for name in ("law", "law_bwd"):
        law = h.get(name)
        if law is not None:
            if not isinstance(law, list) or not law or not all(isinstance(p, list) and len(p) == 2 for p in law):
                raise RingsimError(f"profile: contention.host.{name} must be [cores demanded, slowdown] pairs")
            law = tuple(sorted((_num(p[0], f"host {name} demand"), _num(p[1], f"host {name} slowdown", positive=True))
                               for p in law))
        laws[name] = law
    spread = h.get("spread")
    if spread is not None:
        if not isinstance(spread, list) or not spread or not all(isinstance(p, list) and len(p) == 3 for p in spread):
            raise RingsimError("profile: contention.host.spread must be [processes, rank CV, block CV] triples")
        spread = tuple(sorted((_num(p[0], "host spread processes", positive=True), _num(p[1], "host spread rank CV"),
                               _num(p[2], "host spread block CV")) for p in spread))
    placement = h.get("placement", "even")      # profiles made before it: even
    if placement not in PLACEMENTS:
        raise RingsimError(f"profile: contention.host.placement must be one of {', '.join(PLACEMENTS)}")
    return Host(cores=_num(h.get("cores"), "host cores", positive=True),
                threads_per_rank=_num(h.get("threads_per_rank", 1.0), "host threads_per_rank", positive=True),
                transfer_cores=_num(h.get("transfer_cores", 0.0), "host transfer_cores"),
                transfer_weight=_num(h.get("transfer_weight", 1.0), "host transfer_weight", positive=True), spread=spread,
                placement=placement, **laws)


def profile_from_dict(d: Any, source: str = "") -> Profile:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise RingsimError(f"{source or 'profile'}: not a ringsim profile (run `ringsim calibrate` to make one)")
    if d.get("version") != VERSION:
        raise RingsimError(f"profile: unsupported version {d.get('version')!r}")
    comp = d.get("compute")
    if not isinstance(comp, dict) or comp.get("model") not in ("table", "fit"):
        raise RingsimError("profile: compute.model must be 'table' or 'fit'")
    groups: dict[tuple[str, str, str], ComputeGroup] = {}
    raw = comp.get("groups")
    if not isinstance(raw, list) or not raw:
        raise RingsimError("profile: compute.groups must be a non-empty list")
    for i, g in enumerate(raw):
        if not isinstance(g, dict):
            raise RingsimError(f"profile: compute group {i} is not an object")
        key = (g.get("dtype"), g.get("mask"), g.get("kind", "fwd"))
        if key[0] not in ("fp32", "bf16", "fp16") or key[1] not in ("full", "diagonal") or key[2] not in ("fwd", "bwd"):
            raise RingsimError(f"profile: compute group {i} has a bad dtype/mask/kind {key}")
        pts = g.get("points", [])
        if not isinstance(pts, list) or not all(isinstance(p, list) and len(p) == 2 for p in pts):
            raise RingsimError(f"profile: compute group {i} points must be [flops, seconds] pairs")
        points = tuple(sorted((_num(p[0], "flops", positive=True), _block_s(p[1], f"compute group {i} seconds"))
                              for p in pts))
        for flops, seconds in points:
            if flops / seconds > MAX_RATE_FLOPS:
                raise RingsimError(f"profile: compute group {i} claims {flops:g} FLOPs in {seconds:g} s, faster "
                                   f"than {MAX_RATE_FLOPS:g} FLOP/s (ten times any GPU's datasheet)")
        fit = g.get("fit")
        if not isinstance(fit, dict):
            raise RingsimError(f"profile: compute group {i} has no fit")
        heads, head_dim = g.get("heads"), g.get("head_dim")
        if (heads, head_dim) != (None, None) and not all(
                isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (heads, head_dim)):
            raise RingsimError(f"profile: compute group {i} heads and head_dim must be positive integers, "
                               f"got {heads!r} and {head_dim!r}")
        overhead_s = _num(fit.get("overhead_s"), "overhead_s")
        if overhead_s > MAX_BLOCK_S:
            raise RingsimError(f"profile: compute group {i} overhead_s {overhead_s:g} is over {MAX_BLOCK_S:g} s")
        rate = _num(fit.get("flops_per_s"), "flops_per_s", positive=True)
        if rate > MAX_RATE_FLOPS:
            raise RingsimError(f"profile: compute group {i} flops_per_s {rate:g} is over {MAX_RATE_FLOPS:g} "
                               "(ten times any GPU's datasheet)")
        groups[key] = ComputeGroup(*key, points, overhead_s, rate, heads, head_dim)
    link = d.get("link")
    if not isinstance(link, dict):
        raise RingsimError("profile: link must be an object")
    lf = LinkFit(_num(link.get("latency_s"), "link latency_s"),
                 _num(link.get("bandwidth_bytes_per_s"), "link bandwidth", positive=True))
    cont = d.get("contention", {})
    if cont is None:
        cont = {}
    if not isinstance(cont, dict):
        raise RingsimError("profile: contention must be an object")
    slots = cont.get("compute_slots")
    conc = cont.get("concurrency")
    if conc is not None:
        if not isinstance(conc, list) or not conc or not all(isinstance(p, list) and len(p) == 2 for p in conc):
            raise RingsimError("profile: contention.concurrency must be [processes, slowdown] pairs")
        conc = tuple(sorted((_num(p[0], "processes", positive=True), _num(p[1], "slowdown", positive=True))
                            for p in conc))
    bwd = cont.get("slowdown_in_flight_bwd")
    contention = Contention(
        slowdown_in_flight=max(1.0, _num(cont.get("slowdown_in_flight", 1.0), "slowdown_in_flight", positive=True)),
        slowdown_in_flight_bwd=None if bwd is None else max(1.0, _num(bwd, "slowdown_in_flight_bwd", positive=True)),
        compute_slots=None if slots is None else _num(slots, "compute_slots", positive=True),
        concurrency=conc, host=_host(cont.get("host")))
    raw_coll = d.get("collectives", {})
    raw_coll = {} if raw_coll is None else raw_coll
    if not isinstance(raw_coll, dict):
        raise RingsimError("profile: collectives must be an object")
    collectives = {}
    for op, fit in raw_coll.items():
        if op not in SIM_COLLECTIVES.values() or not isinstance(fit, dict):
            raise RingsimError(f"profile: unknown collective {op!r} (known: {', '.join(SIM_COLLECTIVES.values())})")
        by_gpus = fit.get("by_gpus", fit.get("by_world")) or {}     # by_world: older profiles' key
        if not isinstance(by_gpus, dict) or not all(isinstance(f, dict) for f in by_gpus.values()):
            raise RingsimError(f"profile: collective {op} by_gpus must map GPU counts to fits")
        gpu_counts = {}
        for w, f in by_gpus.items():
            if not str(w).isdigit() or int(w) < 2:
                raise RingsimError(f"profile: collective {op} has a bad GPU count {w!r}")
            gpu_counts[int(w)] = LinkFit(_num(f.get("latency_per_round_s"), f"{op} latency_per_round_s"),
                                         _num(f.get("bandwidth_bytes_per_s"), f"{op} bandwidth", positive=True))
        collectives[op] = CollectiveFit(
            LinkFit(_num(fit.get("latency_per_round_s"), f"{op} latency_per_round_s"),
                    _num(fit.get("bandwidth_bytes_per_s"), f"{op} bandwidth", positive=True)), gpu_counts)
    measured_on = d.get("measured_on") if isinstance(d.get("measured_on"), dict) else {}
    report = d.get("report") if isinstance(d.get("report"), dict) else {}
    return Profile(comp["model"], groups, lf, contention, measured_on, report, source, collectives)


def load_profile(path: str | os.PathLike) -> Profile:
    return profile_from_dict(read_json(path, what="profile", max_bytes=MAX_PROFILE_BYTES), str(path))
