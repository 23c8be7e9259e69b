import pytest
import torch

from hw.layouts import shard, unshard
from sim.layouts import rank_tokens


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
def test_shard_then_unshard_is_the_identity(layout):
    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3)
    parts = [shard(x, layout, 3, r) for r in range(3)]
    for r, p in enumerate(parts):
        assert torch.equal(p[0, :, 0] // 3, torch.from_numpy(rank_tokens(layout, 24, 3)[r]))
    assert torch.equal(unshard(parts, layout), x)
