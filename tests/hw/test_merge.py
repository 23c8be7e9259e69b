import math

import torch

from hw.merge import merge_, new_accumulators
from tests.hw.conftest import max_err


def _part(q, k, v):
    """(out, lse) of q against k, v in float64 by direct softmax (independent of hw)."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def test_merging_key_blocks_gives_attention_over_all_keys():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, 12, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, 12, 8, generator=g, dtype=torch.float64)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    out, lse = new_accumulators(torch.Size([2, 5, 3, 8]), q.device)
    for sl in (slice(0, 4), slice(4, 5), slice(5, 12)):
        o, l = _part(q, k[:, :, sl], v[:, :, sl])
        merge_(out, lse, o, l)
    assert max_err(out, want) < 1e-6
    assert max_err(lse, torch.logsumexp(q @ k.transpose(-1, -2) / math.sqrt(8), -1)) < 1e-5


def test_large_scores_do_not_overflow():
    out, lse = new_accumulators(torch.Size([1, 2, 1, 4]), torch.device("cpu"))
    merge_(out, lse, torch.full((1, 1, 2, 4), 1.0), torch.tensor([[[1e4, 3e4]]]))
    merge_(out, lse, torch.full((1, 1, 2, 4), 3.0), torch.tensor([[[1e4, 1e4]]]))
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert torch.allclose(out[0, 0, 0], torch.full((4,), 2.0))   # equal weights
    assert torch.allclose(out[0, 0, 1], torch.full((4,), 1.0))   # e^(2e4) dominates
    assert abs(lse[0, 0, 0].item() - (1e4 + math.log(2.0))) < 1e-2   # one fp32 ulp at 1e4 is 1e-3


def test_rows_with_every_key_masked_stay_empty_without_nan():
    out, lse = new_accumulators(torch.Size([1, 2, 1, 3]), torch.device("cpu"))
    empty = torch.tensor([[[float("-inf"), float("-inf")]]])
    merge_(out, lse, torch.zeros(1, 1, 2, 3), empty)
    assert not torch.isnan(out).any() and torch.equal(lse, empty)
    merge_(out, lse, torch.ones(1, 1, 2, 3), torch.tensor([[[0.5, float("-inf")]]]))
    assert torch.equal(out[0, 0, 0], torch.ones(3)) and lse[0, 0, 0].item() == 0.5
    assert torch.equal(out[0, 0, 1], torch.zeros(3)) and lse[0, 0, 1].item() == float("-inf")
