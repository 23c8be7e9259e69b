"""Starting the ranks of a run on this host, and telling which one failed.

`spawn` starts one process per rank (forked from a fresh launcher process), joins them
into a process group over loopback TCP with the run's timeout, runs a function in each
and collects what each returns or raises. When a rank
raises or dies, the others lose their peer: their transfers fail within the timeout
(`hw.comm.PeerFailure`) and they stop; any still running after the timeout are
terminated. The failing rank is the first whose error was its own (not a lost peer),
else the first that died without a word; `RankFailure` names it.

`run_local` is the in-process API of the issue: full tensors in, output, gradients and
the measured trace out. `run_config` runs a `RunConfig` with inputs made from its seed
(the `ringsim hw run` command); `run_configs` runs many, one process group per world
size.
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
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

from sim.config import Workload
from sim.errors import RingsimError
from sim.trace import Trace

# Messages from a rank to the parent, over a local authenticated connection: ("ok",
# rank, payload bytes), ("error", rank, "own" | "peer", text), ("progress", rank, object)
# for long runs that report as they go.


class RankFailure(RingsimError):
    """A rank of a run raised or died; `rank` is the one that failed first.

    The message is one line; `details` has what every rank reported (with the failing
    rank's traceback), for a programming error that needs more than a line.
    """

    def __init__(self, rank: int, message: str, details: str = ""):
        super().__init__(message)
        self.rank = rank
        self.details = details


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dumps(obj: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _loads(data: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(data), weights_only=False)


@dataclass
class RankContext:
    """What a function run by `spawn` gets: its place, its group, a way to report."""

    rank: int
    world: int
    backend: str
    group: Any
    """The process group (None when world is 1)."""
    control: Any
    """A gloo group for barriers and small objects (the main group on gloo)."""
    store: Any
    report: Callable[[Any], None]
    """Send a progress object to the parent as it happens."""

    def barrier(self) -> None:
        import torch.distributed as dist

        if self.world > 1:
            dist.barrier(group=self.control)


def join_group(backend: str, *, rank: int, world: int, local_rank: int, timeout_s: float,
               store: Any = None) -> tuple[Any, Any]:
    """Join the ring's process group; (group, control group for barriers and objects).

    With `store`, rendezvous there; else through torchrun's environment (env://). On
    NCCL the rank's GPU is chosen first (`local_rank`, one GPU per local rank; see
    `hw.runner.gpu_for_rank`), and a gloo group with the same timeout is added for
    CPU-side barriers, which align clocks without waiting on the GPU. NCCL's own timeout
    (its watchdog's, which kills the process) is set longer than `timeout_s`, so that
    the rank gives up first and names the peer it lost (`hw.timing.CudaClock`).
    """
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    pg_timeout = timeout
    if backend == "nccl":
        from hw.runner import gpu_for_rank

        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        torch.cuda.set_device(gpu_for_rank(local_rank, local_world, torch.cuda.device_count()))
        pg_timeout = timedelta(seconds=timeout_s + NCCL_WATCHDOG_GRACE_S)
    if store is not None:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=pg_timeout)
    else:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
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
        import torch.distributed as dist

        if dist.is_initialized() and "nccl" in str(dist.get_backend()).lower():
            dist.distributed_c10d._abort_process_group()
    except Exception:
        pass


def _rank_main(rank: int, world: int, port: int, backend: str, timeout_s: float,
               send: Callable[[tuple], None], fn: Callable[..., Any], args: tuple) -> None:
    """The life of one rank: join the group, run `fn`, say how it went."""
    import torch.distributed as dist

    from hw.comm import PeerFailure, note_failure

    store = None
    try:
        group = control = None
        if world > 1:
            store = dist.TCPStore("127.0.0.1", port, world, rank == 0,
                                  timeout=timedelta(seconds=timeout_s))
            group, control = join_group(backend, rank=rank, world=world, local_rank=rank,
                                        timeout_s=timeout_s, store=store)
        ctx = RankContext(rank, world, backend, group, control, store,
                          lambda obj: send(("progress", rank, obj)))
        payload = fn(ctx, *args)
        send(("ok", rank, _dumps(payload)))
        if world > 1:
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
    from multiprocessing.connection import Client

    addr = (os.environ["RINGSIM_SPAWN_HOST"], int(os.environ["RINGSIM_SPAWN_PORT"]))
    key = bytes.fromhex(os.environ["RINGSIM_SPAWN_KEY"])
    conn = Client(addr, authkey=key)
    conn.send(("launcher", -1))
    fn, args, world, port, backend, timeout_s = _loads(conn.recv_bytes())
    import torch.distributed  # noqa: F401  (imported once, here, for every rank)

    ranks: dict[int, int] = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                conn.close()
                own = Client(addr, authkey=key)
                own.send(("rank", rank))
                _rank_main(rank, world, port, backend, timeout_s, own.send, fn, args)
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


def spawn(fn: Callable[..., Any], world: int, *, args: tuple = (), backend: str = "gloo",
          timeout_s: float = 60.0, on_progress: Callable[[int, Any], None] | None = None,
          env: dict[str, str] | None = None) -> list[Any]:
    """Run `fn(ctx, *args)` on `world` fresh processes; their return values, by rank.

    The ranks are forked by a launcher process started for the purpose (`python -m
    hw.worker`), never from the caller, so the caller's main module is not re-imported
    (no `if __name__ == "__main__"` needed) and its threads do not leak into the ranks.
    `fn` must be importable by name. Raises RankFailure naming the rank that failed
    first.
    """
    from multiprocessing.connection import Listener

    if getattr(fn, "__module__", "__main__") == "__main__":
        raise ValueError(f"spawn needs a function the ranks can import by name; {fn!r} is "
                         "defined in the __main__ script (move it to a module)")
    key = secrets.token_bytes(16)
    listener = Listener(("127.0.0.1", 0), authkey=key)
    task = _dumps((fn, args, world, free_port(), backend, timeout_s))
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
        for _ in range(world + 1):
            try:
                conn = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    launcher = subprocess.Popen(
        [sys.executable, "-m", "hw.worker"], stdin=subprocess.DEVNULL,
        env={**os.environ, "RINGSIM_SPAWN_HOST": "127.0.0.1",
             "RINGSIM_SPAWN_PORT": str(listener.address[1]), "RINGSIM_SPAWN_KEY": key.hex(),
             # each rank sets its own thread count; this only keeps the import lean
             "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
             "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
             **(env or {})})
    pids: dict[int, int] = {}
    exited: dict[int, int] = {}
    results: dict[int, Any] = {}
    errors: dict[int, tuple[str, str]] = {}   # rank -> (own | peer | died, text), in arrival order
    give_up_at: float | None = None

    def settled(r: int) -> bool:
        return r in results or r in errors

    def handle(msg: tuple) -> None:
        kind, rank, *rest = msg
        if kind == "ok":
            results[rank] = _loads(rest[0])
        elif kind == "error":
            errors[rank] = (rest[0], rest[1])
        elif kind == "progress" and on_progress is not None:
            on_progress(rank, rest[0])
        elif kind == "started":
            pids[rank] = rest[0]
        elif kind == "exit":
            exited[rank] = rest[0]

    try:
        while not all(settled(r) for r in range(world)):
            try:
                handle(inbox.get(timeout=0.2))
            except queue_mod.Empty:
                pass
            gone = [r for r in range(world) if not settled(r) and r in exited]
            if launcher.poll() is not None:
                gone = [r for r in range(world) if not settled(r)]
            if gone:
                # a rank that died: take what it may have said before it went
                _drain(inbox, handle, wait_s=0.5)
                for r in gone:
                    if not settled(r):
                        code = exited.get(r, launcher.returncode)
                        how = (f"killed by signal {-code}" if code is not None and code < 0
                               else f"exit code {code}")
                        errors[r] = ("died", f"the process exited without a result ({how})")
            if errors and give_up_at is None:
                give_up_at = time.monotonic() + timeout_s
            if give_up_at is not None and time.monotonic() > give_up_at:
                for r in range(world):
                    if not settled(r):
                        errors[r] = ("peer", f"still running {timeout_s:.0f} s after another rank failed")
    finally:
        _reap(launcher, [pid for r, pid in pids.items() if r not in exited])
        listener.close()
    if errors:
        raise _failure(errors, world)
    return [results[r] for r in range(world)]


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


def _failure(errors: dict[int, tuple[str, str]], world: int) -> RankFailure:
    order = list(errors)
    for want in ("own", "died", "peer"):
        culprits = [r for r in order if errors[r][0] == want]
        if culprits:
            r = culprits[0]
            break
    kind, text = errors[r]
    first_line = text.strip().splitlines()[0] if text.strip() else kind
    others = [x for x in range(world) if x != r]
    tail = (f"; rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} stopped"
            if others else "")
    details = "\n".join(f"rank {x} ({errors[x][0]}): {errors[x][1].strip()}" for x in order)
    if kind == "peer":
        return RankFailure(r, f"rank {r} lost its peers: {first_line}{tail}", details)
    return RankFailure(r, f"rank {r} failed: {first_line}{tail}", details)


# ---- running a configuration ----------------------------------------------------------

def _run_worker(ctx: RankContext, cfg, inputs, keep_outputs: bool):
    from hw.runner import pick_device, run_rank

    return run_rank(cfg, rank=ctx.rank, group=ctx.group, inputs=inputs,
                    device=pick_device(cfg.device, ctx.rank, ctx.world), barrier=ctx.barrier,
                    store=ctx.store, ranks_on_host=ctx.world, keep_outputs=keep_outputs)


def run_config(cfg, inputs=None, *, keep_outputs: bool = False):
    """Run `cfg` on `cfg.world_size` local processes; the ranks' `RankResult`s and traces."""
    from hw.runner import build_traces

    results = spawn(_run_worker, cfg.world_size, args=(cfg, inputs, keep_outputs),
                    backend=cfg.resolved_backend, timeout_s=cfg.timeout_s)
    return results, build_traces(cfg, results)


def _run_many_worker(ctx: RankContext, cfgs: list, report: bool):
    out = []
    for i, cfg in enumerate(cfgs):
        res = _run_worker(ctx, cfg, None, False)
        if report and ctx.rank == 0:
            ctx.report(i)
        out.append(res)
    return out


def run_configs(cfgs: list, *, on_done: Callable[[int], None] | None = None) -> list:
    """Run several configurations, one process group per world size and backend.

    Start-up (seconds per group) is paid once per group instead of once per run; the
    runs of a group follow one another in the order given. Returns (results, traces)
    for each configuration, in the order given; `on_done(i)` is called as configuration
    i completes.
    """
    from hw.runner import build_traces

    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault((cfg.world_size, cfg.resolved_backend, cfg.device), []).append(i)
    out: list = [None] * len(cfgs)
    for (world, backend, _device), idx in groups.items():
        mine = [cfgs[i] for i in idx]
        per_rank = spawn(_run_many_worker, world, args=(mine, on_done is not None), backend=backend,
                         timeout_s=max(c.timeout_s for c in mine),
                         on_progress=(lambda _r, j: on_done(idx[j])) if on_done else None)
        for j, i in enumerate(idx):
            results = [rank_runs[j] for rank_runs in per_rank]
            out[i] = (results, build_traces(cfgs[i], results))
    return out


@dataclass
class RunResult:
    """Output of `run_local`: full tensors in the original token order, and the traces."""

    out: Any
    trace: Trace
    """The measured trace of the last measured iteration."""
    traces: list[Trace] = field(default_factory=list)
    """One measured trace per measured iteration."""
    dq: Any = None
    dk: Any = None
    dv: Any = None


def _dtype_name(t) -> str:
    import torch

    names = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
    if t.dtype not in names:
        raise RingsimError(f"inputs must be fp32, bf16 or fp16, got {t.dtype}")
    return names[t.dtype]


def run_local(q, k, v, *, world_size: int, layout: str, causal: bool, backend: str = "gloo",
              dout=None, warmup: int = 0, repeats: int = 1, timeout_s: float = 60.0,
              block_impl: str = "auto", threads_per_rank: int | None = None) -> RunResult:
    """Ring attention of full tensors on `world_size` local processes.

    q: (batch, seq, heads, head_dim); k, v: (batch, seq, kv_heads, head_dim); dout like
    q, or None for the forward alone. Shards by `layout`, runs the ring, and returns the
    output (and dq, dk, dv when dout is given) in the original token order with the
    measured trace.
    """
    from hw.config import RunConfig
    from hw.layouts import unshard
    from hw.runner import Inputs

    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise RingsimError("q must be (batch, seq, heads, head_dim) and k, v (batch, seq, kv_heads, head_dim)")
    b, s, h, d = q.shape
    if k.shape[0] != b or k.shape[1] != s or k.shape[3] != d:
        raise RingsimError(f"k/v shape {tuple(k.shape)} does not match q {tuple(q.shape)}")
    if dout is not None and dout.shape != q.shape:
        raise RingsimError(f"dout shape {tuple(dout.shape)} must equal q's {tuple(q.shape)}")
    dtype = _dtype_name(q)
    if k.dtype != q.dtype or v.dtype != q.dtype or (dout is not None and dout.dtype != q.dtype):
        raise RingsimError("q, k, v and dout must share one dtype")
    device = "cuda" if q.is_cuda else "cpu"
    workload = Workload(batch=b, seq=s, heads=h, kv_heads=k.shape[2], head_dim=d, dtype=dtype,
                        causal=causal, pass_="fwd" if dout is None else "fwdbwd")
    cfg = RunConfig(workload=workload, world_size=world_size, layout=layout, device=device,
                    backend=backend if device == "cpu" else (None if backend == "gloo" else backend),
                    warmup=warmup, repeats=repeats, timeout_s=timeout_s, block_impl=block_impl,
                    threads_per_rank=threads_per_rank)
    inputs = Inputs(*(x.detach().cpu() if x is not None else None for x in (q, k, v, dout)))
    if world_size == 1:
        results = [_run_in_process(cfg, inputs)]
        from hw.runner import build_traces
        traces = build_traces(cfg, results)
    else:
        results, traces = run_config(cfg, inputs, keep_outputs=True)

    def full(name: str):
        parts = [getattr(r, name) for r in results]
        if parts[0] is None:
            return None
        return unshard(parts, layout).to(q.device)

    return RunResult(out=full("out"), trace=traces[-1], traces=traces, dq=full("dq"),
                     dk=full("dk"), dv=full("dv"))


def _run_in_process(cfg, inputs):
    """World size 1: no processes, no group; this process's own thread count."""
    import torch

    from hw.runner import run_rank

    threads = torch.get_num_threads()
    device = torch.device("cuda", torch.cuda.current_device()) if cfg.device == "cuda" else torch.device("cpu")
    try:
        return run_rank(cfg, rank=0, group=None, inputs=inputs, device=device,
                        barrier=lambda: None, keep_outputs=True)
    finally:
        torch.set_num_threads(threads)
