"""Each library's ring step played by threads of one process (hw.impl_steps through
hw.inprocess.play_ring), on CPU, against torch's attention in float64."""

from __future__ import annotations

import itertools

import pytest
import torch

from hw import impl_steps
from hw.blocks import CpuFlashOps
from hw.inprocess import play_ring
from sim.errors import RingsimError
from tests.hw.conftest import max_err, reference_attention

CASES = [(lib, n, layout, causal)
         for lib in impl_steps.ring_libraries()
         for n, layout, causal in itertools.product((1, 3, 4), impl_steps.HW_LAYOUTS, (True, False))
         if impl_steps.runs(impl_steps.ring_implementation(lib), layout, causal)]


def _inputs(seq: int, kv_heads: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q, dout = (torch.randn(2, seq, 4, 16, generator=g) for _ in range(2))
    k, v = (torch.randn(2, seq, kv_heads, 16, generator=g) for _ in range(2))
    return q, k, v, dout


def test_every_library_with_a_ring_is_played():
    assert set(impl_steps.ring_libraries()) == {"ideal", "te", "rfa", "torch", "usp"}
    # every merge the ring's implementations name has its in-process version
    assert {impl_steps.ring_implementation(lib).merge or "fused" for lib in impl_steps.ring_libraries()} \
        <= set(impl_steps.MERGERS)


@pytest.mark.parametrize("library,n_gpus,layout,causal", CASES)
def test_library_ring_matches_fp64_attention(library, n_gpus, layout, causal):
    q, k, v, dout = _inputs(24, 2, seed=n_gpus)
    got = play_ring(q, k, v, dout, n_gpus=n_gpus, layout=layout, causal=causal, ops=CpuFlashOps(),
                    library=library)
    want = reference_attention(q, k, v, causal, dout)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.shape == b.shape and a.dtype == q.dtype, name
        assert max_err(a, b) < (1e-5 if name == "out" else 1e-4), name


def test_timed_play_gives_one_span_per_computed_step():
    q, k, v, dout = _inputs(16, 2, seed=1)
    _, spans = play_ring(q, k, v, dout, n_gpus=4, layout="zigzag", causal=True, ops=CpuFlashOps(),
                         library="te", timed=True)
    # zigzag computes on every block: 4 ranks x 4 steps, forward and backward
    assert sorted((s.kind, s.rank, s.step) for s in spans) == sorted(
        [("fwd", r, s) for r in range(4) for s in range(4)] + [("bwd", r, s) for r in range(4) for s in range(4, 8)])


def test_a_layout_the_library_lacks_is_refused():
    q, k, v, _ = _inputs(16, 2, seed=0)
    with pytest.raises(RingsimError, match="te's ring does not run the striped layout"):
        play_ring(q, k, v, None, n_gpus=2, layout="striped", causal=True, ops=CpuFlashOps(), library="te")
    with pytest.raises(RingsimError, match="without a causal mask"):
        play_ring(q, k, v, None, n_gpus=2, layout="zigzag", causal=False, ops=CpuFlashOps(), library="rfa")


def test_labels_read_back():
    m = impl_steps.LABEL.match(impl_steps.label("rfa", "bwd", 3, 12, "merge"))
    assert m and m.group("library", "kind", "rank", "step", "part") == ("rfa", "bwd", "3", "12", "merge")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("library,layout", [("te", "zigzag"), ("rfa", "zigzag")])
def test_compiled_merges_match_fp64_attention(library, layout):
    # TransformerEngine's corrections through torch.compile, ring-flash-attention's update scripted
    q, k, v, dout = _inputs(24, 2, seed=5)
    got = play_ring(q, k, v, dout, n_gpus=3, layout=layout, causal=True, ops=CpuFlashOps(), library=library,
                    compiled=True)
    want = reference_attention(q, k, v, True, dout)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert max_err(a, b) < (1e-5 if name == "out" else 1e-4), name
