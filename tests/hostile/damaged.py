"""Damaged files for the hostile suites (tests/hostile and bench/checks/hostile_run.py): each
function writes one file a careless or hostile user could hand ringsim and returns its path."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile

import numpy as np

from sim.engine.play import simulate
from sim.scenario.config import Scenario, Workload

PROFILE = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "results", "calibration", "cpu-2core",
                       "profile.json")
"""A real calibrated CPU profile, committed with its benchmark: the base every damaged profile starts from."""


def trace_archive() -> bytes:
    """A small simulated trace as an archive (.npz)."""
    w = Workload(seq=2048, heads=4, kv_heads=4, head_dim=64)
    return simulate(Scenario(workload=w, n_gpus=2), player="recurrence").to_bytes()


def write(path: str, data: bytes | str) -> str:
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def profile_dict() -> dict:
    with open(PROFILE) as f:
        return json.load(f)


def profile_with(tmp: str, name: str, change) -> str:
    """The committed profile with `change(d)` applied, written as JSON (NaN and infinity as
    Python's json writes them)."""
    d = profile_dict()
    change(d)
    return write(os.path.join(tmp, name), json.dumps(d))


def npy_claiming(shape: tuple[int, ...], data: bytes, dtype: str = "<f8") -> bytes:
    """A .npy member whose header claims `shape`, followed by `data` (however short)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue() + data


def archive_with(members: dict[str, bytes], *, base: bytes | None = None) -> bytes:
    """An archive holding `base`'s members (a trace archive) with `members` replacing or added."""
    out = io.BytesIO()
    keep = {}
    if base is not None:
        with zipfile.ZipFile(io.BytesIO(base)) as z:
            keep = {n: z.read(n) for n in z.namelist()}
    keep.update(members)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in keep.items():
            z.writestr(name, data)
    return out.getvalue()


def claim_size(archive: bytes, member: str, size: int) -> bytes:
    """The archive with `member`'s uncompressed size in its local and central headers set to
    `size` (a zip bomb's lie: a small member that says it unpacks to gigabytes)."""
    data = bytearray(archive)
    name = member.encode()
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = 0
        while (at := data.find(sig, at)) >= 0:
            name_len_at = 26 if sig == b"PK\x03\x04" else 28
            name_len = struct.unpack_from("<H", data, at + name_len_at)[0]
            start = at + (30 if sig == b"PK\x03\x04" else 46)
            if bytes(data[start:start + name_len]) == name:
                struct.pack_into("<I", data, at + offset, size)
            at += 4
    return bytes(data)


def deep_json(levels: int) -> str:
    return "[" * levels + "]" * levels


def bench_dict(kind: str = "cpu", time_s: float = 0.01) -> dict:
    """A minimal `ringsim hw bench` result of one compute entry."""
    entry = {"kind": "fwd", "dtype": "fp32" if kind == "cpu" else "bf16", "batch": 1, "heads": 8, "kv_heads": 8,
             "head_dim": 64, "q_tokens": 1024, "kv_tokens": 1024, "mask": "full", "flops": 4 * 64 * 1024 * 1024 * 8,
             "median_s": time_s, "time_s": [time_s] * 3, "impl": "flash"}
    return {"format": "ringsim-hw-bench", "version": 1, "complete": True,
            "device": {"kind": kind, "name": "test device"}, "compute": [entry], "transfer": [],
            "collective": [], "concurrency": [], "ring_conditions": [], "interference": []}


EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "dashboard", "examples",
                       "ring-2ranks-zigzag-causal-4096.trace.npz")
"""A measured ring (2 ranks on gloo), shipped with the dashboard."""


def measured_trace_with(path: str, *, end_scale: float | None = None, empty: bool = False) -> str:
    """The shipped measured ring with its spans' ends scaled from their starts (0: every span
    zero-length; 1e300: absurd) or its spans removed, saved at `path`."""
    from sim.trace.format import SpanTable, Trace

    t = Trace.load(EXAMPLE)
    c = SpanTable.empty() if empty else t.columns.take(np.arange(len(t.columns)))
    if end_scale is not None:
        c.end_s[:] = c.start_s + (c.end_s - c.start_s) * end_scale
    Trace(t.source, t.n_gpus, c, t.config, t.hardware, t.meta).save(path, overwrite=True)
    return path
