"""Work side by side on the host's cores (sim.engine.threads)."""

import threading
import time

import pytest

from sim.engine import threads


def test_large_work_runs_on_threads_and_keeps_the_order_of_its_items(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 2)
    seen = set()

    def slow(i):
        seen.add(threading.get_ident())
        time.sleep(0.02 * (3 - i))       # the first item finishes last
        return i * i

    assert threads.each(slow, range(3), size=threads.WORTH_THREADS) == [0, 1, 4]
    assert len(seen) == 2


def test_small_work_or_one_core_runs_in_order_on_the_calling_thread(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 2)
    order = []

    def note(i):
        order.append((i, threading.get_ident()))
        return i

    assert threads.each(note, [3, 1, 2], size=threads.WORTH_THREADS - 1) == [3, 1, 2]
    monkeypatch.setattr(threads, "cores", lambda: 1)
    assert threads.each(note, [5], size=threads.WORTH_THREADS) == [5]
    me = threading.get_ident()
    assert order == [(3, me), (1, me), (2, me), (5, me)]


def test_an_error_in_a_piece_of_work_is_raised_to_the_caller(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 2)

    def fail(i):
        if i == 1:
            raise ValueError("piece 1")
        return i

    with pytest.raises(ValueError, match="piece 1"):
        threads.each(fail, range(4), size=threads.WORTH_THREADS)
