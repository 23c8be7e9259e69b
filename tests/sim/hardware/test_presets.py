"""Presets carry their datasheet and published numbers and their sources; the numbers
checked here are copied from the sources, not from the code under test."""

import pytest

from sim.errors import RingsimError
from sim.hardware.cluster import Gpu, Link
from sim.hardware.presets import GPU_PRESETS, KERNEL_TABLES, LINK_PRESETS, SEQLENS, gpu_preset


def test_every_preset_and_kernel_series_names_its_source():
    for p in [*GPU_PRESETS.values(), *LINK_PRESETS.values()]:
        assert len(p.source) > 20, p.name
    for t in KERNEL_TABLES.values():
        assert t.seqlens == SEQLENS
        for key, s in t.series.items():
            assert len(s.tflops) == len(SEQLENS), (t.name, key)
            assert all(v is None or v > 0 for v in s.tflops), (t.name, key)
            assert "arXiv" in s.source or "flash-attention" in s.source, (t.name, key)


@pytest.mark.parametrize("name,tflops,memory_gb,hbm_gbps", [
    ("H800-SXM", 989.4, 80.0, 3350.0),         # H800 SXM5: H100 SXM5 compute, 80 GB HBM3, 3.35 TB/s
    ("A100-SXM-40GB", 312.0, 40.0, 1555.0),    # A100 datasheet, 40GB SXM: 312 TFLOPS, 1,555 GB/s
    ("A100-SXM-80GB", 312.0, 80.0, 2039.0),    # A100 datasheet, 80GB SXM: 312 TFLOPS, 2,039 GB/s
    ("H100-SXM", 989.4, 80.0, 3350.0),
    ("H200", 989.4, 141.0, 4800.0),
])
def test_new_and_changed_gpu_presets_have_the_datasheet_numbers(name, tflops, memory_gb, hbm_gbps):
    g, p = Gpu.preset(name), gpu_preset(name)
    assert (g.peak_tflops["bf16"], g.memory_gb, p.memory_bandwidth_gbps) == (tflops, memory_gb, hbm_gbps)


@pytest.mark.parametrize("name,stream_gbps", [
    ("A100-SXM-80GB", 1732.0),   # gpu-benches cuda-stream/a100_80.txt, 'scale' at 100% occupancy
    ("A100-SXM-40GB", 1381.0),   # gpu-benches gpu-stream/a100_40.txt, 'scale' at 100% occupancy
    ("H100-SXM", 2500.0),        # nccl #1264: local copy 2474.76-2514.71 GB/s on 8 H100 SXM
    ("H800-SXM", 2500.0),        # the same HBM3 as H100 SXM5
    ("H200", 3165.0),            # gpu-benches gpu-stream/h200.txt, 'scale' at 100% occupancy
    ("B200", 8000.0),            # none published here: the datasheet's peak
    ("MI300X", 5300.0),
])
def test_the_merge_streams_at_the_measured_rate_where_one_is_published(name, stream_gbps):
    p = gpu_preset(name)
    assert Gpu.preset(name).memory_bandwidth_gbps == stream_gbps
    assert stream_gbps <= p.memory_bandwidth_gbps
    if p.stream_bandwidth_gbps is not None:
        assert len(p.stream_source) > 20 and f"{stream_gbps:,.0f}" in p.stream_source
    assert Gpu.preset(name, memory_bandwidth_gbps=123.0).memory_bandwidth_gbps == 123.0


def test_h800_nvlink_is_half_of_400_gb_per_s():
    assert Link.preset("nvlink-h800").bandwidth_gbps == 200.0
    assert Link.preset("nvlink3").bandwidth_gbps == 300.0


def test_old_names_still_find_their_presets():
    assert gpu_preset("A100-SXM").name == "A100-SXM-80GB"
    assert gpu_preset("h800").name == "H800-SXM"


@pytest.mark.parametrize("table,key,at_8k", [
    # FlashAttention-3 paper, forward figure (FlashAttention-2 and -3 bars), H100, 8k
    ("fa2-h100", ("fwd", "full", 128), 370),
    ("fa2-h100", ("fwd", "diagonal", 128), 333),
    ("fa3-h100", ("fwd", "full", 128), 646),
    ("fa3-h100", ("fwd", "diagonal", 128), 602),
    # FlashAttention-3 paper, backward figure, head dim 128, H100, 8k
    ("fa2-h100", ("bwd", "full", 128), 318),
    ("fa3-h100", ("bwd", "full", 128), 559),
])
def test_kernel_tables_hold_the_published_points(table, key, at_8k):
    assert KERNEL_TABLES[table].series[key].tflops[SEQLENS.index(8192)] == at_8k


def test_derived_series_follow_from_the_published_ones():
    # FlashAttention-2, H100, head dim 128, causal, 8k: forward+backward 308 (FA2 README
    # figure), forward 333 (FA3 paper figure); the benchmark counts f forward, 2.5f backward
    bwd = 2.5 / (3.5 / 308 - 1 / 333)
    assert KERNEL_TABLES["fa2-h100"].series["bwd", "diagonal", 128].tflops[4] == pytest.approx(bwd, abs=0.05)
    # A100, causal, head dim 128, 8k: forward+backward 182 split with H100's 333 / 308
    fwd = 182 * 333 / 308
    a100 = KERNEL_TABLES["fa2-a100"].series
    assert a100["fwd", "diagonal", 128].tflops[4] == pytest.approx(fwd, abs=0.05)
    assert a100["bwd", "diagonal", 128].tflops[4] == pytest.approx(2.5 / (3.5 / 182 - 1 / fwd), abs=0.1)
    assert "derived" in a100["bwd", "diagonal", 128].source and "assumed" in a100["fwd", "full", 128].source


def test_preset_kernel_choice():
    assert Gpu.preset("H100-SXM").kernel == "fa2-h100"
    assert Gpu.preset("H800-SXM", kernel="fa3").kernel == "fa3-h100"
    assert Gpu.preset("A100-SXM-40GB").kernel == "fa2-a100"
    assert Gpu.preset("H100-SXM", kernel="flat").kernel is None
    assert Gpu.preset("MI300X").kernel is None               # no published table: flat
    assert Gpu.preset("B200").kernel == "cudnn-b200"          # cuDNN, derived from H100's table
    # an explicit flat rate keeps the flat model
    assert Gpu.preset("H100-SXM", efficiency=0.4).kernel is None
    assert Gpu.preset("H100-SXM", achieved_tflops=300.0).kernel is None
    with pytest.raises(RingsimError, match="no published table for kernel 'fa3'"):
        Gpu.preset("A100-SXM-80GB", kernel="fa3")
    with pytest.raises(RingsimError, match="memory_bandwidth_gbps"):
        Gpu(kernel="fa2-h100")
    with pytest.raises(RingsimError, match="merge"):
        Gpu(merge="sometimes")


def test_cluster_presets_name_existing_presets_and_cite_their_sources():
    from sim.hardware.cluster import Hardware, Link
    from sim.hardware.presets import CLUSTER_PRESETS, cluster_preset

    assert set(CLUSTER_PRESETS) == {"dgx-h100", "dgx-a100", "pcie-a100", "pcie-l20", "pcie-4090", "pcie-h100"}
    for p in CLUSTER_PRESETS.values():
        hw = Hardware(gpu=Gpu.preset(p.gpu), link=Link.preset(p.link), inter_link=Link.preset(p.inter_link),
                      gpus_per_node=p.gpus_per_node, nics_per_node=p.nics_per_node, pcie=p.pcie)
        assert p.source and hw.gpus_per_node % hw.nics_per_node == 0
    # 400 Gb/s NDR and 200 Gb/s HDR per GPU: 50 and 25 GB/s per direction
    assert Link.preset(cluster_preset("DGX-H100").inter_link).bandwidth_gbps == 50.0
    assert Link.preset(cluster_preset("dgx-a100").inter_link).bandwidth_gbps == 25.0
    assert cluster_preset("pcie-a100").link == "pcie4"
    with pytest.raises(RingsimError, match="unknown cluster preset"):
        cluster_preset("cray-1")


@pytest.mark.parametrize("table,dense_bwd_8k", [("fa3-h100", 559), ("cudnn-h100", 518)])
def test_an_unpublished_causal_backward_takes_flashattention2_s_backward_ratio(table, dense_bwd_8k):
    """FlashAttention-3's and cuDNN's causal backward were not published: each is its dense
    backward x FlashAttention-2's causal / dense backward at the same length (head dim 128,
    8k: FA2 causal backward 2.5 / (3.5/308 - 1/333) from its forward+backward and forward,
    dense backward 318), not the ratio of their own forwards."""
    fa2_causal_bwd = 2.5 / (3.5 / 308 - 1 / 333)
    want = dense_bwd_8k * fa2_causal_bwd / 318
    got = KERNEL_TABLES[table].series["bwd", "diagonal", 128].tflops[SEQLENS.index(8192)]
    assert got == pytest.approx(want, abs=0.06)
    fwd = KERNEL_TABLES[table].series
    forward_ratio = fwd["fwd", "diagonal", 128].tflops[4] / fwd["fwd", "full", 128].tflops[4]
    assert abs(dense_bwd_8k * forward_ratio - want) > 1.0     # the forward's ratio would differ
