"""A GPU's block model calibrated from one GPU: `ringsim calibrate GRID.json -o P.json`
where GRID.json holds compute entries only (`ringsim hw bench --device cuda --parts
compute`, bench/gpu/block_grid.sh), and `--profile P.json` to use it.

The block model (sim.hardware.kernel_model) times an isolated call as its host-side floor plus its
kernels; the main kernel's time is the busiest SM's steps at the published step time. The
fit keeps the kernel's structure and the published rates' shape and finds, per kernel,
the host floor of a forward and of a backward call and a factor on the rate of each
(pass, mask) group measured, by least squares on the relative error (every block is
called isolated, as the bench calls it: time = floor + other kernels + main / factor).

A GPU profile replaces the GPU alone: links, NICs and nodes still come from the presets
and flags, so a person with one GPU calibrates compute and plans a cluster with it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sim.errors import RingsimError
from sim.files import write_json
from sim.hardware.cluster import RATE_GROUPS, Gpu, Hardware
from sim.hardware.kernel_model import Floors
from sim.hardware.presets import GPU_PRESETS
from sim.hardware.profile import MAX_BLOCK_S, MIN_BLOCK_S
from sim.inputs import read_json

FORMAT = "ringsim-gpu-profile"
VERSION = 1
IMPL_KERNELS = {"cuda-flash": "fa2", "cuda-cudnn": "cudnn", "cuda-fa3": "fa3"}
"""The block operator a bench entry records (hw.blocks) and the kernel it runs."""
DEVICE_GPUS = (("H200", "H200"), ("H800", "H800-SXM"), ("H100", "H100-SXM"), ("A100-SXM4-40GB", "A100-SXM-40GB"),
               ("A100", "A100-SXM-80GB"), ("B200", "B200"), ("MI300X", "MI300X"))
"""A CUDA device name's part (torch.cuda.get_device_name) and the GPU preset it is."""


@dataclass(frozen=True)
class KernelFit:
    floors: Floors
    rate_scale: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuProfile:
    gpu: str
    """The GPU preset the profile calibrates."""
    kernels: dict[str, KernelFit]
    """Kernel ('fa2', 'fa3', 'cudnn') -> its fit; the first is the default."""
    measured_on: dict[str, Any]
    report: dict[str, Any]
    source: str = ""

    def gpu_for(self, kernel: str = "default", merge: str = "fused") -> Gpu:
        """The preset GPU with this profile's fit of `kernel` ('default': the first fitted)."""
        name = next(iter(self.kernels)) if kernel == "default" else kernel
        if name not in self.kernels:
            raise RingsimError(f"{self.source or 'the profile'} calibrates {', '.join(self.kernels)}, "
                               f"not kernel {name!r}")
        fit = self.kernels[name]
        return Gpu.preset(self.gpu, kernel=name, merge=merge, floors=fit.floors, rate_scale=dict(fit.rate_scale))

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "gpu": self.gpu,
                "kernels": {k: {"floors": vars(f.floors), "rate_scale": f.rate_scale} for k, f in self.kernels.items()},
                "measured_on": self.measured_on, "report": self.report}

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> None:
        write_json(path, self.to_dict(), overwrite=overwrite)


def gpu_preset_of(device_name: str) -> str:
    for part, preset in DEVICE_GPUS:
        if part.lower() in device_name.lower():
            return preset
    raise RingsimError(f"no GPU preset matches the bench's device {device_name!r}; name one with --gpu "
                       f"({', '.join(GPU_PRESETS)})")


BENCH_VERSIONS = (1,)
"""The versions of `ringsim hw bench` files a GPU profile is fitted from (hw.bench.options.VERSION)."""


def _entries(bench: dict[str, Any], source: str) -> list[dict[str, Any]]:
    """The compute entries of a CUDA bench, checked."""
    device = bench.get("device") if isinstance(bench.get("device"), dict) else {}
    if device.get("kind") != "cuda":
        raise RingsimError(f"{source}: a GPU profile needs a CUDA bench (this one ran on {device.get('kind', '?')})")
    raw = bench.get("compute")
    if not isinstance(raw, list) or not raw:
        raise RingsimError(f"{source}: no compute entries to calibrate a GPU's blocks from")
    out = []
    for i, r in enumerate(raw):
        if not isinstance(r, dict):
            raise RingsimError(f"{source}: compute entry {i} is not an object")
        if r.get("kind") not in ("fwd", "bwd") or r.get("mask") not in ("full", "diagonal"):
            raise RingsimError(f"{source}: compute entry {i} has a bad kind or mask")
        if r.get("dtype") not in ("bf16", "fp16"):
            continue          # the block model times 16-bit blocks; others run the flat model
        nums = {}
        for key in ("batch", "heads", "kv_heads", "head_dim", "q_tokens", "kv_tokens"):
            v = r.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise RingsimError(f"{source}: compute entry {i} needs a positive integer {key}, got {v!r}")
            nums[key] = v
        if nums["heads"] % nums["kv_heads"]:
            raise RingsimError(f"{source}: compute entry {i}: kv_heads must divide heads")
        t = r.get("median_s")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not MIN_BLOCK_S <= t <= MAX_BLOCK_S:
            raise RingsimError(f"{source}: compute entry {i} needs a positive time (median_s) from {MIN_BLOCK_S:g} "
                               f"to {MAX_BLOCK_S:g} s, got {t!r}")
        kernel = IMPL_KERNELS.get(r.get("impl"))
        if kernel is None:
            raise RingsimError(f"{source}: compute entry {i} ran {r.get('impl')!r}, which no kernel table models "
                               f"(known: {', '.join(IMPL_KERNELS)})")
        flops = r.get("flops")
        if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not flops > 0:
            raise RingsimError(f"{source}: compute entry {i} needs positive flops")
        out.append({**nums, "kind": r["kind"], "mask": r["mask"], "dtype": r["dtype"], "time_s": float(t),
                    "flops": float(flops), "kernel": kernel})
    if not out:
        raise RingsimError(f"{source}: no 16-bit compute entries (the block model times bf16 and fp16 blocks)")
    return out


def predict_isolated_s(gpu: Gpu, e: dict[str, Any]) -> float:
    """An isolated call of the entry's block on `gpu` (the block model, no merge)."""
    return Hardware(gpu=gpu).compute_time_s(
        e["flops"], dtype=e.get("dtype", "bf16"), kind=e["kind"], mask=e["mask"], q_tokens=e["q_tokens"],
        kv_tokens=e["kv_tokens"], head_dim=e["head_dim"], kv_heads_per_head=e["kv_heads"] / e["heads"],
        alone=True, isolated=True)


def fit_kernel(gpu: Gpu, entries: list[dict[str, Any]], *, rates: bool = True) -> tuple[KernelFit, dict[str, Any]]:
    """Floors (and, with `rates`, a factor per measured group) for `gpu`'s kernel from
    isolated calls. Linear in (floor, 1 / factor): time = floor + others + main / factor."""
    bare = replace(gpu, floors=replace(gpu.floors, fwd_host_us=0.0, bwd_host_us=0.0), rate_scale={})
    no_main = replace(bare, rate_scale={g: 1e30 for g in RATE_GROUPS})
    groups = sorted({f"{e['kind']}-{e['mask']}" for e in entries}) if rates else []
    kinds = sorted({e["kind"] for e in entries})
    a, b = [], []
    for e in entries:
        others = predict_isolated_s(no_main, e)
        main = predict_isolated_s(bare, e) - others
        row = [1.0 / e["time_s"] if e["kind"] == k else 0.0 for k in kinds]
        row += [main / e["time_s"] if f"{e['kind']}-{e['mask']}" == g else 0.0 for g in groups]
        a.append(row)
        b.append(1.0 - (others if rates else predict_isolated_s(bare, e)) / e["time_s"])
    x = np.linalg.lstsq(np.array(a), np.array(b), rcond=None)[0]
    host = {k: max(0.0, float(v)) * 1e6 for k, v in zip(kinds, x[:len(kinds)])}
    scale = {g: 1.0 / float(v) for g, v in zip(groups, x[len(kinds):]) if v > 0}
    floors = replace(gpu.floors, fwd_host_us=host.get("fwd", gpu.floors.fwd_host_us),
                     bwd_host_us=host.get("bwd", gpu.floors.bwd_host_us))
    fit = KernelFit(floors, scale)
    fitted = replace(gpu, floors=floors, rate_scale=scale)
    errors = [predict_isolated_s(fitted, e) / e["time_s"] - 1 for e in entries]
    return fit, {"entries": len(entries), "floors_us": {k: round(v, 2) for k, v in host.items()},
                 "rate_scale": {g: round(v, 4) for g, v in scale.items()}, **error_stats(errors)}


def error_stats(errors: list[float]) -> dict[str, Any]:
    a = np.abs(np.array(errors))
    return {"median_abs_rel": float(np.median(a)), "max_abs_rel": float(a.max()),
            "within_10pct": int((a <= 0.10).sum()), "n": int(a.size)}


def calibrate_gpu(benches: list[tuple[dict[str, Any], str]], gpu_name: str | None = None) -> GpuProfile:
    """A GPU profile from one GPU's compute benches (files of one device, merged)."""
    entries, names = [], set()
    for bench, source in benches:
        if not isinstance(bench, dict) or bench.get("format") != "ringsim-hw-bench":
            raise RingsimError(f"{source}: not a `ringsim hw bench` result")
        if bench.get("version") not in BENCH_VERSIONS:
            raise RingsimError(f"{source}: bench version {bench.get('version')!r} is not one this ringsim reads "
                               f"({', '.join(map(str, BENCH_VERSIONS))})")
        entries += _entries(bench, source)
        names.add(str((bench.get("device") or {}).get("name", "unknown")))
    if len(names) > 1:
        raise RingsimError(f"the benches come from different GPUs ({', '.join(sorted(names))}): calibrate one at a time")
    device = next(iter(names))
    preset = gpu_name or gpu_preset_of(device)
    kernels, report = {}, {}
    for kernel in dict.fromkeys(e["kernel"] for e in entries):
        mine = [e for e in entries if e["kernel"] == kernel]
        gpu = Gpu.preset(preset, kernel=kernel)
        kernels[kernel], report[kernel] = fit_kernel(gpu, mine)
    measured_on = {"device": device, "kind": "cuda", **{k: v for k, v in (benches[0][0].get("device") or {}).items()
                                                        if k in ("torch", "backend")}}
    return GpuProfile(preset, kernels, measured_on, {"kernels": report}, ", ".join(s for _, s in benches))


def is_gpu_profile(d: Any) -> bool:
    return isinstance(d, dict) and d.get("format") == FORMAT


def gpu_profile_from_dict(d: Any, source: str = "") -> GpuProfile:
    where = source or "GPU profile"
    if not is_gpu_profile(d):
        raise RingsimError(f"{where}: not a ringsim GPU profile")
    if d.get("version") != VERSION:
        raise RingsimError(f"{where}: unsupported version {d.get('version')!r}")
    gpu = d.get("gpu")
    if gpu not in GPU_PRESETS:
        raise RingsimError(f"{where}: unknown GPU preset {gpu!r}")
    raw = d.get("kernels")
    if not isinstance(raw, dict) or not raw:
        raise RingsimError(f"{where}: kernels must be a non-empty object")
    kernels = {}
    for name, k in raw.items():
        if not isinstance(k, dict) or not isinstance(k.get("floors"), dict) \
                or not isinstance(k.get("rate_scale", {}), dict):
            raise RingsimError(f"{where}: kernel {name!r} needs floors and rate_scale objects")
        try:
            floors = Floors(**{key: float(v) for key, v in k["floors"].items()})
        except (TypeError, ValueError):
            raise RingsimError(f"{where}: kernel {name!r} has bad floors {k['floors']!r}") from None
        kernels[str(name)] = KernelFit(floors, dict(k.get("rate_scale", {})))
    profile = GpuProfile(gpu, kernels, d.get("measured_on") if isinstance(d.get("measured_on"), dict) else {},
                         d.get("report") if isinstance(d.get("report"), dict) else {}, where)
    for name in kernels:
        profile.gpu_for(name)           # a bad floor, factor or kernel fails here, in one line
    return profile


def load_gpu_profile(path: str | os.PathLike) -> GpuProfile:
    return gpu_profile_from_dict(read_json(path, what="GPU profile", max_bytes=1 << 20), str(path))
