"""Calibration from a user's profiler trace: the ring found in it (sim.profiler.ring) in,
a hardware profile out, and the run played again on it.

As calibration from ringsim's own measured traces (sim.calibration.from_traces), every
span was timed inside the running ring, beside the others, so the profile takes them
as they are:

- compute: each attention call is a point (FLOPs, seconds) of its group (dtype, mask,
  pass), its seconds with its share of the step's other work (the merge: as ringsim's
  own traces time a step, sim.profiler.ring.AttentionCall.busy_s); the mask "diagonal"
  for a call under the causal mask, "full" otherwise, its FLOPs 4·d·pairs per head and
  batch item (2.5x in the backward; docs/design.md, "Definitions"); one point per FLOPs,
  the mean of its calls (compute_points); the points go through the same table-or-line choice as
  microbenchmarks (sim.calibration.calibrate.calibrate_compute), the heads (times
  batch) of the calls kept, so a block of another extent is priced as the profile
  module says;
- link: alpha-beta over the median hop time of each message size (through the origin
  when the trace holds one size). A hop runs from the moment both of its ends had
  posted it to its completion: a send paired with the next rank's receive of the same
  hop (the ring's neighbour), an NCCL send/receive kernel as it ran, a collective from
  the last rank's post to this rank's completion. A hop's bytes are those of one
  block (K and V sent as two messages count together);
- contention: none. The spans were timed under the ring's own contention.

`replay` plays the configuration the trace tells (sim.profiler.ring.RingConfig) on the
fitted profile and sets the simulated makespan beside the measured iterations' median
and range, and the time a rank spent not computing (waiting on blocks in flight or on
slower ranks: the overlap the run really got) beside the simulated one: validation of
the profile on the run that made it, the floor under any what-if asked of it.
"""

from __future__ import annotations

import statistics
from typing import Any

from sim.calibration.calibrate import calibrate_compute, calibrate_link, hop_link_points
from sim.hardware.contention import Contention
from sim.hardware.profile import Profile
from sim.profiler.ring import RingRun, Transfer
from sim.reasons import clause, refusal


def compute_points(ring: RingRun) -> list[dict[str, Any]]:
    """(dtype, mask, kind, FLOPs, seconds, heads, head dim) of the attention calls: one
    point per group and FLOPs, the mean of its calls' times (a pass adds its steps up, and
    the mean of a sum is the sum of the means: the median would leave out the slow calls
    of a loaded host)."""
    dtype = ring.config.dtype
    by_point: dict[tuple, list[float]] = {}
    for c in ring.calls:
        if c.flops > 0 and c.busy_s > 0:
            key = ("diagonal" if c.causal else "full", c.kind, c.flops, c.heads * c.batch, c.head_dim)
            by_point.setdefault(key, []).append(c.busy_s)
    return [{"dtype": dtype, "mask": mask, "kind": kind, "flops": flops, "time_s": statistics.fmean(ts),
             "heads": heads, "head_dim": d, "calls": len(ts)}
            for (mask, kind, flops, heads, d), ts in sorted(by_point.items())]


def hop_points(ring: RingRun) -> list[dict[str, Any]]:
    """(bytes, seconds) of every hop: from both ends posted to complete (module docstring)."""
    n = ring.config.n_gpus
    by_hop: dict[tuple[int, int, int], list[Transfer]] = {}
    for t in ring.transfers:
        by_hop.setdefault((t.rank, t.iteration, t.hop), []).append(t)
    out = []
    for (rank, it, hop), mine in sorted(by_hop.items()):
        sends = [t for t in mine if t.op == "send"]
        if sends:
            # a send's receiver is the next rank, which posted its receive of this hop
            recvs = [t for t in by_hop.get(((rank + 1) % n, it, hop), []) if t.op == "recv"]
            posted = max([t.start_s for t in sends] + [min(t.start_s for t in recvs)] if recvs else
                         [t.start_s for t in sends])
            end = max(t.end_s for t in sends)
            out.append({"bytes": sum(t.bytes for t in sends), "time_s": max(0.0, end - posted)})
            continue
        together = [t for t in mine if t.op in ("sendrecv", "all_to_all", "all_gather", "reduce_scatter")]
        if not together:
            continue
        if together[0].op == "sendrecv":        # a kernel runs once both ends are in
            out.append({"bytes": max(t.bytes for t in together), "time_s": max(t.end_s - t.start_s for t in together)})
            continue
        others = [t for r in range(n) for t in by_hop.get((r, it, hop), []) if t.op == together[0].op]
        posted = max(t.start_s for t in others)
        out.append({"bytes": max(t.bytes for t in together),
                    "time_s": max(0.0, max(t.end_s for t in together) - posted)})
    return out


def calibrate_from_ring(ring: RingRun, source: str = "", *, measured_on: dict[str, Any] | None = None) -> Profile:
    """A profile fitted to the ring found in a profiled run (module docstring)."""
    compute = compute_points(ring)
    if not compute:
        raise refusal("profiler.no-compute-points", source=source or clause("profiler.the-trace"))
    hops = [h for h in hop_points(ring) if h["bytes"] > 0]
    if not hops:
        raise refusal("profiler.no-hop-points", source=source or clause("profiler.the-trace"),
                      code="record_shapes=True")
    groups, model, compute_report = calibrate_compute(compute)
    points = hop_link_points(hops)
    if all(p["time_s"] <= 0 for p in points):
        raise refusal("profiler.no-hop-time", source=source or clause("profiler.the-trace"))
    links, link_report = calibrate_link(points)
    report = {"route": "profiler trace", "config": ring.config.to_dict(),
              "points": {"compute": len(compute), "hops": len(hops)}, "compute": compute_report,
              "link": link_report, "link_used": "both_ways",
              "contention": "none: the spans were timed under the ring's own contention",
              "unmatched": list(ring.unmatched)}
    on = dict(measured_on or {})
    on.setdefault("source", "torch.profiler trace")
    return Profile(model, groups, links["both_ways"], Contention(), on, report, source)


def replay(ring: RingRun, profile: Profile) -> dict[str, Any]:
    """The trace's configuration played on `profile` beside the measured iterations."""
    from sim.engine.play import simulate
    from sim.trace.metrics import compute_metrics

    scenario = ring.config.scenario()
    metrics = compute_metrics(simulate(scenario, profile))
    simulated = metrics.makespan_s
    m = ring.measured()
    # a simulated rank's time not computing: its exposed communication and idle, as measured
    waiting = statistics.median(r.exposed_comm_s + r.idle_s for r in metrics.ranks)
    return {"config": ring.config.to_dict(), "measured": m, "simulated_s": simulated,
            "simulated_waiting_s": waiting, "simulated_overlap_efficiency": metrics.overlap_efficiency,
            "error": (simulated - m["median_s"]) / m["median_s"] if m["median_s"] > 0 else None,
            "error_vs_rank_median": (simulated - m["rank_median_s"]) / m["rank_median_s"]
            if m["rank_median_s"] > 0 else None,
            "within_range": m["min_s"] <= simulated <= m["max_s"]}


def read_profiled(paths: list[str], *, partial: bool = False):
    """The run of trace files, folders of them, or the Parquet table `ringsim trace import
    --out` wrote (sim.profiler.reader.Run)."""
    from sim.profiler.reader import read_run, read_table

    if len(paths) == 1 and str(paths[0]).endswith(".parquet"):
        return read_table(paths[0])
    return read_run(paths, partial=partial)


def validate_trace(paths: list[str], *, partial: bool = False, run=None) -> tuple[dict[str, Any], Profile]:
    """`ringsim validate --trace`: read the run (`read_profiled`, unless given), find its
    ring, fit a profile to it and replay its configuration on that profile; (the report,
    the profile)."""
    from sim.profiler.ring import find_ring

    if run is None:
        run = read_profiled(paths, partial=partial)
    ring = find_ring(run)
    source = ", ".join(str(p) for p in paths)
    on = {"kind": "cuda" if run.devices and any(run.devices.values()) else "cpu",
          "backend": "nccl" if any(t.op == "sendrecv" for t in ring.transfers) or (
              run.devices and any(run.devices.values())) else "gloo"}
    names = sorted({d.get("name") for d in run.devices.values() if isinstance(d, dict) and d.get("name")})
    if names:
        on["device"] = ", ".join(names)
    profile = calibrate_from_ring(ring, source, measured_on=on)
    report = replay(ring, profile)
    report.update({"trace": [str(p) for p in paths], "ranks": list(run.ranks), "notes": list(run.notes),
                   "profiler_steps_s": ring.profiler_steps_s, "unmatched": list(ring.unmatched),
                   "steps": ring.steps(),
                   "profile": {"compute_model": profile.compute_model,
                               "compute": {"/".join(k): {"flops_per_s": g.flops_per_s, "overhead_s": g.overhead_s,
                                                         "points": len(g.points)}
                                           for k, g in sorted(profile.groups.items())},
                               "link": {"latency_s": profile.link.latency_s,
                                        "bandwidth_bytes_per_s": profile.link.bandwidth_bytes_per_s}}})
    return report, profile
