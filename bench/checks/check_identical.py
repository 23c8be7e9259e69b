"""Check that the simulator's output is bit-identical to another version's.

Simulates a broad set of configurations (every scheme; the ring's layouts x passes x
overlap and forwarding x granularity, on several sizes and GPU counts, inside one node
and across nodes; kernel-table, flat and calibrated hardware, with and without a
contention profile; both players where both apply) and keeps, per run, every trace
column (with its dtype), the header and every metric: `compute_metrics`, `scheme_row`,
`step_durations` and the ring's block map. Floats are compared bit for bit.

A reference is written by running this script on the old tree (`--tree`, or a checkout
of `--against REF` made for the purpose) and saved with `--save`; `--load` compares the
tree this script sits in with a saved reference.

    .venv/bin/python bench/checks/check_identical.py --against main           # build and compare
    .venv/bin/python bench/checks/check_identical.py --against main --save /tmp/ref.pkl
    .venv/bin/python bench/checks/check_identical.py --load /tmp/ref.pkl      # compare again
    .venv/bin/python bench/checks/check_identical.py --quick --load /tmp/ref.pkl

Exits 1 on the first run that differs (naming it and the field), 0 when all agree.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE = os.path.join(ROOT, "bench", "results", "calibration", "cpu-2core", "profile.json")


def cases(quick: bool) -> Iterator[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """(name, Scenario fields as plain data, players) for every run checked."""
    layouts = ("contiguous", "striped", "zigzag")
    passes = ("fwd", "bwd", "fwdbwd")
    modes = (dict(overlap=True, sync="step"), dict(overlap=True, sync="buffered"), dict(overlap=False))
    grains = (dict(granularity="exact"), dict(granularity="tile", tile=128), dict(granularity="tile", tile=48))
    # (GPUs, tokens per rank, hardware): one node, several nodes, a ring of one and an odd ring
    sizes = [(1, 1024, "h100"), (2, 768, "h100"), (3, 1536, "flat"), (4, 4096, "h100"),
             (8, 2048, "flat-fp32"), (16, 1024, "dgx"), (24, 512, "dgx-shared-nic")]
    if not quick:
        sizes += [(64, 4096, "h100"), (32, 2048, "dgx")]
    for n, c, hw in sizes:
        for layout in layouts:
            for pass_ in passes:
                for mode in modes:
                    for grain in grains:
                        if quick and grain["granularity"] == "tile" and grain["tile"] == 48:
                            continue
                        fields = dict(n_gpus=n, seq=c * n, layout=layout, pass_=pass_, hw=hw, **mode, **grain)
                        players = ("recurrence", "simpy") if n <= 16 else ("recurrence",)
                        name = "ring " + " ".join(f"{k}={v}" for k, v in fields.items())
                        yield name, dict(fields, scheme="ring"), players
    # without the causal mask (every block full)
    for n, c, hw in [(4, 4096, "h100"), (16, 1024, "dgx")]:
        for layout in layouts:
            for pass_ in passes:
                for mode in modes:
                    fields = dict(n_gpus=n, seq=c * n, layout=layout, pass_=pass_, causal=False, hw=hw, **mode)
                    name = "ring " + " ".join(f"{k}={v}" for k, v in fields.items())
                    yield name, dict(fields, scheme="ring"), ("recurrence", "simpy")
    # the sizes the benchmarks time: the dashboard's (256 GPUs, 128k tokens) and bench/speed/simulate.py's
    if not quick:
        for layout in layouts:
            for pass_ in passes:
                for overlap in (True, False):
                    fields = dict(n_gpus=256, seq=131072, layout=layout, pass_=pass_, hw="h100", overlap=overlap)
                    name = "ring " + " ".join(f"{k}={v}" for k, v in fields.items())
                    yield name, dict(fields, scheme="ring"), ("recurrence",)
        fields = dict(n_gpus=1024, seq=4096 * 1024, layout="zigzag", pass_="fwd", hw="h100")
        yield "ring " + " ".join(f"{k}={v}" for k, v in fields.items()), dict(fields, scheme="ring"), ("recurrence",)
    # the other schemes, on one node and across nodes (shared NICs too)
    for n, c, hw in [(2, 1024, "h100"), (4, 2048, "h100"), (8, 1024, "flat"), (16, 1024, "dgx"),
                     (32, 512, "dgx-shared-nic")]:
        for pass_ in passes:
            for causal in (True, False):
                variants = [("allgather", {}), ("allgather", dict(head_groups=8)), ("allgather", dict(head_groups=2)),
                            ("ulysses", {}), ("hybrid", {}), ("hybrid", dict(placement="ring-inner"))]
                if n >= 4:
                    variants += [("hybrid", dict(ulysses_degree=2)), ("hybrid", dict(ring_degree=n // 2))]
                for scheme, extra in variants:
                    for layout in (("zigzag", "contiguous") if scheme == "hybrid" else ("zigzag",)):
                        fields = dict(n_gpus=n, seq=c * n, layout=layout, pass_=pass_, causal=causal, hw=hw,
                                      scheme=scheme, **extra)
                        players = ("recurrence", "simpy") if n <= 16 else ("recurrence",)
                        name = " ".join(f"{k}={v}" for k, v in fields.items())
                        yield name, fields, players
    # a calibrated profile without contention (wave player, per-distinct timing) and with
    # it (SimPy, rates that change mid-block)
    for n in (2, 4):
        for layout in layouts:
            for pass_ in passes:
                for overlap in (True, False):
                    for contention in (False, True):
                        fields = dict(n_gpus=n, seq=512 * n, layout=layout, pass_=pass_, overlap=overlap,
                                      hw="profile" + ("+contention" if contention else ""), dtype="fp32",
                                      heads=8, kv_heads=8, head_dim=64, scheme="ring")
                        name = " ".join(f"{k}={v}" for k, v in fields.items())
                        yield name, fields, ("auto",) if contention else ("recurrence", "simpy")


def make(fields: dict[str, Any]):
    """The Scenario and hardware (None: the scenario's own) of a case."""
    from dataclasses import replace

    from sim.hardware.cluster import Gpu, Hardware, Link
    from sim.scenario.config import Scenario, Workload
    from sim.schemes import get as get_scheme

    f = dict(fields)
    hw_name = f.pop("hw")
    w = Workload(seq=f.pop("seq"), pass_=f.pop("pass_"), causal=f.pop("causal", True), dtype=f.pop("dtype", "bf16"),
                 heads=f.pop("heads", 32), kv_heads=f.pop("kv_heads", 8), head_dim=f.pop("head_dim", 128))
    hardware = {
        "h100": Hardware(),
        "flat": Hardware(gpu=Gpu.preset("H100-SXM", kernel="flat")),
        "flat-fp32": Hardware(gpu=Gpu(achieved_tflops=40.0, launch_overhead_us=3.0), link=Link(bandwidth_gbps=20.0)),
        "dgx": Hardware(link=Link.preset("nvlink4"), inter_link=Link.preset("ib-ndr"), gpus_per_node=8),
        "dgx-shared-nic": Hardware(link=Link.preset("nvlink4"), inter_link=Link.preset("ib-hdr"), gpus_per_node=8,
                                   nics_per_node=2),
    }.get(hw_name, Hardware())
    own = {k: f.pop(k) for k in ("ulysses_degree", "ring_degree", "placement", "head_groups") if k in f}
    scheme = get_scheme(f["scheme"])
    if hasattr(scheme, "settings_type"):      # the scheme's own settings (older trees: Scenario fields)
        sc = Scenario(workload=w, hardware=hardware, settings=scheme.settings_type(**own), **f)
    else:
        sc = Scenario(workload=w, hardware=hardware, **own, **f)
    profile = None
    if hw_name.startswith("profile"):
        from sim.hardware.contention import Contention
        from sim.hardware.profile import load_profile

        profile = load_profile(PROFILE)
        if not hw_name.endswith("+contention"):
            profile = replace(profile, contention=Contention())
    return sc, profile


def record(fields: dict[str, Any], player: str) -> dict[str, Any]:
    """Everything a run gives: the trace's columns and header, and every metric."""

    from sim.engine.play import simulate
    from sim.errors import RingsimError
    from sim.schemes import get as get_scheme
    from sim.trace.format import COLUMN_TYPES
    from sim.trace.metrics import compute_metrics, scheme_row, step_durations

    try:
        sc, profile = make(fields)
    except RingsimError as e:
        return {"refused": str(e)}
    trace = simulate(sc, profile, player=player)
    c = trace.columns
    m = compute_metrics(trace)
    out = {
        "columns": {name: _kept(getattr(c, name)) for name in COLUMN_TYPES},
        "chunk_sets": c.chunk_sets, "source": trace.source,
        "n_gpus": getattr(trace, "n_gpus", None) or trace.world_size,     # world_size: older trees
        "config": trace.config, "hardware": trace.hardware, "meta": trace.meta,
        "metrics": m.to_dict(), "scheme_row": scheme_row(sc.scheme, "", trace, m),
        "step_durations": step_durations(trace),
    }
    if sc.scheme == "ring":
        bm = get_scheme("ring").block_map(trace)
        out["block_map"] = (bm.value, bm.work, bm.owner, bm.chunk_size)
    return out


def _kept(a):
    """An array as kept in the results: itself, or past 100,000 entries its dtype,
    shape and digest (a reference of the largest runs would otherwise take gigabytes)."""
    import numpy as np

    a = np.ascontiguousarray(a)
    if a.size <= 100_000:
        return a.copy()
    return ("digest", str(a.dtype), a.shape, hashlib.sha256(a.tobytes()).hexdigest())


def run_all(quick: bool, only: str | None = None) -> dict[str, Any]:
    results = {}
    for name, fields, players in cases(quick):
        if only and only not in name:
            continue
        for player in players:
            results[f"{name} player={player}"] = record(fields, player)
    return results


RENAMED = {"by_world": "by_gpus", "world_size": "n_gpus"}
"""Keys of the record renamed since older trees (a profile's per-GPU-count collective fits)."""


def _profile_path_left_out(run: dict[str, Any]) -> dict[str, Any]:
    """The run with its profile's file path left out of its hardware: where the committed
    profile lies (and in which checkout the reference was built) is no simulated result."""
    hardware = run.get("hardware")
    if not isinstance(hardware, dict) or hardware.get("kind") != "profile":
        return run
    return {**run, "hardware": {k: v for k, v in hardware.items() if k != "source"}}


def _same(a: Any, b: Any, where: str) -> str | None:
    """None if a and b are identical (floats bit for bit, arrays with their dtypes), else
    where they first differ. `a` is the reference: keys only b has are fields added since."""
    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return f"{where}: array against {type(b).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{where}: {a.dtype}{a.shape} against {b.dtype}{b.shape}"
        if a.tobytes() != b.tobytes():
            first = int(np.flatnonzero(a.ravel().view(np.uint8) != b.ravel().view(np.uint8))[0]) // a.itemsize
            return f"{where}: differs first at {first} ({a.ravel()[first]!r} against {b.ravel()[first]!r})"
        return None
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} against {type(b).__name__}"
    if isinstance(a, float):
        return None if struct.pack("<d", a) == struct.pack("<d", b) else f"{where}: {a!r} against {b!r}"
    if isinstance(a, dict):
        # a key renamed since the reference is compared under its new name
        a = {RENAMED.get(k, k): v for k, v in a.items()}
        # a field the newer tree adds (b's alone: a new metric) is not a difference
        if [k for k in b if k in a] != list(a):
            return f"{where}: keys {sorted(map(str, a))} against {sorted(map(str, b))}"
        for k in a:
            d = _same(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: length {len(a)} against {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _same(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {a!r} against {b!r}"


def _checkout(ref: str) -> str:
    path = tempfile.mkdtemp(prefix="ringsim-identical-")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", path, ref], check=True, capture_output=True)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", metavar="REF", help="build the reference from a checkout of this git ref")
    p.add_argument("--tree", help="import sim from this tree (what --against runs)")
    p.add_argument("--save", help="write the results (of --against's tree, or this one's) here")
    p.add_argument("--load", help="compare this tree with a reference written by --save")
    p.add_argument("--quick", action="store_true", help="fewer sizes (about ten seconds)")
    p.add_argument("--only", help="only the cases whose name contains this")
    a = p.parse_args()
    if a.tree:
        sys.path.insert(0, a.tree)
        os.chdir(a.tree)
        results = run_all(a.quick, a.only)
        with open(a.save, "wb") as f:
            pickle.dump(results, f, protocol=pickle.HIGHEST_PROTOCOL)
        return 0
    sys.path.insert(0, ROOT)
    if a.against:
        tree = _checkout(a.against)
        save = a.save or os.path.join(tempfile.gettempdir(), "ringsim-identical-ref.pkl")
        try:
            t = time.perf_counter()
            subprocess.run([sys.executable, os.path.abspath(__file__), "--tree", tree, "--save", save]
                           + (["--quick"] if a.quick else []) + (["--only", a.only] if a.only else []),
                           check=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
            print(f"reference ({a.against}) written to {save} in {time.perf_counter() - t:.0f} s")
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)
        a.load = save
    if not a.load:
        p.error("give --against REF or --load FILE (or --tree and --save to write a reference)")
    with open(a.load, "rb") as f:
        want = pickle.load(f)
    t = time.perf_counter()
    got = run_all(a.quick, a.only)
    missing = [k for k in got if k not in want]
    if missing:
        print(f"not in the reference: {missing[0]} (and {len(missing) - 1} more)")
        return 1
    for name, result in got.items():
        d = _same(_profile_path_left_out(want[name]), _profile_path_left_out(result), "run")
        if d:
            print(f"DIFFERS: {name}\n  {d}")
            return 1
    refused = sum("refused" in r for r in got.values())
    print(f"identical: {len(got)} runs ({refused} refused alike) in {time.perf_counter() - t:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
