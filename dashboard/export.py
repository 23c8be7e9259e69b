"""What the page lets a user download and upload, as plain functions of the data.

Downloads: the trace (sim/trace/format.py's archive, or its JSON), the Chrome trace
(for Perfetto; the first ranks of a very large trace) and the metrics (CSV: one row for
the whole run, one per rank). All read the trace's columns. Uploads arrive from the
browser as base64 data URLs; they are size-checked before decoding and parsed through
the trace's own validation (an archive or JSON, never pickle).
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
from typing import Any, Callable

import numpy as np

from sim.errors import RingsimError
from sim.inputs import parse_json
from sim.trace.format import Trace, to_chrome_trace
from sim.trace.metrics import Metrics

MAX_CHROME_SPANS = 600_000
"""The Chrome trace holds at most this many spans (about 120 MB of JSON, every span of a
256-GPU forward+backward ring): past it, the first ranks that fit. Each span becomes a
JSON object, so the whole of a 1024-GPU ring would take gigabytes of memory to write and
more than a browser tab can hold."""

CSV_COLUMNS = ("scope", "rank", "makespan_s", "ideal_s", "efficiency", "load_imbalance",
               "overlap_efficiency", "compute_s", "comm_s", "exposed_comm_s", "idle_s", "flops",
               "bytes_sent", "peak_mem_bytes")


def trace_json(trace: Trace) -> str:
    """The trace file as JSON (the columns as arrays)."""
    return json.dumps(trace.to_dict(), separators=(",", ":"), allow_nan=False)


def trace_archive(trace: Trace) -> bytes:
    """The trace file as a compact archive (sim/trace/format.py): what the page offers."""
    return trace.to_bytes()


def chrome_ranks(trace: Trace, max_spans: int = MAX_CHROME_SPANS) -> int:
    """How many ranks, from rank 0, the Chrome trace holds: all, or as many as fit in
    `max_spans` spans (at least one)."""
    if len(trace) <= max_spans:
        return trace.n_gpus
    held = np.cumsum(np.bincount(trace.columns.rank, minlength=trace.n_gpus))
    return max(1, int(np.searchsorted(held, max_spans, side="right")))


def chrome_trace_json(trace: Trace, max_spans: int = MAX_CHROME_SPANS) -> str:
    """The Chrome trace (sim.trace.format.to_chrome_trace) of the first chrome_ranks(trace) ranks;
    otherData says so when that is not all of them."""
    ranks = chrome_ranks(trace, max_spans)
    if ranks == trace.n_gpus:
        return json.dumps(to_chrome_trace(trace), separators=(",", ":"), allow_nan=False)
    part = Trace(trace.source, ranks, trace.columns.take(trace.columns.rank < ranks),
                 trace.config, trace.hardware, trace.meta)
    out = to_chrome_trace(part)
    out["otherData"]["ranks"] = (f"ranks 0-{ranks - 1} of {trace.n_gpus}: the dashboard "
                                 f"exports at most {max_spans} spans; `ringsim simulate "
                                 "--chrome-trace` writes them all")
    return json.dumps(out, separators=(",", ":"), allow_nan=False)


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


UPLOAD_REFUSALS = {
    "file-not-a-file": "{name}: the upload did not arrive as a file",
    "not-base64": "{name}: the upload did not arrive base64-encoded",
    "bad-base64": "{name}: the upload is corrupt (bad base64)",
    "file-over": "{name} is larger than the {mb} MB limit",
}
"""Why `decode_upload` refuses an upload, in English, by what is wrong."""


def decode_upload(contents: Any, filename: Any, max_bytes: int,
                  refuse: Callable[..., Exception] | None = None) -> bytes:
    """The bytes of a dcc.Upload data URL, refusing anything over `max_bytes`. A refusal is
    `refuse(what, name=..., [mb=...])` (`what` a key of UPLOAD_REFUSALS), by default a
    RingsimError in English (a view can say it in the page's language)."""
    refuse = refuse or (lambda what, **fields: RingsimError(UPLOAD_REFUSALS[what].format(**fields)))
    name = filename if isinstance(filename, str) else "the file"
    if not isinstance(contents, str) or "," not in contents:
        raise refuse("file-not-a-file", name=name)
    header, _, data = contents.partition(",")
    if not header.endswith(";base64"):
        raise refuse("not-base64", name=name)
    if len(data) * 3 // 4 > max_bytes + 3:
        raise refuse("file-over", name=name, mb=max_bytes // 2**20)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise refuse("bad-base64", name=name) from None
    if len(raw) > max_bytes:
        raise refuse("file-over", name=name, mb=max_bytes // 2**20)
    return raw


def parse_trace_upload(contents: Any, filename: Any, max_bytes: int) -> Trace:
    """A trace from an upload (an archive or JSON), validated field by field."""
    raw = decode_upload(contents, filename, max_bytes)
    return parse_trace_bytes(raw, filename if isinstance(filename, str) else "the file")


def parse_trace_bytes(raw: bytes, name: str) -> Trace:
    """A trace from the bytes of a file (an upload, or an example shipped with the
    package), through the trace's own validation; RingsimError naming `name` otherwise."""
    try:
        return Trace.loads(raw)
    except RingsimError as e:
        raise RingsimError(f"{name}: {e}") from None
    except RecursionError:
        raise RingsimError(f"{name}: the JSON is nested too deeply to be a trace") from None


def parse_json_bytes(raw: bytes, name: str) -> Any:
    """A JSON document (a calibrated profile, for instance); nothing but JSON is parsed."""
    return parse_json(raw, what=name)


def parse_json_upload(contents: Any, filename: Any, max_bytes: int) -> Any:
    raw = decode_upload(contents, filename, max_bytes)
    return parse_json_bytes(raw, filename if isinstance(filename, str) else "the file")
