"""Starting the ranks of a run on this host, and telling which one failed.

`spawn` starts one process per rank (forked from a fresh launcher process), joins them
into a process group over loopback TCP with the run's timeout, runs a function in each
and collects what each returns or raises. When a rank
raises or dies, the others lose their peer: their transfers fail within the timeout
(`hw.comm.PeerFailure`) and they stop; any still running after the timeout are
terminated. The failing rank is the first whose error was its own (not a lost peer),
else the first that died without a word; `RankFailure` names it. The group's store listens
on a port chosen free just before; where another process takes it first, the run starts
again on another (PORT_TRIES).

The ranks' own standard error (torch's and gloo's messages, a surviving rank's C++ stack
trace when a peer dies) goes to a log file, not to the terminal: replayed to this
process's standard error when the run succeeds, kept and named in the failure's details
(`RankFailure.log_path`) when it does not, so that what a user reads of a failed run is
the one line naming the rank.

The run API on top of it (`run_local`, `run_config`, `run_configs`) is hw.launch.
"""

from __future__ import annotations

import io
import os
import queue as queue_mod
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Client, Listener
from typing import Any, Callable

import torch
import torch.distributed as dist

from hw.comm import PeerFailure, note_failure
from hw.devices import gpu_for_rank
from sim.errors import RingsimError

# Messages from a rank to the parent, over a local authenticated connection: ("ok",
# rank, payload bytes), ("error", rank, "own" | "peer", text), ("progress", rank, object)
# for long runs that report as they go.


class RankFailure(RingsimError):
    """A rank of a run raised or died; `rank` is the one that failed first.

    The message is one line; `details` has what every rank reported (with the failing
    rank's traceback), for a programming error that needs more than a line.
    """

    def __init__(self, rank: int, message: str, details: str = "", log_path: str | None = None):
        super().__init__(message)
        self.rank = rank
        self.details = details
        self.log_path = log_path
        """Where the ranks' own standard error went (library messages, stack traces)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)


@dataclass
class RankContext:
    """What a function run by `spawn` gets: its place, its group, a way to report."""

    rank: int
    n_gpus: int
    backend: str
    group: Any
    """The process group (None when n_gpus is 1)."""
    control: Any
    """A gloo group for barriers and small objects (the main group on gloo)."""
    store: Any
    report: Callable[[Any], None]
    """Send a progress object to the parent as it happens."""

    def barrier(self) -> None:
        if self.n_gpus > 1:
            dist.barrier(group=self.control)


def join_group(backend: str, *, rank: int, n_gpus: int, local_rank: int, timeout_s: float,
               store: Any = None) -> tuple[Any, Any]:
    """Join the ring's process group; (group, control group for barriers and objects).

    With `store`, rendezvous there; else through torchrun's environment (env://). On
    NCCL the rank's GPU is chosen first (`local_rank`, one GPU per local rank; see
    `hw.devices.gpu_for_rank`), and a gloo group with the same timeout is added for
    CPU-side barriers, which align clocks without waiting on the GPU. NCCL's own timeout
    (its watchdog's, which kills the process) is set longer than `timeout_s`, so that
    the rank gives up first and names the peer it lost (`hw.timing.CudaClock`).
    """
    timeout = timedelta(seconds=timeout_s)
    pg_timeout = timeout
    if backend == "nccl":
        ranks_on_host = int(os.environ.get("LOCAL_WORLD_SIZE", str(n_gpus)))
        torch.cuda.set_device(gpu_for_rank(local_rank, ranks_on_host, torch.cuda.device_count()))
        pg_timeout = timedelta(seconds=timeout_s + NCCL_WATCHDOG_GRACE_S)
    if store is not None:
        dist.init_process_group(backend, store=store, rank=rank, world_size=n_gpus, timeout=pg_timeout)
    else:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=n_gpus,
                                timeout=pg_timeout)
    group = dist.group.WORLD
    return group, dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else group


NCCL_WATCHDOG_GRACE_S = 60.0
"""How much later than the run's timeout NCCL's watchdog may tear a rank down."""


def release_group_after_failure() -> None:
    """Abort NCCL communicators after a failure, so that the exit neither hangs in a
    collective with a lost peer nor skips the process group's teardown. (A gloo group
    needs nothing: its sockets close with the process.) Never raises."""
    try:
        if dist.is_initialized() and "nccl" in str(dist.get_backend()).lower():
            dist.distributed_c10d._abort_process_group()
    except Exception:
        pass


def _rank_main(rank: int, n_gpus: int, port: int, backend: str, timeout_s: float,
               send: Callable[[tuple], None], fn: Callable[..., Any], args: tuple) -> None:
    """The life of one rank: join the group, run `fn`, say how it went."""
    store = None
    try:
        group = control = None
        if n_gpus > 1:
            try:
                store = dist.TCPStore("127.0.0.1", port, n_gpus, rank == 0,
                                      timeout=timedelta(seconds=timeout_s))
            except Exception as e:
                if rank == 0 and "EADDRINUSE" in str(e):
                    # another process took the port after it was picked: the run starts again
                    send(("error", rank, PORT_TAKEN, f"{type(e).__name__}: {e}"))
                    return
                raise
            group, control = join_group(backend, rank=rank, n_gpus=n_gpus, local_rank=rank,
                                        timeout_s=timeout_s, store=store)
        ctx = RankContext(rank, n_gpus, backend, group, control, store,
                          lambda obj: send(("progress", rank, obj)))
        payload = fn(ctx, *args)
        send(("ok", rank, _dumps(payload)))
        if n_gpus > 1:
            dist.destroy_process_group()
    except PeerFailure as e:
        release_group_after_failure()
        send(("error", rank, "peer", str(e)))
    except BaseException as e:
        text = f"{type(e).__name__}: {e}"
        note_failure(store, f"rank {rank} failed: {text}")
        release_group_after_failure()
        send(("error", rank, "own", text + "\n" + traceback.format_exc(limit=-3)))


def worker_main() -> None:
    """The launcher (`python -m hw.worker`): fetch the task, fork the ranks, report exits.

    It imports torch and the task once and forks every rank from there: N processes
    importing torch side by side cost several times one import on a small host (the
    import is I/O bound). Nothing in the launcher has started a thread or an OpenMP
    pool when it forks, so the children start clean.
    """
    addr = (os.environ["RINGSIM_SPAWN_HOST"], int(os.environ["RINGSIM_SPAWN_PORT"]))
    key = bytes.fromhex(os.environ["RINGSIM_SPAWN_KEY"])
    conn = Client(addr, authkey=key)
    conn.send(("launcher", -1))
    fn, args, n_gpus, port, backend, timeout_s = _loads(conn.recv_bytes())
    ranks: dict[int, int] = {}
    for rank in range(n_gpus):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                conn.close()
                own = Client(addr, authkey=key)
                own.send(("rank", rank))
                _rank_main(rank, n_gpus, port, backend, timeout_s, own.send, fn, args)
                own.close()
            except BaseException:
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                # no interpreter teardown: a broken process group can hang in it
                os._exit(code)
        ranks[pid] = rank
        conn.send(("started", rank, pid))
    while ranks:
        pid, status = os.wait()
        conn.send(("exit", ranks.pop(pid), os.waitstatus_to_exitcode(status)))
    conn.close()


def spawn(fn: Callable[..., Any], n_gpus: int, *, args: tuple = (), backend: str = "gloo",
          timeout_s: float = 60.0, on_progress: Callable[[int, Any], None] | None = None,
          env: dict[str, str] | None = None) -> list[Any]:
    """Run `fn(ctx, *args)` on `n_gpus` fresh processes; their return values, by rank.

    The ranks are forked by a launcher process started for the purpose (`python -m
    hw.worker`), never from the caller, so the caller's main module is not re-imported
    (no `if __name__ == "__main__"` needed) and its threads do not leak into the ranks.
    `fn` must be importable by name. Raises RankFailure naming the rank that failed
    first.
    """
    if getattr(fn, "__module__", "__main__") == "__main__":
        raise ValueError(f"spawn needs a function the ranks can import by name; {fn!r} is "
                         "defined in the __main__ script (move it to a module)")
    for _ in range(PORT_TRIES):
        heard, log = _run(fn, args, n_gpus, backend, timeout_s, on_progress, env, free_port())
        if not heard.port_taken():
            break
        os.unlink(log.name)
    else:
        heard.errors[0] = ("own", heard.errors[0][1])       # taken every time: the failure
    if heard.errors:
        failure = _failure(heard.errors, n_gpus)
        failure.log_path = log.name
        failure.details += f"\nthe ranks' own standard error: {log.name}"
        raise failure
    _replay(log.name)
    return [heard.results[r] for r in range(n_gpus)]


PORT_TAKEN = "port"
"""The kind of error rank 0 reports when its store's port was taken between `free_port`
choosing it and the store listening on it (by any process on the host: another run, tests
side by side): nothing of the run's function has run, and `spawn` starts it again."""
PORT_TRIES = 3
"""Runs `spawn` starts, each on a port chosen anew, before a taken port is the failure."""


def _run(fn: Callable[..., Any], args: tuple, n_gpus: int, backend: str, timeout_s: float,
         on_progress: Callable[[int, Any], None] | None, env: dict[str, str] | None,
         port: int) -> tuple["_Heard", Any]:
    """One run of `spawn`, its store on `port`: what was heard of the ranks, and the file
    their standard error went to (closed)."""
    key = secrets.token_bytes(16)
    listener = Listener(("127.0.0.1", 0), authkey=key)
    inbox = _serve(listener, n_gpus, _dumps((fn, args, n_gpus, port, backend, timeout_s)))
    log = tempfile.NamedTemporaryFile(prefix="ringsim-ranks-", suffix=".log", delete=False)
    launcher = _start_launcher(listener.address[1], key, log, env)
    heard = _Heard(n_gpus, on_progress)
    try:
        _wait_for_ranks(heard, inbox, launcher, timeout_s)
    finally:
        _reap(launcher, [pid for r, pid in heard.pids.items() if r not in heard.exited])
        listener.close()
        log.close()
    return heard, log


def _serve(listener: Listener, n_gpus: int, task: bytes) -> queue_mod.Queue:
    """Accept the launcher and the ranks as they connect (on threads), hand the launcher
    its task, and put every message any of them sends in the queue returned."""
    inbox: queue_mod.Queue = queue_mod.Queue()

    def serve(conn) -> None:
        try:
            role, _rank = conn.recv()
            if role == "launcher":
                conn.send_bytes(task)
            while True:
                inbox.put(conn.recv())
        except (EOFError, OSError):
            pass

    def accept() -> None:
        for _ in range(n_gpus + 1):
            try:
                conn = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return inbox


def _start_launcher(port: int, key: bytes, log: Any, env: dict[str, str] | None) -> subprocess.Popen:
    """The launcher process (`python -m hw.worker`), told where to fetch its task, its
    standard error (and its ranks') into `log`."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.Popen(
        [sys.executable, "-m", "hw.worker"], stdin=subprocess.DEVNULL, stderr=log,
        env={**os.environ, "RINGSIM_SPAWN_HOST": "127.0.0.1",
             "RINGSIM_SPAWN_PORT": str(port), "RINGSIM_SPAWN_KEY": key.hex(),
             # each rank sets its own thread count; this only keeps the import lean
             "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
             "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
             **(env or {})})


@dataclass
class _Heard:
    """What the parent has heard of each rank of a run: its process id, its exit code,
    its result or its error."""

    n_gpus: int
    on_progress: Callable[[int, Any], None] | None
    pids: dict[int, int] = field(default_factory=dict)
    exited: dict[int, int] = field(default_factory=dict)
    results: dict[int, Any] = field(default_factory=dict)
    errors: dict[int, tuple[str, str]] = field(default_factory=dict)
    """rank -> (own | peer | died, text), in arrival order."""

    def settled(self, r: int) -> bool:
        return r in self.results or r in self.errors

    def unsettled(self) -> list[int]:
        return [r for r in range(self.n_gpus) if not self.settled(r)]

    def port_taken(self) -> bool:
        """Whether rank 0 found its store's port taken (PORT_TAKEN)."""
        return self.errors.get(0, ("",))[0] == PORT_TAKEN

    def handle(self, msg: tuple) -> None:
        kind, rank, *rest = msg
        if kind == "ok":
            self.results[rank] = _loads(rest[0])
        elif kind == "error":
            self.errors[rank] = (rest[0], rest[1])
        elif kind == "progress" and self.on_progress is not None:
            self.on_progress(rank, rest[0])
        elif kind == "started":
            self.pids[rank] = rest[0]
        elif kind == "exit":
            self.exited[rank] = rest[0]


def _wait_for_ranks(heard: _Heard, inbox: queue_mod.Queue, launcher: subprocess.Popen, timeout_s: float) -> None:
    """Take the ranks' messages until every rank has a result or an error: a rank whose
    process exited without one (or all of them, when the launcher did) died, and ranks
    still running `timeout_s` after the first error are given up on."""
    give_up_at: float | None = None
    while heard.unsettled():
        try:
            heard.handle(inbox.get(timeout=0.2))
        except queue_mod.Empty:
            pass
        if heard.port_taken():
            return                   # the others wait for a store that is not there: run again
        gone = [r for r in heard.unsettled() if r in heard.exited]
        if launcher.poll() is not None:
            gone = heard.unsettled()
        if gone:
            # a rank that died: take what it may have said before it went
            _drain(inbox, heard.handle, wait_s=0.5)
            for r in gone:
                if not heard.settled(r):
                    code = heard.exited.get(r, launcher.returncode)
                    how = (f"killed by signal {-code}" if code is not None and code < 0
                           else f"exit code {code}")
                    heard.errors[r] = ("died", f"the process exited without a result ({how})")
        if heard.errors and give_up_at is None:
            give_up_at = time.monotonic() + timeout_s
        if give_up_at is not None and time.monotonic() > give_up_at:
            for r in heard.unsettled():
                heard.errors[r] = ("peer", f"still running {timeout_s:.0f} s after another rank failed")


def _replay(path: str) -> None:
    """A successful run's ranks' standard error, on this process's, and the log gone."""
    with open(path, "rb") as f:
        text = f.read()
    os.unlink(path)
    if text:
        sys.stderr.write(text.decode(errors="replace"))
        sys.stderr.flush()


def _reap(launcher: subprocess.Popen, rank_pids: list[int]) -> None:
    """Let the launcher finish; stop ranks still running, and the launcher if it lingers."""
    try:
        launcher.wait(timeout=10.0)
        return
    except subprocess.TimeoutExpired:
        pass
    for pid in rank_pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        launcher.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        launcher.kill()
        launcher.wait()


def _drain(inbox: queue_mod.Queue, handle: Callable[[tuple], None], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            handle(inbox.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue_mod.Empty:
            return


def _failure(errors: dict[int, tuple[str, str]], n_gpus: int) -> RankFailure:
    order = list(errors)
    for want in ("own", "died", "peer"):
        culprits = [r for r in order if errors[r][0] == want]
        if culprits:
            r = culprits[0]
            break
    kind, text = errors[r]
    first_line = text.strip().splitlines()[0] if text.strip() else kind
    others = [x for x in range(n_gpus) if x != r]
    tail = (f"; rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} stopped"
            if others else "")
    details = "\n".join(f"rank {x} ({errors[x][0]}): {errors[x][1].strip()}" for x in order)
    if kind == "peer":
        return RankFailure(r, f"rank {r} lost its peers: {first_line}{tail}", details)
    return RankFailure(r, f"rank {r} failed: {first_line}{tail}", details)


# ---- running a configuration ----------------------------------------------------------
