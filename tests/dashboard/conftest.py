"""Independent references for the dashboard tests: token ownership from the layout
definitions of docs/design.md (fact 8) and a measured-looking trace built by hand."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from dashboard.app import create_app
from dashboard.client import CallbackClient
from dashboard.state import CONTROL_IDS, defaults
from sim.engine.play import simulate
from sim.scenario.config import Scenario, Workload
from sim.schemes import DEFAULT as DEFAULT_SCHEME
from sim.schemes import get as get_scheme
from sim.trace.format import Span, Trace
from tests.reference import token_owner as owner  # noqa: F401  (the figure tests use it)
from tests.sim.reference import run_by


def chunk_tokens(layout: str, seq: int, n: int, chunk: int) -> np.ndarray:
    """The tokens of one chunk id as the trace numbers them."""
    if layout == "striped":
        return np.arange(chunk, seq, n)
    size = seq // (2 * n if layout == "zigzag" else n)
    return np.arange(chunk * size, (chunk + 1) * size)


def small_scenario(**kw) -> Scenario:
    """A small scenario; the scheme's own settings given by their fields' names."""
    w = dict(seq=kw.pop("seq", 4096), heads=8, kv_heads=2, head_dim=64, dtype="bf16",
             causal=kw.pop("causal", True), pass_=kw.pop("pass_", "fwd"))
    own = fields(get_scheme(kw.get("scheme", DEFAULT_SCHEME)).settings_type)
    settings = {f.name: kw.pop(f.name) for f in own if f.name in kw}
    return Scenario(workload=Workload(**w), n_gpus=kw.pop("n_gpus", 4),
                    **run_by(kw.pop("scheme", DEFAULT_SCHEME), **settings), **kw)


def measured_from(sim: Trace, factor: float, offset_s: float = 0.5, noise: float = 0.0,
                  seed: int = 0) -> Trace:
    """A 'measured' trace: the simulated one, slower by `factor`, started at `offset_s`."""
    rng = np.random.default_rng(seed)
    t0 = min(s.start_s for s in sim.spans)
    spans = []
    for s in sim.spans:
        jitter = 1.0 + noise * rng.standard_normal() if noise else 1.0
        start = offset_s + (s.start_s - t0) * factor
        end = start + (s.end_s - s.start_s) * factor * max(jitter, 0.1)
        spans.append(Span(s.rank, s.stream, s.kind, s.step, start, end, s.flops, s.bytes,
                          s.q_chunks, s.kv_chunks, s.peer))
    return Trace("measured", sim.n_gpus, spans, dict(sim.config),
                 {"kind": "measured", "device": "cpu"}, {"runs": 1})


@pytest.fixture(scope="session")
def small_trace() -> Trace:
    return simulate(small_scenario(layout="zigzag"))


@pytest.fixture(scope="module")
def client() -> CallbackClient:
    """The app's callbacks, called as the page calls them (one app per test module)."""
    return CallbackClient.for_app(create_app())


def controls(**changes) -> dict:
    """Every control's value as the page sends it: the defaults with `changes`."""
    vals = defaults() | changes
    return {f"{cid}.value": vals[cid] for cid in CONTROL_IDS}
