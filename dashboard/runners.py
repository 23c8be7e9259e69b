"""Processes that stay up as long as the server, for the comparisons' large runs.

A comparison's large runs are simulated in processes of their own, side by side on the
machine's cores (dashboard/side_by_side.py). Started afresh for each comparison, every such
process paid again for an interpreter and the simulator's imports (about half a second)
and for a first run that faults all of its memory in (a 1,024-GPU all-gather of 8 head
groups ran 2.9 s the first time in a process, 2.2 s the next: sim.engine.host_memory). The
runners are those processes kept: `ringsim dashboard` starts one per core before it serves
(`start`), each waits on a Unix socket of its own in a folder only its user may open, and a
comparison, in whichever server process or background job it runs, hands them its runs
(`Runners.run`) and hears each run's summary as it ends. A runner serves one comparison
at a time, its runs one after another; a comparison whose job is stopped (the page asked
for another) lets its runners go once their run in hand ends. They run below the server's
priority (side_by_side.WORKER_NICE) and end when the last server process has ended, however
it ended, taking their folder with them: each reads a pipe whose other end only the server's
processes hold (dashboard/runner.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import deque
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any, Callable, Sequence

KEY_FILE = "key"
"""The file in the runners' folder holding the key a comparison proves it knows
(multiprocessing.connection's authentication), readable by the user alone."""


class Runners:
    """The runners' sockets in `folder` (with their key), started by this process or one
    it was forked from."""

    def __init__(self, folder: Path, count: int, processes: Sequence[subprocess.Popen] = ()):
        self.folder = Path(folder)
        self.addresses = [str(self.folder / f"runner-{i}") for i in range(count)]
        self.processes = list(processes)
        self.owner = os.getpid()
        """The process that started them: the only one that stops them (a server process
        forked from it inherits its exit hooks)."""

    def key(self) -> bytes:
        return (self.folder / KEY_FILE).read_bytes()

    def run(self, jobs: Sequence[Any], order: Sequence[int], most: int,
            done: Callable[[int, Any], None]) -> list[int]:
        """Simulate each of `jobs` ((scenario, profile, what): dashboard.side_by_side.simulated's
        arguments) on up to `most` runners, taking them in `order` (largest first: one runner takes
        them from the other end where there are several), and call done(position,
        summary) as each ends; the first error a run raised is raised here once no run is in
        hand. Returns the positions of the jobs no runner could take (a runner gone): the caller
        makes those itself. A runner busy with another comparison joins in when it is free;
        whatever takes up the last runs, this returns as soon as every run has ended."""
        waiting = deque(order)
        undone: list[int] = []
        errors: list[BaseException] = []
        state = {"in_hand": 0, "serving": min(most, len(self.addresses))}
        changed = threading.Condition()
        key = self.key()

        def finished() -> bool:
            return state["in_hand"] == 0 and (not waiting or errors or state["serving"] == 0)

        def serve_from(address: str, smallest_first: bool) -> None:
            try:
                conn = Client(address, family="AF_UNIX", authkey=key)
            except (OSError, EOFError):
                conn = None                        # gone: the others, or the caller, make its share
            try:
                while conn is not None:
                    with changed:
                        if not waiting or errors:
                            return
                        i = waiting.pop() if smallest_first else waiting.popleft()
                        state["in_hand"] += 1
                    try:
                        conn.send(jobs[i])
                        ok, value = conn.recv()
                    except (OSError, EOFError):     # the runner ended mid-run
                        with changed:
                            undone.append(i)
                            state["in_hand"] -= 1
                            changed.notify_all()
                        return
                    except Exception as e:          # noqa: BLE001  (an answer that does not unpickle)
                        ok, value = False, e
                    try:
                        if ok:
                            done(i, value)
                        else:
                            errors.append(value)
                    except BaseException as e:      # noqa: BLE001  (the caller's own error, raised there)
                        errors.append(e)
                    with changed:
                        state["in_hand"] -= 1
                        changed.notify_all()
            finally:
                if conn is not None:
                    conn.close()
                with changed:
                    state["serving"] -= 1
                    changed.notify_all()

        for k, address in enumerate(self.addresses[:state["serving"]]):
            # the first runner takes the smallest runs first, the others the largest: the first
            # rows show within a second while the largest runs start at once, and the runners
            # meet in the middle. Daemon: one still waiting for a runner busy with another
            # comparison ends with the process
            threading.Thread(target=serve_from, args=(address, k == 0 and state["serving"] > 1),
                             daemon=True).start()
        with changed:
            changed.wait_for(finished)
            if errors:
                raise errors[0]
            return undone + list(waiting)

    def close(self) -> None:
        """Stop the runners and remove their folder, in the process that started them (in
        another, nothing)."""
        if os.getpid() != self.owner:
            return
        for p in self.processes:
            if p.poll() is None:
                p.terminate()
        for p in self.processes:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


BACKLOG = 64
"""Comparisons that may wait for a busy runner at once."""

RUNNERS: Runners | None = None
"""The runners of this server (`start`), which its forked processes inherit; None: a
comparison starts its processes itself."""


def start(count: int) -> Runners:
    """Start `count` runners and make them this process's (RUNNERS): a folder of their own
    (mode 0700) with a fresh key, a process each, listening before this returns."""
    global RUNNERS
    folder = Path(tempfile.mkdtemp(prefix="ringsim-runners-"))
    key = folder / KEY_FILE
    key.write_bytes(secrets.token_bytes(32))
    key.chmod(0o600)
    # each runner reads the other end of this pipe until it closes: when the server's last
    # process ends (they all hold `alive`, inherited by fork)
    watched, alive = os.pipe()
    ready, said_ready = os.pipe()
    runners = Runners(folder, count)
    try:
        for address in runners.addresses:
            runners.processes.append(subprocess.Popen(
                [sys.executable, "-m", "dashboard.runner", "--address", address, "--folder", str(folder),
                 "--watch-fd", str(watched), "--ready-fd", str(said_ready)],
                pass_fds=(watched, said_ready), stdin=subprocess.DEVNULL, cwd=os.getcwd(),
                env=os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [_root(), os.environ.get("PYTHONPATH")]))}))
        os.close(said_ready)
        said_ready = -1
        for _ in range(count):                # each writes a byte once it listens
            if not os.read(ready, 1):
                raise OSError("a comparison runner ended as it started")
    except BaseException:
        runners.close()
        raise
    finally:
        os.close(watched)
        os.close(ready)
        if said_ready >= 0:
            os.close(said_ready)
    RUNNERS = runners
    return runners


def stop() -> None:
    """Stop this process's runners (RUNNERS), if it has any."""
    global RUNNERS
    if RUNNERS is not None:
        RUNNERS.close()
        RUNNERS = None


def _root() -> str:
    """The folder this package is imported from (a runner imports the same code)."""
    return str(Path(__file__).resolve().parent.parent)
