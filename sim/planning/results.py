"""A sweep's results file: one row per configuration, Parquet (pyarrow) or CSV.

Its columns are the key, every option of a configuration resolved (sim.planning.spec),
the command that reproduces it and the metrics of its run (`columns`). While a sweep
runs, finished rows go to part files beside the output (`OUT.parts/`, each written whole
and renamed into place, every few seconds); at the end, or on Ctrl-C, the parts and any
earlier output are merged into OUT (written whole, then renamed over it), rows in the
order of the expansion. The keys already there (or in parts left by a run that was
killed) are what a sweep run again skips. Columns of OUT that ringsim did not write (a
user's own) are kept, each row's values with its key, after ringsim's columns; a fresh
sweep, which would drop them with their rows, refuses such a file instead.
"""

from __future__ import annotations

import csv
import os
import time
from functools import lru_cache
from typing import Any, Iterable, Sequence

from sim.errors import RingsimError, one_line
from sim.files import check_output, output_file, output_path
from sim.planning.spec import column, value_kind
from sim.scenario.schema import SCENARIO_OPTIONS

FORMATS = ("parquet", "csv")


FLUSH_S = 5.0
"""Finished rows wait at most this long (or FLUSH_ROWS rows) before going to a part file."""


FLUSH_ROWS = 5000


# (column, kind): what each row holds beside the configuration's options
_METRICS: tuple[tuple[str, str], ...] = (
    ("makespan_s", "float"), ("ideal_s", "float"), ("efficiency", "float"),
    ("load_imbalance", "float"), ("work_imbalance", "float"), ("overlap_efficiency", "float"),
    ("exposed_comm_s", "float"),
    ("exposed_kv_s", "float"), ("exposed_dkv_s", "float"), ("exposed_ag_s", "float"),
    ("exposed_rs_s", "float"), ("exposed_a2a_s", "float"),
    ("compute_s", "float"), ("busiest_nic_s", "float"),
    ("bytes_per_gpu", "float"), ("total_bytes", "float"), ("total_flops", "float"),
    ("peak_mem_bytes", "int"), ("memory_bytes", "float"), ("fits", "bool"),
    ("variant", "str"), ("explanation", "str"), ("error", "str"),
)


METRIC_COLUMNS = tuple(name for name, _ in _METRICS)


@lru_cache(maxsize=None)
def columns() -> tuple[tuple[str, str], ...]:
    """(name, kind) of every column, in order: key, the options, command, the metrics."""
    return (("key", "str"), *((column(o), value_kind(o)) for o in SCENARIO_OPTIONS), ("command", "str"), *_METRICS)


def column_names() -> tuple[str, ...]:
    return tuple(name for name, _ in columns())


def format_of(path: str, fmt: str | None = None) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise RingsimError(f"format must be parquet or csv, got {fmt!r}")
        return fmt
    ext = os.path.splitext(path)[1].lower()
    if ext in (".parquet", ".pq"):
        return "parquet"
    if ext == ".csv":
        return "csv"
    raise RingsimError(f"{path}: name the results .parquet or .csv (or give --format)")


def _pyarrow():
    # optional and slow to import: loaded for Parquet files only
    try:
        import pyarrow
        import pyarrow.parquet
    except ModuleNotFoundError:
        raise RingsimError("Parquet needs pyarrow: pip install 'ringsim[sweep]', or write CSV "
                           "(--out RESULTS.csv)") from None
    return pyarrow


@lru_cache(maxsize=None)
def arrow_schema():
    pa = _pyarrow()
    types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in columns()])


def _typed(kind: str, text: str) -> Any:
    if text == "":
        return None
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "bool":
        return text.lower() in ("true", "1")
    return text


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def read_rows(path: str, fmt: str | None = None) -> list[dict[str, Any]]:
    """Every row of a results file (Parquet or CSV), typed, in the current columns
    (a column the file lacks is None)."""
    fmt = format_of(path, fmt)
    names = column_names()
    raw = _aligned(_read_table(path)).to_pylist() if fmt == "parquet" else _read_csv(path)[0]
    return [{n: r.get(n) for n in names} for r in raw]


def _read_csv(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A CSV results file's rows, ringsim's columns typed and any others as their text,
    and the names of those others (a user's own columns) in the file's order."""
    kinds = dict(columns())
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header or "key" not in header:
                raise RingsimError(f"{path} is not a ringsim sweep result (it has no key column)")
            twice = sorted({h for h in header if header.count(h) > 1})
            if twice:
                raise RingsimError(f"{path} has two columns named {twice[0]!r}: rewriting it would lose one")
            raw = []
            for line, values in enumerate(reader, 2):
                if len(values) > len(header):
                    raise RingsimError(f"{path}, line {line}: more values than the header has columns; "
                                       "rewriting it would lose them")
                r = dict(zip(header, values))
                if r.get("key"):
                    raw.append({k: _typed(kinds[k], v) if k in kinds else v for k, v in r.items()})
    except RingsimError:
        raise
    except (OSError, ValueError, csv.Error) as e:
        raise RingsimError(f"cannot read the results {path}: {one_line(e)}") from None
    return raw, [h for h in header if h not in kinds]


def foreign_columns(path: str, fmt: str | None = None) -> list[str]:
    """The columns of an existing results file that ringsim does not write (a user's own)."""
    if not os.path.exists(path):
        return []
    ours = set(column_names())
    if format_of(path, fmt) == "parquet":
        pa = _pyarrow()
        try:
            names = pa.parquet.read_schema(path).names
        except Exception as e:  # noqa: BLE001 - pyarrow's and the OS's errors: a damaged file
            if isinstance(e, OSError) or type(e).__module__.startswith("pyarrow"):
                raise RingsimError(f"cannot read the results {path}: {one_line(e)}") from None
            raise
    else:
        try:
            with open(path, newline="") as f:
                names = next(csv.reader(f), [])
        except (OSError, ValueError, csv.Error) as e:
            raise RingsimError(f"cannot read the results {path}: {one_line(e)}") from None
    return [n for n in names if n not in ours]


def _read_table(path: str, columns: list[str] | None = None):
    """A Parquet file as a pyarrow Table; RingsimError if it is not a sweep result."""
    pa = _pyarrow()
    try:
        names = pa.parquet.read_schema(path).names
        if "key" not in names:
            raise RingsimError(f"{path} is not a ringsim sweep result (it has no key column)")
        return pa.parquet.read_table(path, columns=columns)
    except RingsimError:
        raise
    except Exception as e:  # noqa: BLE001 - pyarrow's and the OS's errors: a damaged or missing file
        if isinstance(e, OSError) or type(e).__module__.startswith("pyarrow"):
            raise RingsimError(f"cannot read the results {path}: {one_line(e)}") from None
        raise


def _aligned(table, extra=None):
    """`table` in the current columns and types (a column it lacks is null), followed by
    the fields of `extra` (a user's own columns: the table's, else null)."""
    pa = _pyarrow()
    fields = [*arrow_schema(), *(extra or ())]
    cols = []
    for f in fields:
        if f.name in table.column_names:
            cols.append(table.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(table.num_rows, type=f.type))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _write_table(path: str, table, *, overwrite: bool = True) -> None:
    """Write a pyarrow Table whole: a temporary file beside `path`, then published as it."""
    pa = _pyarrow()
    with output_path(path, overwrite=overwrite) as tmp:
        pa.parquet.write_table(table, tmp)


def write_rows(path: str, rows: Sequence[dict[str, Any]], fmt: str, *, extra: Sequence[str] = (),
               overwrite: bool = True) -> None:
    """Write `rows` to `path` whole (a temporary file beside it, then published as it),
    ringsim's columns and then `extra`'s (CSV)."""
    if fmt == "parquet":
        _write_table(path, _pyarrow().Table.from_pylist(list(rows), schema=arrow_schema()), overwrite=overwrite)
        return
    names = [*column_names(), *extra]
    with output_file(path, overwrite=overwrite, text=True) as f:
        w = csv.writer(f)
        w.writerow(names)
        for r in rows:
            w.writerow([_text(r.get(n)) for n in names])


class ResultsFile:
    """A sweep's output: OUT, and the part files (OUT.parts/) of a run in progress."""

    def __init__(self, path: str, fmt: str | None = None):
        self.path = path
        self.fmt = format_of(path, fmt)
        if self.fmt == "parquet":
            _pyarrow()
        check_output(path, resumes=True)
        self.parts_dir = path + ".parts"
        self.fresh = False
        self._buffer: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()
        self._seq = 0

    def _parts(self) -> list[str]:
        if not os.path.isdir(self.parts_dir):
            return []
        return sorted(os.path.join(self.parts_dir, n) for n in os.listdir(self.parts_dir)
                      if not n.startswith(".") and n.endswith("." + self.fmt))

    def _sources(self) -> list[str]:
        kept = os.path.exists(self.path) and not self.fresh
        return ([self.path] if kept else []) + self._parts()

    def existing(self) -> list[dict[str, Any]]:
        """Rows already finished: OUT's, then those of parts a killed run left."""
        rows: list[dict[str, Any]] = []
        for p in self._sources():
            rows += read_rows(p, self.fmt)
        return rows

    def finished_keys(self) -> set[str]:
        """The keys of the rows already finished (Parquet: the key column alone)."""
        if self.fmt != "parquet":
            return {r["key"] for r in self.existing()}
        keys: set[str] = set()
        for p in self._sources():
            keys.update(_read_table(p, columns=["key"]).column("key").to_pylist())
        return keys

    def discard(self) -> None:
        """Forget earlier results (a fresh sweep): the parts now, OUT's rows when the new
        ones replace it. Refused where OUT has columns of its own, which would go with them."""
        foreign = foreign_columns(self.path, self.fmt)
        if foreign:
            raise RingsimError(f"{self.path} has columns ringsim did not write ({', '.join(foreign[:5])}"
                               f"{', ...' if len(foreign) > 5 else ''}); a fresh sweep would drop them with "
                               "their rows: move the file aside or sweep without --fresh")
        for p in self._parts():
            os.remove(p)
        self.fresh = True

    def add(self, rows: Iterable[dict[str, Any]]) -> None:
        self._buffer.extend(rows)
        if len(self._buffer) >= FLUSH_ROWS or time.monotonic() - self._last_flush >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Write the rows waiting into a new part file."""
        self._last_flush = time.monotonic()
        if not self._buffer:
            return
        os.makedirs(self.parts_dir, exist_ok=True)
        self._seq += 1
        name = f"part-{int(time.time() * 1000):013d}-{os.getpid()}-{self._seq:06d}.{self.fmt}"
        write_rows(os.path.join(self.parts_dir, name), self._buffer, self.fmt)
        self._buffer = []

    def finish(self, order: Sequence[str]) -> int:
        """Merge OUT and the parts into OUT, one row per key (the latest), the keys of
        `order` first in that order, then any others as they were; remove the parts.
        Returns the number of rows. Parquet is merged as columns (a sweep of 100,000
        rows never becomes Python objects); CSV row by row."""
        self.flush()
        sources = self._sources()
        rank = {k: i for i, k in enumerate(order)}
        kept = self.path in sources
        if self.fmt == "parquet":
            pa = _pyarrow()
            read = [_read_table(p) for p in sources]
            # a user's own columns of OUT ride along with their rows (null in new rows)
            extra = [f for f in read[0].schema if f.name not in set(column_names())] if kept else []
            tables = [_aligned(t, extra) for t in read]
            table = pa.concat_tables(tables) if tables else arrow_schema().empty_table()
            keys = table.column("key").to_pylist()
            latest = {k: i for i, k in enumerate(keys)}
            take = sorted(latest.values(), key=lambda i: (0, rank[keys[i]]) if keys[i] in rank else (1, i))
            _write_table(self.path, table.take(pa.array(take, type=pa.int64())))
            n = len(take)
        else:
            rows: dict[str, dict[str, Any]] = {}
            extra: list[str] = []
            for p in sources:
                got, own = _read_csv(p)
                if p == self.path:
                    extra = own
                for r in got:
                    # a row simulated again keeps the user's values of their own columns
                    rows[r["key"]] = {**rows.get(r["key"], {}), **r}
            keys = sorted(rows, key=lambda k: (0, rank[k]) if k in rank else (1, 0))
            write_rows(self.path, [rows[k] for k in keys], self.fmt, extra=extra)
            n = len(keys)
        for p in self._parts():
            os.remove(p)
        try:
            os.rmdir(self.parts_dir)
        except OSError:
            pass
        return n
