"""sim.inputs: damaged and oversized files refused from their sizes and headers, before
anything is inflated or parsed; the sizes each claims are set against an independent count
(the bytes written, Python's own json for the nesting)."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from sim.errors import RingsimError
from sim.inputs import MAX_JSON_NESTING, checked_npz_members, nesting_depth, parse_json, read_npy_member
from sim.trace.format import Trace
from tests.hostile import damaged as d


def _depth(obj) -> int:
    """The nesting of a decoded JSON value, counted by walking it."""
    if isinstance(obj, dict):
        return 1 + max((_depth(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max((_depth(v) for v in obj), default=0)
    return 0


@pytest.mark.parametrize("text", ['{"a": [1, {"b": "[[[["}], "c": "]]"}', "[]", "3", '"[{"', '[[["\\"]"]]]'])
def test_the_nesting_counted_on_the_bytes_is_json_s_own(text):
    assert nesting_depth(text.encode()) == _depth(json.loads(text))


def test_deep_or_oversized_json_is_refused_before_it_is_parsed():
    with pytest.raises(RingsimError, match="nested"):
        parse_json(d.deep_json(MAX_JSON_NESTING + 1), what="x")
    assert parse_json(d.deep_json(MAX_JSON_NESTING), what="x") is not None
    with pytest.raises(RingsimError, match="limit"):
        parse_json(b"[" + b"1," * 1000 + b"1]", what="x", max_bytes=100)
    with pytest.raises(RingsimError, match="not valid JSON"):
        parse_json(b'{"a": NaN', what="x")


def test_an_npy_header_claiming_more_than_its_member_holds_is_refused_unallocated():
    arc = d.archive_with({"start_s.npy": d.npy_claiming((10 ** 11,), b"\0" * 64)})
    with zipfile.ZipFile(io.BytesIO(arc)) as z:
        infos = checked_npz_members(z, len(arc), max_bytes=1 << 30)
        with pytest.raises(RingsimError, match="claims 800,000,000,000 bytes"):
            read_npy_member(z, infos["start_s.npy"])


def test_an_npy_member_reads_back_as_written():
    x = np.arange(1000, dtype=np.float64)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, x)
    arc = d.archive_with({"x.npy": buf.getvalue()})
    with zipfile.ZipFile(io.BytesIO(arc)) as z:
        got = read_npy_member(z, checked_npz_members(z, len(arc), max_bytes=1 << 20)["x.npy"])
    assert np.array_equal(got, x) and got.flags.writeable


def test_a_zip_bomb_is_refused_from_its_directory():
    arc = d.claim_size(d.trace_archive(), "end_s.npy", 0xFFFFFFF0)
    with pytest.raises(RingsimError, match="deflate"):
        Trace.loads(arc)
    with zipfile.ZipFile(io.BytesIO(d.trace_archive())) as z:
        total = sum(i.file_size for i in z.infolist())
    with pytest.raises(RingsimError, match="unpacks to more than"):
        with zipfile.ZipFile(io.BytesIO(d.trace_archive())) as z:
            checked_npz_members(z, 10 ** 9, max_bytes=total - 1)


def test_a_trace_archive_claiming_10_to_the_11_entries_is_refused():
    arc = d.archive_with({"start_s.npy": d.npy_claiming((10 ** 11,), b"\0" * 64)}, base=d.trace_archive())
    with pytest.raises(RingsimError, match="claims"):
        Trace.loads(arc)
    assert len(Trace.loads(d.trace_archive())) > 0
