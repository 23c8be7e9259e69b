import pytest

from hw.config import RunConfig
from sim.errors import RingsimError
from sim.scenario.config import Workload


def wl(**kw):
    base = dict(seq=64, heads=4, kv_heads=2, head_dim=8, dtype="fp32")
    return Workload(**{**base, **kw})


@pytest.mark.parametrize("kw,match", [
    (dict(workload=wl(seq=60), n_gpus=4, layout="zigzag"), "multiple of 8"),
    (dict(workload=wl(seq=10), n_gpus=3, layout="striped"), "does not divide into 3"),
    (dict(n_gpus=0), "n_gpus"),
    (dict(layout="spiral"), "layout"),
    (dict(device="tpu"), "device"),
    (dict(backend="nccl"), "does not run on cpu"),
    (dict(repeats=0), "repeats"),
    (dict(warmup=-1), "warmup"),
    (dict(timeout_s=0), "timeout"),
    (dict(block_impl="triton"), "block_impl"),
    (dict(fail_rank=5), "fail_rank"),
])
def test_bad_values_fail_where_they_are_made(kw, match):
    with pytest.raises(RingsimError, match=match):
        RunConfig(**kw)


def test_describe_is_the_simulator_scenario():
    cfg = RunConfig(workload=wl(pass_="fwdbwd"), n_gpus=4, layout="striped")
    d = cfg.describe()
    assert d["n_gpus"] == 4 and d["layout"] == "striped" and d["overlap"] is True
    assert d["granularity"] == "exact" and d["workload"]["pass"] == "fwdbwd"
    assert cfg.resolved_backend == "gloo" and cfg.tokens_per_rank == 16
