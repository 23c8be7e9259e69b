"""What every server process of the dashboard shares: simulated traces, metrics and
comparison rows kept in a folder on disk, so that a scenario simulated by one worker (or
by a background callback's job, a process of its own) is not simulated again by another.

A value is named by the digest of its kind, its key (the scenario's JSON and the profile's
token) and the code's fingerprint (the size and time of every source file of sim/ and
dashboard/): a changed model never serves a result of the old one, and a folder kept
across restarts stays true. A value is written to a temporary name and renamed into place,
so a reader sees it whole or not at all; one process makes a missing value while the
others wait on its lock file (`fcntl.flock`). A trace is kept as one `.npy` file per
column and read back memory-mapped: a window of a million-span trace reads only the pages
it draws. The folder is bounded in bytes; past its budget the least recently used values
go, with their lock files. A process looks over the folder for that in a thread of its own,
after its first write and then each time it has written a sixteenth of the budget
(EVICT_EVERY), never on the path of a request: a look stats every file, half a second on a
folder of 8,000 entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

import numpy as np

from sim.engine import threads
from sim.trace.format import COLUMN_TYPES, SpanTable, Trace

DEFAULT_BUDGET_BYTES = 3 * 1024 ** 3
"""The folder's size past which the least recently used values go: a dozen 1,024-GPU
forward traces (about 240 MB each in columns)."""
FOLDER_ENV = "RINGSIM_DASHBOARD_CACHE"
"""The environment variable naming the folder (default: ringsim-dashboard-cache in the
system's temporary folder)."""
BUDGET_ENV = "RINGSIM_DASHBOARD_CACHE_BYTES"
EVICT_EVERY = 16
"""A process looks over the folder (DiskCache.evict) after its first write, then each time it
has written budget / EVICT_EVERY bytes since it last looked: between looks the folder may
pass its budget by that much for each process writing to it."""
BEHIND_NICE = 10
"""The nice value of a look over the folder (`behind_requests`): the requests come first, and
it takes the cores they leave. Not the write of a trace a process made for the others: they
wait for it. Niced, that write let a 1,024-GPU block map drawn beside it in the same process
take 0.19-0.23 s instead of 0.37-0.59 s, but the timeline at 1,024 GPUs under `ringsim
dashboard` (two worker processes) came 3.47 s cold in the median of five rounds against 3.31 s
without (bench/speed/dashboard_latency.py), its request often in the process that waits."""
STALE_LOCK_S = 600.0
"""A lock file whose value is not in the folder, and that no process holds, goes once it is
this old (a value whose making failed, or that was asked after and never made); a younger
one may be about to be taken."""


def default_folder() -> Path:
    return Path(os.environ.get(FOLDER_ENV) or Path(tempfile.gettempdir()) / "ringsim-dashboard-cache")


def code_fingerprint() -> str:
    """A digest of the size and modification time of every Python source of sim/ and
    dashboard/: results of other code are never read."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for package in ("sim", "dashboard"):
        for path in sorted((root / package).rglob("*.py")):
            st = path.stat()
            h.update(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


_HELD: set["_Held"] = set()
"""The lock files this process has open: held, or waited for."""
_OPENING = threading.Lock()
"""Held while a lock file is opened and entered in _HELD, and across a fork: a process is
never forked between the two (its copy of the file would be missed)."""


class _Held:
    """A lock file held (DiskCache._lock); closing it lets the lock go.

    A lock taken with flock belongs to the open file, which a forked process shares: a Dash
    background job forked from a server process while it makes a value would hold that
    value's lock until the job ends, long after the server process let go of it (and a job
    that then waits for the value would wait on itself). A file is entered here as it is
    opened, before its lock is asked for: a thread waiting for the lock when the process
    forks takes it later, for the open file the child shares. A forked process therefore
    closes its copies of them all at once (`_close_in_child`); closing a copy leaves the
    parent's lock held, and its waiting thread waiting."""

    def __init__(self, f: Any):
        self.f = f
        _HELD.add(self)

    def close(self) -> None:
        _HELD.discard(self)
        self.f.close()

    def __enter__(self) -> "_Held":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _close_in_child() -> None:
    for held in list(_HELD):
        held.close()
    _OPENING.release()


os.register_at_fork(before=_OPENING.acquire, after_in_parent=_OPENING.release, after_in_child=_close_in_child)

_OPEN: "weakref.WeakSet[DiskCache]" = weakref.WeakSet()
"""The folders this process has open (DiskCache), whose looks a forked process starts anew."""


def _looks_anew_in_child() -> None:
    for disk in list(_OPEN):
        disk._start_looks()


os.register_at_fork(after_in_child=_looks_anew_in_child)


class DiskCache:
    """Values by kind and key in `folder`, shared by every process that opens it."""

    def __init__(self, folder: str | os.PathLike | None = None, budget_bytes: int | None = None):
        self.folder = Path(folder) if folder is not None else default_folder()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.budget_bytes = budget_bytes if budget_bytes is not None else int(
            os.environ.get(BUDGET_ENV) or DEFAULT_BUDGET_BYTES)
        self.fingerprint = code_fingerprint()
        self._start_looks()
        _OPEN.add(self)

    def _start_looks(self) -> None:
        """This process's looks over the folder: none yet, none under way. A process forked
        from this one (a Dash background job) starts here again: it has none of the threads
        that were looking, and a lock one of them held would stay held in it for ever."""
        self._evicting = threading.Lock()
        self._again = False
        self._counting = threading.Lock()
        self._unlooked: int | None = None
        """Bytes this process has written since it last started a look over the folder (None:
        it has not yet written)."""
        self.looking: threading.Thread | None = None
        """The thread of the last look over the folder started (`_wrote`), if any."""

    def _name(self, kind: str, key: str) -> Path:
        digest = hashlib.sha256(f"{self.fingerprint}\n{kind}\n{key}".encode()).hexdigest()[:40]
        return self.folder / f"{kind}-{digest}"

    @staticmethod
    def _lock(name: Path) -> "_Held":
        """The lock file of value `name`, open and locked (closing it lets the lock go): one
        process at a time makes that value."""
        with _OPENING:
            held = _Held(open(str(name) + ".lock", "a+"))
        try:
            fcntl.flock(held.f, fcntl.LOCK_EX)
        except BaseException:
            held.close()
            raise
        return held

    def making(self, kind: str, key: str) -> bool:
        """Whether a process (this one's other threads included) is making the value under
        (kind, key) now: its lock is held."""
        path = str(self._name(kind, key)) + ".lock"
        if not os.path.exists(path):
            return False
        with open(path, "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
        return False

    # --- small values: pickled ---------------------------------------------------------

    def read(self, kind: str, key: str) -> Any | None:
        """The value kept under (kind, key), or None."""
        path = self._name(kind, key).with_suffix(".pkl")
        try:
            with open(path, "rb") as f:
                value = pickle.load(f)
        except (FileNotFoundError, EOFError, pickle.UnpicklingError):
            return None
        _touch(path)
        return value

    def has(self, kind: str, key: str) -> bool:
        """Whether a value is kept under (kind, key) (nothing is read)."""
        return self._name(kind, key).with_suffix(".pkl").exists()

    def write(self, kind: str, key: str, value: Any) -> None:
        path = self._name(kind, key).with_suffix(".pkl")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        with open(tmp, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            size = f.tell()
        os.replace(tmp, path)
        self._wrote(size)

    def get(self, kind: str, key: str, make: Callable[[], Any]) -> Any:
        """The value under (kind, key), made by `make()` once for every process: the others
        wait for it."""
        value = self.read(kind, key)
        if value is not None:
            return value
        with self._lock(self._name(kind, key)):
            value = self.read(kind, key)
            if value is None:
                value = make()
                self.write(kind, key, value)
        return value

    # --- traces: a column a file, memory-mapped -----------------------------------------

    def read_trace(self, key: str) -> Trace | None:
        folder = self._name("trace", key)
        try:
            with open(folder / "header.json") as f:
                head = json.load(f)
            columns = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in COLUMN_TYPES}
        except (FileNotFoundError, NotADirectoryError, ValueError):
            return None
        _touch(folder)
        table = SpanTable(chunk_sets=[tuple(s) for s in head["chunk_sets"]], **columns)
        return Trace(head["source"], head["n_gpus"], table, head["config"], head["hardware"], head["meta"])

    def write_trace(self, key: str, trace: Trace) -> None:
        folder = self._name("trace", key)
        if folder.exists():
            return
        tmp = folder.with_name(f".{folder.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.mkdir()
        try:
            c = trace.columns
            # the columns side by side on the cores at a million spans (sim.engine.threads):
            # most of a write is the kernel taking in fresh pages, which two cores do at once
            # (a 1,024-GPU ring's 240 MB: 0.63-0.85 s one after another, 0.44-0.47 s on two)
            threads.each(lambda name: np.save(tmp / f"{name}.npy", getattr(c, name), allow_pickle=False),
                         COLUMN_TYPES, size=len(c))
            with open(tmp / "header.json", "w") as f:
                json.dump({"source": trace.source, "n_gpus": trace.n_gpus, "config": trace.config,
                           "hardware": trace.hardware, "meta": trace.meta,
                           "chunk_sets": [list(s) for s in c.chunk_sets]}, f, default=_plain)
            os.rename(tmp, folder)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)     # another process renamed it first, or no room
            return
        self._wrote(sum(getattr(c, name).nbytes for name in COLUMN_TYPES))

    def trace(self, key: str, make: Callable[[], Trace]) -> tuple[Trace, bool]:
        """(the trace under `key`, whether this call made it): made by `make()` in one process
        while the others wait for it (two server processes drawing two views of a new
        scenario would otherwise simulate it twice at once, each at half the cores), written
        in a thread of its own (the request that simulated does not wait for the disk), and
        the others let in once it is written, to read it."""
        trace = self.read_trace(key)
        if trace is not None:
            return trace, False
        lock = self._lock(self._name("trace", key))
        try:
            trace = self.read_trace(key)
            made = trace is None
            if made:
                trace = make()
        except BaseException:
            lock.close()
            raise
        if not made:
            lock.close()
            return trace, False

        def write_then_let_in() -> None:
            try:
                self.write_trace(key, trace)
            finally:
                lock.close()

        threading.Thread(target=write_then_let_in, daemon=True).start()
        return trace, True

    # --- the budget ----------------------------------------------------------------------

    def _wrote(self, nbytes: int) -> None:
        """Count `nbytes` written, and start a look over the folder in a thread when one is
        due (EVICT_EVERY)."""
        with self._counting:
            due = self._unlooked is None or self._unlooked + nbytes >= self.budget_bytes / EVICT_EVERY
            self._unlooked = 0 if due else self._unlooked + nbytes
        if due:
            looking = threading.Thread(target=self.evict, args=(False,), name="ringsim-evict", daemon=True)
            self.looking = looking
            looking.start()

    def evict(self, wait: bool = True) -> None:
        """Remove the least recently used values until the folder fits its budget, each with
        its lock file, and the stale lock files of values not there (STALE_LOCK_S). A call
        while a look is under way has that look go over the folder once more when done, and
        with `wait` returns once it has."""
        if not wait:
            behind_requests()          # a thread of its own (`_wrote`)
        self._again = True
        while self._again and self._evicting.acquire(blocking=wait):
            try:
                while self._again:
                    self._again = False
                    self._look()
            finally:
                self._evicting.release()

    def _look(self) -> None:
        entries = []
        locks = []
        for path in self.folder.iterdir():
            if path.suffix == ".lock":
                locks.append(path)
                continue
            if path.name.startswith(".") or (path.is_dir() and not path.name.startswith("trace-")):
                continue          # a value being written, or the background jobs' folder
            try:
                size = (sum(p.stat().st_size for p in path.iterdir()) if path.is_dir()
                        else path.stat().st_size)
                entries.append((path.stat().st_mtime, size, path))
            except FileNotFoundError:
                continue
        total = sum(size for _, size, _ in entries)
        kept = {path.with_suffix("").name for _, _, path in entries}
        gone = set()
        for _, size, path in sorted(entries):
            if total <= self.budget_bytes:
                break
            # a reader that mapped a trace keeps its pages: removing the files is safe
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            gone.add(path.with_suffix("").name)
            total -= size
        for lock in locks:
            value = lock.with_suffix("").name
            if value in gone or (value not in kept and _stale(lock)):
                _remove_unheld(lock)

    def clear(self) -> None:
        for path in self.folder.iterdir():
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def behind_requests() -> None:
    """Run the calling thread, and the threads it starts, at nice BEHIND_NICE or its own if
    that is higher (Linux, where a nice value is a thread's own; elsewhere nothing changes)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            me = threading.get_native_id()
            if os.getpriority(os.PRIO_PROCESS, me) < BEHIND_NICE:
                os.setpriority(os.PRIO_PROCESS, me, BEHIND_NICE)


def _stale(lock: Path) -> bool:
    """Whether the lock file is STALE_LOCK_S old or more."""
    try:
        return time.time() - lock.stat().st_mtime >= STALE_LOCK_S
    except OSError:
        return False


def _remove_unheld(lock: Path) -> None:
    """Remove the lock file of a value that is not in the folder, unless a process holds it
    (making the value). Were a process to open it just before, and lock it after, its
    removal, a second process could make the same value at once: the same work twice, each
    written whole under its own temporary name."""
    try:
        with _OPENING:
            held = _Held(open(lock))           # not made again if it is gone
    except OSError:
        return
    try:
        fcntl.flock(held.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        held.close()          # held: its value is being made
        return
    try:
        lock.unlink(missing_ok=True)
    finally:
        held.close()


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def _plain(x: Any) -> Any:
    """JSON for the numpy numbers a trace's header may hold."""
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON")
