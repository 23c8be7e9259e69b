"""Where each event of a Kineto trace file lies, read as a stream: gzip inflated a chunk at a
time, and a numpy scan of each chunk's quotes and brackets (a raw newline is never inside a
JSON string; a quote after an odd run of backslashes is) finds the `traceEvents` list and
where each of its events begins and ends, so that whole events go on to be parsed
(sim.profiler.columns) and nothing but a chunk and the header is ever held.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import orjson

from sim.reasons import refusal

CHUNK_BYTES = 1024 * 1024
"""Uncompressed bytes scanned at a time."""

MAX_EVENT_BYTES = 64 * 1024 * 1024
"""The largest single event (or run of header bytes) accepted: a hostile file stops here."""

MAX_HEADER_BYTES = 64 * 1024 * 1024
"""The most bytes kept of what lies outside traceEvents (device properties, distributed info)."""


def _open(path: Path):
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
    except OSError as e:
        raise refusal("profiler.unreadable", path=str(path), detail=str(e)) from None
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _read_chunks(path: Path) -> Iterator[bytes]:
    f = _open(path)
    try:
        with f:
            while True:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    return
                yield chunk
    except EOFError:
        raise refusal("profiler.gzip-cut", path=str(path)) from None
    except (gzip.BadGzipFile, zlib.error) as e:
        raise refusal("profiler.gzip-bad", path=str(path), detail=str(e)) from None
    except OSError as e:
        raise refusal("profiler.unreadable", path=str(path), detail=str(e)) from None


_QUOTE, _BACKSLASH = 34, 92
_OPEN = (123, 91)  # { [
_CLOSE = (125, 93)  # } ]


_SPECIAL = np.zeros(256, dtype=bool)
_SPECIAL[[_QUOTE, 123, 125, 91, 93]] = True
_OPENS = np.zeros(256, dtype=np.int8)
_OPENS[[123, 91]] = 1
_OPENS[[125, 93]] = -1


def _structure(buf: bytes, depth0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of the brackets of `buf` outside strings, their bytes and the nesting depth
    after each; `buf` starts outside a string at depth `depth0`. Only the quotes and brackets
    are looked at, in a few vector passes over the chunk and 32-bit positions (a chunk is
    megabytes: its temporaries stay a few times its size)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    special = np.flatnonzero(_SPECIAL[a]).astype(np.int32)
    chars = a[special]
    is_quote = chars == _QUOTE
    if buf.find(b"\\") >= 0:
        # a quote after an odd run of backslashes is inside its string: the run's length is
        # the distance back to the last byte that is not a backslash
        qi = np.flatnonzero(is_quote)
        q = special[qi]
        after_bs = (q > 0) & (a[np.maximum(q - 1, 0)] == _BACKSLASH)
        if after_bs.any():
            idx = np.arange(len(a), dtype=np.int32)
            last_other = np.maximum.accumulate(np.where(a == _BACKSLASH, np.int32(-1), idx))
            del idx
            p = q[after_bs] - 1
            run = p - last_other[p]
            del last_other
            is_quote[qi[after_bs][run % 2 == 1]] = False
    # a bracket is structural where an even number of (real) quotes precede it
    quotes_before = np.cumsum(is_quote, dtype=np.int32)
    structural = ~is_quote & (quotes_before % 2 == 0)
    del quotes_before
    if not structural.any():
        return special[:0], chars[:0], np.zeros(0, np.int32)
    pos = special[structural]
    ch = chars[structural]
    depth = np.cumsum(_OPENS[ch], dtype=np.int32)
    depth += depth0
    return pos, ch, depth


@dataclass
class Region:
    """Whole events of traceEvents as bytes, with where each starts ({) and ends (})."""

    data: bytes
    starts: np.ndarray
    ends: np.ndarray


def stream_events(path: Path) -> Iterator["Region | dict"]:
    """The events of `traceEvents`, a region of whole events per chunk, then the rest of the
    document (its header without the events) as a dict, last."""
    head = bytearray()
    tail = bytearray()
    carry = b""
    depth = 0
    phase = "head"
    for chunk in _read_chunks(path):
        buf = carry + chunk if carry else chunk
        carry = b""
        if phase == "tail":
            tail += buf
            if len(tail) > MAX_HEADER_BYTES:
                raise refusal("profiler.header-over", path=str(path), limit=MAX_HEADER_BYTES)
            continue
        pos, ch, dep = _structure(buf, depth)
        start = 0
        if phase == "head":
            found = _find_events_key(path, buf, pos, dep, depth)
            if found is None:
                # keep up to the last bracket: the key cannot straddle it
                if len(pos):
                    cut = int(pos[-1]) + 1
                    head += buf[:cut]
                    depth = int(dep[-1])
                    carry = buf[cut:]
                else:
                    carry = buf
                if len(head) > MAX_HEADER_BYTES or len(carry) > MAX_EVENT_BYTES:
                    raise refusal("profiler.no-events-early", path=str(path), size=len(head) + len(carry))
                continue
            key_at, bracket_at = found
            head += buf[:key_at]
            start = bracket_at + 1
            phase = "events"
        # events: each ends with a } back at depth 2 (document 1, traceEvents 2)
        after = pos >= start
        closes = np.flatnonzero(after & (ch == 93) & (dep == 1))
        end_of_array = int(pos[closes[0]]) if len(closes) else None
        ends = after & (ch == 125) & (dep == 2)
        if end_of_array is not None:
            ends &= pos < end_of_array
        ends_at = pos[ends]
        if len(ends_at) and int(ends_at[0]) - start > MAX_EVENT_BYTES:
            raise refusal("profiler.event-over", path=str(path), limit=MAX_EVENT_BYTES)
        if len(ends_at):
            last = int(ends_at[-1])
            opens = pos[after & (ch == 123) & (dep == 3) & (pos < last)]
            yield Region(buf[start:last + 1], opens - start, ends_at - start)
            start = last + 1
        if end_of_array is not None:
            if buf[start:end_of_array].strip(b" \t\r\n,"):
                raise refusal("profiler.not-event", path=str(path))
            tail += buf[end_of_array + 1:]
            phase = "tail"
            continue
        carry = buf[start:]
        depth = 2
        if len(carry) > MAX_EVENT_BYTES:
            raise refusal("profiler.event-over", path=str(path), limit=MAX_EVENT_BYTES)
    if phase == "head":
        raise refusal("profiler.no-events", path=str(path))
    if phase == "events":
        raise refusal("profiler.ends-inside", path=str(path))
    try:
        meta = orjson.loads(bytes(head) + b'"traceEvents":[]' + bytes(tail))
    except orjson.JSONDecodeError as e:
        raise refusal("profiler.json-after", path=str(path), detail=str(e)) from None
    if not isinstance(meta, dict):
        raise refusal("profiler.not-object", path=str(path))
    yield meta


def _find_events_key(path: Path, buf: bytes, pos: np.ndarray, dep: np.ndarray,
                     depth0: int) -> tuple[int, int] | None:
    """(position of the `"traceEvents"` key at the document's top level, position of its `[`)."""
    at = 0
    while True:
        p = buf.find(b'"traceEvents"', at)
        if p < 0:
            return None
        at = p + 1
        i = int(np.searchsorted(pos, p))
        level = int(dep[i - 1]) if i > 0 else depth0
        if level != 1 or not _outside_string(buf, p, pos, i):
            continue
        q = p + len(b'"traceEvents"')
        rest = buf[q:q + 64].lstrip()
        if not rest.startswith(b":"):
            continue
        rest2 = rest[1:].lstrip()
        if not rest2:
            return None  # the value lies in the next chunk: read on
        if not rest2.startswith(b"["):
            raise refusal("profiler.events-not-list", path=str(path))
        return p, q + (len(buf[q:q + 64]) - len(rest2))


def _outside_string(buf: bytes, p: int, pos: np.ndarray, i: int) -> bool:
    """Whether the quote at p opens a string (an even number of real quotes since the last
    structural bracket before it)."""
    since = int(pos[i - 1]) + 1 if i > 0 else 0
    seg = buf[since:p]
    n = seg.count(b'"') - seg.count(b'\\"') + seg.count(b'\\\\"')
    return n % 2 == 0


def parse_region(path: Path, region: Region) -> list:
    """A region's events as dicts (orjson), or one line naming the file if one is not JSON."""
    body = region.data.lstrip(b" \t\r\n,")
    try:
        events = orjson.loads(b"[" + body + b"]")
    except orjson.JSONDecodeError as e:
        raise refusal("profiler.event-json", path=str(path), detail=str(e)) from None
    return events
