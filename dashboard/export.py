"""What the page lets a user download and upload, as plain functions of the data.

Downloads: the trace (sim/trace.py's version-2 archive, or its JSON), the Chrome trace (for Perfetto)
and the metrics (CSV: one row for the whole run, one per rank). Uploads arrive from the
browser as base64 data URLs; they are size-checked before decoding and parsed as JSON
only, through the trace's own validation.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
from typing import Any

from sim.errors import RingsimError
from sim.metrics import Metrics
from sim.trace import Trace, to_chrome_trace

CSV_COLUMNS = ("scope", "rank", "makespan_s", "ideal_s", "efficiency", "load_imbalance",
               "overlap_efficiency", "compute_s", "comm_s", "exposed_comm_s", "idle_s", "flops",
               "bytes_sent", "peak_mem_bytes")


def trace_json(trace: Trace) -> str:
    """The trace file as JSON (version 2: the columns as arrays)."""
    return json.dumps(trace.to_dict(), separators=(",", ":"), allow_nan=False)


def trace_archive(trace: Trace) -> bytes:
    """The trace file as a compact archive (version 2, sim/trace.py): what the page offers."""
    return trace.to_bytes()


def chrome_trace_json(trace: Trace) -> str:
    return json.dumps(to_chrome_trace(trace), separators=(",", ":"), allow_nan=False)


def metrics_csv(m: Metrics) -> str:
    """The run's metrics (scope "run") then each rank's (scope "rank")."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerow({"scope": "run", "rank": "", "makespan_s": m.makespan_s, "ideal_s": m.ideal_s,
                "efficiency": m.efficiency, "load_imbalance": m.load_imbalance,
                "overlap_efficiency": m.overlap_efficiency,
                "compute_s": sum(r.compute_s for r in m.ranks),
                "comm_s": sum(r.comm_s for r in m.ranks),
                "exposed_comm_s": sum(r.exposed_comm_s for r in m.ranks),
                "idle_s": sum(r.idle_s for r in m.ranks), "flops": m.total_flops,
                "bytes_sent": m.total_bytes,
                "peak_mem_bytes": max((r.peak_mem_bytes or 0) for r in m.ranks) or ""})
    for r in m.ranks:
        w.writerow({"scope": "rank", "rank": r.rank, "makespan_s": m.makespan_s,
                    "compute_s": r.compute_s, "comm_s": r.comm_s,
                    "exposed_comm_s": r.exposed_comm_s, "idle_s": r.idle_s, "flops": r.flops,
                    "peak_mem_bytes": r.peak_mem_bytes if r.peak_mem_bytes is not None else ""})
    return out.getvalue()


def decode_upload(contents: Any, filename: Any, max_bytes: int) -> bytes:
    """The bytes of a dcc.Upload data URL, refusing anything over `max_bytes`."""
    name = filename if isinstance(filename, str) else "the file"
    if not isinstance(contents, str) or "," not in contents:
        raise RingsimError(f"{name}: the upload did not arrive as a file")
    header, _, data = contents.partition(",")
    if not header.endswith(";base64"):
        raise RingsimError(f"{name}: the upload did not arrive base64-encoded")
    if len(data) * 3 // 4 > max_bytes + 3:
        raise RingsimError(f"{name} is larger than the {max_bytes // 2**20} MB limit")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RingsimError(f"{name}: the upload is corrupt (bad base64)") from None
    if len(raw) > max_bytes:
        raise RingsimError(f"{name} is larger than the {max_bytes // 2**20} MB limit")
    return raw


def parse_trace_upload(contents: Any, filename: Any, max_bytes: int) -> Trace:
    """A trace from an upload: JSON only, validated field by field."""
    raw = decode_upload(contents, filename, max_bytes)
    name = filename if isinstance(filename, str) else "the file"
    try:
        return Trace.loads(raw)
    except RingsimError as e:
        raise RingsimError(f"{name}: {e}") from None
    except RecursionError:
        raise RingsimError(f"{name}: the JSON is nested too deeply to be a trace") from None


def parse_json_bytes(raw: bytes, name: str) -> Any:
    """A JSON document (a calibrated profile, for instance); nothing but JSON is parsed."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise RingsimError(f"{name}: not valid JSON ({e})") from None


def parse_json_upload(contents: Any, filename: Any, max_bytes: int) -> Any:
    raw = decode_upload(contents, filename, max_bytes)
    return parse_json_bytes(raw, filename if isinstance(filename, str) else "the file")
