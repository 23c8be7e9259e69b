"""The hardware model's interface (sim.hardware.model): the datasheet model and a calibrated
profile both implement it with the same signatures, its batch forms give the per-op
floats, and nothing in sim/ probes a model for what it has (read from the source, so
that a probe inside a function counts too)."""

import ast
import inspect
import pathlib

import numpy as np
import pytest

import sim
from sim.hardware.cluster import Gpu, Hardware
from sim.hardware.contention import Contention
from sim.hardware.model import HardwareModel
from sim.hardware.profile import CollectiveFit, ComputeGroup, LinkFit, Profile
from sim.scenario.config import Workload

SIM = pathlib.Path(sim.__file__).parent

METHODS = ("compute_time_s", "compute_times_s", "transfer_time_s", "transfer_times_s", "rate_flops", "describe",
           "times_varlen", "varlen_times_s", "collective_times_s")
ABILITIES = {"contention": None, "inline_send_after_s": None, "p2p_queue": False, "merge_copies_slices": False,
             "takes_call_order": False, "times_collectives": False}
"""The optional abilities and the defaults that say a model lacks them."""


def profile(backend="nccl", collectives=True):
    """A small profile: a forward group per mask measured on 8 heads of 64, the backward
    falling back to it, a link and (optionally) a fitted all-gather."""
    groups = {(dt, m, "fwd"): ComputeGroup(dt, m, "fwd", ((1e9, 2e-3), (4e9, 6e-3), (16e9, 20e-3)), 1e-4,
                                           8e11 if m == "full" else 6e11, heads=8, head_dim=64)
              for dt in ("fp32", "bf16") for m in ("full", "diagonal")}
    fits = {"allgather": CollectiveFit(LinkFit(3e-5, 5e9), {4: LinkFit(2e-5, 6e9)})} if collectives else {}
    return Profile("table", groups, LinkFit(1e-5, 2e9), Contention(slowdown_in_flight=1.5),
                   {"device": "test cpu", "backend": backend}, {}, "test", fits)


MODELS = {
    "kernel table": Hardware(),
    "flat": Hardware(gpu=Gpu.preset("H100-SXM", kernel="flat")),
    "unfused merge": Hardware(gpu=Gpu.preset("H100-SXM", kernel="fa2", merge="unfused")),
    "profile": profile(),
}


@pytest.mark.parametrize("name", MODELS)
def test_the_datasheet_model_and_a_profile_are_hardware_models(name):
    model = MODELS[name]
    assert isinstance(model, HardwareModel)
    flags = ("p2p_queue", "merge_copies_slices", "takes_call_order", "times_collectives")
    assert all(type(getattr(model, flag)) is bool for flag in flags)
    assert model.contention is None or isinstance(model.contention, Contention)
    assert model.inline_send_after_s is None or isinstance(model.inline_send_after_s, float)
    assert isinstance(model.describe()["kind"], str)


@pytest.mark.parametrize("cls", [Hardware, Profile])
@pytest.mark.parametrize("method", METHODS)
def test_each_method_takes_the_interfaces_arguments(cls, method):
    def arguments(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert arguments(getattr(cls, method)) == arguments(getattr(HardwareModel, method))


def test_rate_flops_takes_the_dtype_and_an_optional_head_dim():
    for cls in (HardwareModel, Hardware, Profile):
        params = list(inspect.signature(cls.rate_flops).parameters.values())
        assert [(p.name, p.default) for p in params[1:]] == [("dtype", inspect.Parameter.empty), ("head_dim", None)]


def test_the_abilities_default_to_absent():
    class Minimal(HardwareModel):
        def compute_time_s(self, flops, **_):
            return flops

        def transfer_time_s(self, nbytes, src, dst):
            return nbytes

        def rate_flops(self, dtype, head_dim=None):
            return 1.0

        def describe(self):
            return {"kind": "test"}

    m = Minimal()
    assert {name: getattr(m, name) for name in ABILITIES} == ABILITIES
    assert m.times_varlen("bf16") is False
    with pytest.raises(NotImplementedError):
        m.varlen_times_s([], np.zeros(0), dtype="bf16", kind=np.zeros(0, dtype=str))
    default = np.array([1.0, 2.0])
    assert m.collective_times_s(np.array(["ag", "rs"]), np.array([1, 2]), default).tolist() == [1.0, 2.0]


def test_a_model_without_the_required_methods_cannot_be_made():
    class Partial(HardwareModel):
        def describe(self):
            return {}

    with pytest.raises(TypeError):
        Partial()


def test_a_profiles_abilities_come_from_what_it_measured():
    nccl, gloo = profile("nccl", collectives=False), profile("gloo")
    assert (nccl.p2p_queue, nccl.inline_send_after_s, nccl.times_collectives) == (True, None, False)
    assert (gloo.p2p_queue, gloo.inline_send_after_s, gloo.times_collectives) == (False, 1e-5, True)
    assert nccl.contention.slowdown_in_flight == 1.5
    assert (nccl.merge_copies_slices, nccl.takes_call_order) == (False, False)


BLOCKS = dict(flops=np.array([2e9, 2e9, 8e9, 3e9, 2e9, 40e9]), kind=np.array(["fwd", "fwd", "bwd", "fwd", "bwd", "fwd"]),
              mask=np.array(["full", "full", "diagonal", "diagonal", "full", "full"]),
              q_tokens=np.array([512, 512, 1024, 700, 512, 2048]), kv_tokens=np.array([512, 512, 1024, 700, 512, 2048]))


@pytest.mark.parametrize("name", MODELS)
def test_the_batch_forms_give_the_per_op_floats(name):
    model = MODELS[name]
    flags = dict(sliced=np.array([0, 1, 0, 1, 0, 0], dtype=bool), alone=np.array([1, 0, 0, 0, 1, 0], dtype=bool),
                 isolated=np.array([1, 0, 1, 0, 0, 0], dtype=bool))
    got = model.compute_times_s(dtype="bf16", head_dim=96, kv_heads_per_head=0.5, **BLOCKS, **flags)
    want = [model.compute_time_s(float(f), dtype="bf16", kind=str(k), mask=str(m), q_tokens=int(q), kv_tokens=int(kv),
                                 head_dim=96, kv_heads_per_head=0.5, sliced=bool(s), alone=bool(a), isolated=bool(i))
            for f, k, m, q, kv, s, a, i in zip(*BLOCKS.values(), *flags.values())]
    assert got.tolist() == want
    nbytes, src, dst = np.array([1e6, 1e6, 4e6, 0.0]), np.array([0, 0, 1, 3]), np.array([1, 1, 2, 0])
    assert model.transfer_times_s(nbytes, src, dst).tolist() == [
        model.transfer_time_s(float(b), int(s), int(d)) for b, s, d in zip(nbytes, src, dst)]


def test_a_profile_ignores_the_head_geometry_and_the_call_order():
    p = profile()
    plain = p.compute_time_s(3e9, dtype="fp32", kind="bwd", mask="diagonal", q_tokens=700, kv_tokens=700)
    told = p.compute_time_s(3e9, dtype="fp32", kind="bwd", mask="diagonal", q_tokens=700, kv_tokens=700,
                            head_dim=256, kv_heads_per_head=0.125, sliced=True, alone=True, isolated=True)
    assert told == plain
    assert p.rate_flops("fp32", 256) == p.rate_flops("fp32") == 8e11


def test_the_datasheet_model_assumes_the_default_workloads_heads_when_not_told():
    w = Workload()
    for model in MODELS.values():
        if isinstance(model, Hardware):
            assert model.rate_flops("bf16") == model.rate_flops("bf16", w.head_dim)
            block = dict(dtype="bf16", kind="fwd", mask="diagonal", q_tokens=4096, kv_tokens=4096)
            assert model.compute_time_s(w.fwd_flops(4096 * 4097 / 2), **block) == model.compute_time_s(
                w.fwd_flops(4096 * 4097 / 2), head_dim=w.head_dim, kv_heads_per_head=w.kv_heads / w.heads, **block)


PROBES = {"getattr", "hasattr"}
MODEL_NAMES = {"hardware", "hw", "profile", "model"}
"""What a hardware model is called where it is passed around."""


def probes(source: str, where: str) -> list[str]:
    """getattr and hasattr calls on a hardware model, or asking for one of its members."""
    members = set(ABILITIES) | set(METHODS) | {"takes_head_geometry"}
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES
                and len(node.args) >= 2):
            continue
        target, name = node.args[0], node.args[1]
        called = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
        asked = name.value if isinstance(name, ast.Constant) else None
        if called in MODEL_NAMES or asked in members:
            out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_probe_finder_finds_probes():
    source = ("def f(hardware, x, a):\n    fabric = getattr(hardware, 'fabric', None)\n"
              "    batch = hasattr(x, 'compute_times_s')\n    return getattr(a, 'func', None), fabric, batch\n")
    assert [p.split(": ")[1] for p in probes(source, "f.py")] == [
        "getattr(hardware, 'fabric', None)", "hasattr(x, 'compute_times_s')"]


def test_no_module_in_sim_probes_a_hardware_model():
    files = sorted(SIM.rglob("*.py"))
    assert len(files) > 10
    assert [probe for f in files for probe in probes(f.read_text(), str(f.relative_to(SIM)))] == []
