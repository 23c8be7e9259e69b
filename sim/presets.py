"""Datasheet numbers for GPUs and links, each with its source.

Peak rates are dense (no structured sparsity). Link bandwidths are per direction: a
datasheet's "bidirectional" or "total" figure is halved. Efficiencies and latencies are
assumptions, not datasheet values, and are labelled so; a calibrated profile (see
`ringsim calibrate`) replaces them with measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import RingsimError


@dataclass(frozen=True, kw_only=True)
class GpuPreset:
    name: str
    peak_tflops: dict[str, float]
    """Dense peak TFLOP/s by dtype (fp32 is the non-tensor-core rate)."""
    memory_gb: float
    source: str


@dataclass(frozen=True, kw_only=True)
class LinkPreset:
    name: str
    bandwidth_gbps: float
    """GB/s per direction (10^9 bytes/s)."""
    latency_us: float
    source: str


GPU_PRESETS: dict[str, GpuPreset] = {p.name: p for p in [
    GpuPreset(name="A100-SXM", peak_tflops={"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
              memory_gb=80.0,
              source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): BF16/FP16 312 TFLOPS dense, FP32 19.5 TFLOPS"),
    GpuPreset(name="H100-SXM", peak_tflops={"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
              memory_gb=80.0,
              source="NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16/FP16 1979 TFLOPS with sparsity = 989.4 dense, FP32 66.9 TFLOPS"),
    GpuPreset(name="H200", peak_tflops={"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
              memory_gb=141.0,
              source="NVIDIA H200 Tensor Core GPU datasheet (SXM): BF16/FP16 1979 TFLOPS with sparsity = 989.4 dense, FP32 67 TFLOPS, 141 GB HBM3e"),
    GpuPreset(name="B200", peak_tflops={"bf16": 2250.0, "fp16": 2250.0, "fp32": 75.0},
              memory_gb=180.0,
              source="NVIDIA HGX B200 datasheet (per GPU): FP16/BF16 4.5 PFLOPS with sparsity = 2.25 dense, FP32 75 TFLOPS, 180 GB HBM3e"),
    GpuPreset(name="MI300X", peak_tflops={"bf16": 1307.4, "fp16": 1307.4, "fp32": 163.4},
              memory_gb=192.0,
              source="AMD Instinct MI300X datasheet: FP16/BF16 1307.4 TFLOPS dense, FP32 vector 163.4 TFLOPS, 192 GB HBM3"),
]}

# Latencies: typical small-message point-to-point times reported for NCCL/RCCL on each
# fabric (order of magnitude only; an assumption to be replaced by calibration).
LINK_PRESETS: dict[str, LinkPreset] = {p.name: p for p in [
    LinkPreset(name="nvlink3", bandwidth_gbps=300.0, latency_us=3.0,
               source="NVIDIA A100 datasheet: NVLink 600 GB/s total = 300 GB/s per direction"),
    LinkPreset(name="nvlink4", bandwidth_gbps=450.0, latency_us=3.0,
               source="NVIDIA H100/H200 SXM datasheet: NVLink 900 GB/s total = 450 GB/s per direction"),
    LinkPreset(name="nvlink5", bandwidth_gbps=900.0, latency_us=3.0,
               source="NVIDIA HGX B200 datasheet: NVLink 1.8 TB/s total = 900 GB/s per direction"),
    LinkPreset(name="xgmi-mi300x", bandwidth_gbps=64.0, latency_us=4.0,
               source="AMD MI300X datasheet: 896 GB/s aggregate bidirectional over 7 Infinity Fabric links = 64 GB/s per direction per peer"),
    LinkPreset(name="ib-ndr", bandwidth_gbps=50.0, latency_us=5.0,
               source="NVIDIA ConnectX-7 / Quantum-2 InfiniBand NDR: 400 Gb/s per port per direction = 50 GB/s"),
    LinkPreset(name="ib-hdr", bandwidth_gbps=25.0, latency_us=5.0,
               source="NVIDIA ConnectX-6 / Quantum InfiniBand HDR: 200 Gb/s per port per direction = 25 GB/s"),
    LinkPreset(name="pcie4", bandwidth_gbps=32.0, latency_us=5.0,
               source="PCI-SIG PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b = 31.5 GB/s per direction"),
    LinkPreset(name="pcie5", bandwidth_gbps=64.0, latency_us=5.0,
               source="PCI-SIG PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b = 63 GB/s per direction"),
]}


def gpu_preset(name: str) -> GpuPreset:
    for key, p in GPU_PRESETS.items():
        if key.lower() == name.lower():
            return p
    raise RingsimError(f"unknown GPU preset {name!r}; choose from {', '.join(GPU_PRESETS)}")


def link_preset(name: str) -> LinkPreset:
    for key, p in LINK_PRESETS.items():
        if key.lower() == name.lower():
            return p
    raise RingsimError(f"unknown link preset {name!r}; choose from {', '.join(LINK_PRESETS)}")
