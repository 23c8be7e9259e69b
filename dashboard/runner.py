"""A comparison runner: the process `ringsim dashboard` keeps for a comparison's large runs
(dashboard/runners.py starts it and hands it runs)."""

from __future__ import annotations

import argparse
import os
import shutil
import threading
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Sequence

from dashboard.runners import BACKLOG, KEY_FILE
from dashboard.side_by_side import lower_priority, simulated


def _serve(address: str, folder: str, watched: int, ready: int) -> None:
    """A runner: simulate the runs a comparison sends, one after another, sending back each
    one's summary or the error it raised; end when `watched` (a pipe's end) closes."""
    def end_with_server() -> None:
        while os.read(watched, 1):
            pass
        shutil.rmtree(folder, ignore_errors=True)      # a server killed outright leaves nothing behind
        os._exit(0)

    threading.Thread(target=end_with_server, daemon=True).start()
    lower_priority()
    key = (Path(folder) / KEY_FILE).read_bytes()
    with Listener(address, family="AF_UNIX", backlog=BACKLOG, authkey=key) as listener:
        os.write(ready, b"+")
        os.close(ready)
        while True:
            try:
                conn = listener.accept()
            except (OSError, EOFError, ValueError):    # a client that failed the key or left
                continue
            with conn:
                while True:
                    try:
                        job = conn.recv()
                    except (OSError, EOFError):
                        break                          # the comparison is done, or stopped
                    try:
                        answer = (True, simulated(*job))
                    except Exception as e:             # noqa: BLE001  (sent to the comparison, raised there)
                        answer = (False, e)
                    try:
                        conn.send(answer)
                    except (OSError, EOFError):
                        break
                    except Exception as e:             # noqa: BLE001  (an error that does not pickle)
                        conn.send((False, RuntimeError(f"{type(e).__name__}: {e}")))


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m dashboard.runner",
                                description="a comparison runner (started by `ringsim dashboard`)")
    p.add_argument("--address", required=True)
    p.add_argument("--folder", required=True)
    p.add_argument("--watch-fd", type=int, required=True)
    p.add_argument("--ready-fd", type=int, required=True)
    a = p.parse_args(argv)
    _serve(a.address, a.folder, a.watch_fd, a.ready_fd)


if __name__ == "__main__":
    main()
