"""What NCCL charges for a collective and for a send/receive, by NCCL's own tuning model.

Source: NVIDIA/nccl v2.30.7-1 (commit 73cf112295c33aee2b895f329f592f2a9b4b0f97), read for
each constant and rule below: src/graph/tuning.cc (ncclTunerConstantsDefaults: baseLat,
hwLat, llMaxBws, perChMax*Bws; ncclTopoTuneModel: the bus bandwidth of each algorithm and
protocol and its latency; ncclTopoGetAlgoTime: time = latency + bytes / bandwidth),
src/enqueue.cc (ncclGetAlgoInfo and topoGetAlgoInfo: the algorithm and protocol of the
lowest estimated time, then the channels of the call; addP2pToPlan and
scheduleP2pTasksToPlan: the channels and protocol of a send/receive),
src/graph/search.cc (the channel search: its speed arrays and ncclTopoDupChannels),
src/graph/connect.cc (ncclTopoPostset doubles the channels), src/graph/paths.cc
(ncclTopoGetNchannels, ncclTopoComputeP2pChannels), src/graph/topo.h (the bandwidths
NCCL's topology gives NVLink, PCIe and CPU links), src/init.cc (P2P chunk sizes,
MAXCHANNELS/2 channels searched), src/transport/nvls.cc (NVLS channels). docs/nccl.md
says the same in prose and what ringsim leaves out.

A communicator (`Comm`) is what NCCL sees: its ranks and nodes, the GPU generation, what
joins the GPUs inside a node (NVLink through NVSwitch, or PCIe) and their bandwidth as
NCCL's topology counts it, the NICs. `ring_graph` reproduces the outcome of NCCL's channel
search for a ring (how many channels, at what bandwidth each) from the narrowest link a
channel crosses; `tune` fills NCCL's table of (latency, bandwidth) per function,
algorithm (tree, ring, NVLS; CollNet and PAT need hardware or a layout ringsim does not
model: one GPU per node, a SHARP switch) and protocol (LL, LL128, Simple); `collective`
picks the fastest as NCCL does and gives its time and its channels (one CTA each).

Point-to-point (`send_recv`): NCCL has no cost model for it; it splits a send over
channels (its p2p chunking, NCCL_P2P_*_CHUNKSIZE defaults) and picks LL for small parts.
ringsim times it as one step of NCCL's ring: the ring's base and hardware latency of
that protocol, and each channel at the bandwidth NCCL sizes a peer's channels for
(`p2p_channel_gbps`: ncclTopoGetNchannels gives an NVLink peer two channels per NVLink
and a PCIe peer two, so a channel carries half an NVLink or half the PCIe link; a
network peer one per NCCL_P2P_PER_CHANNEL_NET_BW = 14 GB/s), never more than the path's
bandwidth. An all-to-all (`all_to_all_flow_s`) is every rank's sends to every peer in
one kernel (NCCL's grouped send/receive): one latency, the peers' channels side by side,
no more of them than the communicator's P2P channels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from sim.errors import RingsimError

NCCL_VERSION = "v2.30.7-1"
NCCL_COMMIT = "73cf112295c33aee2b895f329f592f2a9b4b0f97"
SOURCE = f"NVIDIA/nccl {NCCL_VERSION} (commit {NCCL_COMMIT})"

ALGORITHMS = ("tree", "ring", "nvls")
PROTOCOLS = ("LL", "LL128", "Simple")
FUNCTIONS = ("broadcast", "reduce", "all_gather", "reduce_scatter", "all_reduce")
ARCHS = ("volta", "ampere", "hopper", "blackwell")
"""NCCL's compute-capability classes (NCCL_VOLTA/AMPERE/HOPPER/BLACKWELL_COMPCAP_IDX):
below sm80, sm80-sm89, sm90, sm100 and up."""

# --- src/graph/tuning.cc, ncclTunerConstantsDefaults (µs, GB/s) ----------------------------
BASE_LATENCY_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0)}
HW_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0.0, 0.0, 0.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0)},
}
LL_MAX_BWS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (2 * 141.0, 2 * 45.0, 2 * 35.0))
"""[index1][index2]: index1 the GPU class on one node, else the CPU (0 Intel, 1 AMD);
index2 one node, two, more."""
PER_CH_MAX_RING_LL128_BWS = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)
PER_CH_MAX_TREE_LL128_BWS = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE_BWS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
"""getNetOverhead: a network post on x86, by CPU vendor."""

# --- src/graph/search.cc -----------------------------------------------------------------
SPEEDS_INTRA = {
    "volta": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
SPEEDS_INTER = {
    "volta": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
              0.24, 0.12),
    "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    "blackwell": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                  2.4, 1.2, 0.24, 0.12),
}
"""speedArrayIntra/Inter (before sm90), sm90SpeedArray*, sm100SpeedArray*."""

MAX_CHANNELS = 64
"""MAXCHANNELS (src/include/device.h); a ring is searched with MAXCHANNELS / 2 (init.cc)."""
NVLS_CHANNELS = {"hopper": 16, "blackwell": 24}
"""NVLS_NCHANNELS_SM90, NVLS_NCHANNELS_SM100_NVL (src/transport/nvls.cc): one node."""
NVLS_MAX_ARITY = 32
PCI_BW = 12.0
"""topo.h PCI_BW: a ring this slow runs Simple with 256 threads (ncclTopoTuneModel)."""
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
"""NCCL_LL_MAX_NTHREADS, NCCL_LL128_MAX_NTHREADS, NCCL_SIMPLE_MAX_NTHREADS."""
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
"""NCCL_*_THREAD_THRESHOLD (src/include/comm.h): bytes per thread before a call takes
another channel; ring LL's is times the ranks."""

# --- P2P (src/init.cc, src/enqueue.cc, src/graph/paths.cc) -------------------------------
P2P_CHUNK_BYTES = {"nvlink": 1 << 19, "pci": 1 << 17, "net": 1 << 17}
"""NCCL_P2P_NVL_CHUNKSIZE (all peers on NVLink), _PCI_CHUNKSIZE, _NET_CHUNKSIZE (more than one node)."""
P2P_LL_THRESHOLD = 16384
"""NCCL_P2P_LL_THRESHOLD: a send of at most this many bytes per channel runs LL."""
P2P_PER_CHANNEL_NET_BW = 14
"""NCCL_P2P_PER_CHANNEL_NET_BW, GB/s: channels per network peer = NIC bandwidth / this."""
P2P_PER_BATCH = 8
"""NCCL_MAX_DEV_WORK_P2P_PER_BATCH."""

# --- the bandwidth NCCL's topology gives a link (src/graph/topo.h, topo.cc) ----------------
NVLINK_GBPS = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
"""SM70/SM80/SM90/SM100_NVLINK_BW: one NVLink, per direction."""
NVLINK_DATASHEET_GBPS = {"volta": 25.0, "ampere": 25.0, "hopper": 25.0, "blackwell": 50.0}
"""One NVLink per direction on the datasheets the link presets come from (NVLink 2, 3, 4:
25 GB/s; NVLink 5: 50 GB/s): a link preset's bandwidth over this is its NVLink count."""
PCIE_NCCL_SHARE = (16 * 120 / 80) / (16 * 16 * 128 / 130 / 8)
"""NCCL counts a PCIe link at width x 1.5 GB/s per lane at 16 GT/s (topo.cc: width x
speed / 80, kvDictPciGen 16 GT/s = 120): 24 GB/s for a 4.0 x16, where the datasheet's
128b/130b rate (sim.hardware.pcie.PCIE_X16_GBPS) gives 31.5; the same share at every
generation (12, 24, 48 GB/s)."""

GPU_ARCH = {"A100-SXM-80GB": "ampere", "A100-SXM-40GB": "ampere", "A100-PCIe-80GB": "ampere",
            "H100-SXM": "hopper", "H800-SXM": "hopper", "H200": "hopper", "H100-PCIe": "hopper",
            "L40S": "ampere", "L20": "ampere", "RTX-4090": "ampere", "B200": "blackwell", "custom": "hopper"}
"""The NCCL class of each GPU preset (sm80 A100, sm89 L40S / L20 / RTX 4090, sm90 H100 /
H800 / H200, sm100 B200; NVIDIA's CUDA GPU compute capability table); a custom GPU is
taken as Hopper, the default GPU's. A GPU NCCL does not run on (MI300X: RCCL) is absent."""


@dataclass(frozen=True)
class Comm:
    """A communicator as NCCL's tuning sees it."""

    ranks: int
    nodes: int
    arch: str
    """An ARCHS name."""
    intra: str
    """'nvlink' (through NVSwitch) or 'pci': what joins the GPUs inside a node."""
    channel_gbps: float
    """What one ring channel inside a node may take, GB/s in NCCL's units: the narrowest
    link a ring through the node's GPUs crosses once per channel (a GPU's NVLinks or
    PCIe port, a shared switch uplink, the link between sockets)."""
    port_gbps: float | None = None
    """A GPU's own link (all its NVLinks, or its PCIe port), GB/s in NCCL's units: what
    NCCL sizes a peer's P2P channels by; None: `channel_gbps`."""
    nic_gbps: float = 0.0
    """One NIC, GB/s (NCCL: its speed in Mb/s / 8000)."""
    nics_per_node: int = 0
    local_nics: int = 1
    """NICs closest to each GPU (ncclTopoGetLocalNetCountByBw): one, or more where a node
    has more NICs than GPUs."""
    nvls: bool = False
    """NVLink SHARP is there (NVSwitch, Hopper or later)."""
    cpu: str = "intel"

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise RingsimError(f"unknown GPU class {self.arch!r}; choose from {', '.join(ARCHS)}")
        if self.intra not in ("nvlink", "pci"):
            raise RingsimError(f"inside a node GPUs meet on 'nvlink' or 'pci', got {self.intra!r}")
        if self.ranks < 1 or not 1 <= self.nodes <= self.ranks:
            raise RingsimError(f"a communicator of {self.ranks} ranks cannot span {self.nodes} nodes")

    @property
    def ppn(self) -> int:
        """Ranks per node (NCCL's ppn; the most on one node where they are uneven)."""
        return -(-self.ranks // self.nodes)

    @property
    def arch_index(self) -> int:
        return ARCHS.index(self.arch)

    @property
    def port(self) -> float:
        return self.channel_gbps if self.port_gbps is None else self.port_gbps


@dataclass(frozen=True)
class Graph:
    """A channel search's outcome: channels and the bandwidth of each, GB/s."""

    channels: int
    bw_intra: float
    bw_inter: float


@dataclass(frozen=True)
class Choice:
    """What NCCL runs a call with, and what its model says it takes."""

    algorithm: str
    protocol: str
    channels: int
    """CTAs the call launches (one per channel)."""
    time_s: float
    bandwidth_gbps: float
    """The algorithm bandwidth of the call (bytes / (time - latency))."""


def _speeds(arch: str, inter: bool) -> tuple[float, ...]:
    table = SPEEDS_INTER if inter else SPEEDS_INTRA
    return table["hopper" if arch == "hopper" else "blackwell" if arch == "blackwell" else "volta"]


@lru_cache(maxsize=256)
def ring_graph(comm: Comm) -> Graph:
    """NCCL's ring search (search.cc ncclTopoCompute) as ringsim reads its outcome: from
    the first speed of the array that a channel can take, it keeps the speed s whose
    channels x s is highest (ties to the faster speed: a later one replaces the best only
    when strictly better), trying slower speeds while the next is more than 0.49 of the
    best found, and stops early when channels x s reaches the GPU's bandwidth. A speed
    fits floor(capacity / s) channels through each link a channel crosses; up to
    MAXCHANNELS / 2. Then ncclTopoDupChannels: a fast graph (25 GB/s a channel or more;
    on sm90 and later 50 or more, or 4 channels or fewer) is doubled at half the speed."""
    multi = comm.nodes > 1
    max_ch = MAX_CHANNELS // 2
    intra = comm.channel_gbps
    max_bw = min(intra, comm.nic_gbps) if multi else intra
    total = intra

    def fit(s: float) -> int:
        k = min(max_ch, int(intra / s + 1e-9))
        if multi:
            k = min(k, comm.nics_per_node * int(comm.nic_gbps / s + 1e-9))
        return k

    speeds = _speeds(comm.arch, multi)
    i = 0
    while i < len(speeds) - 1 and (speeds[i] > max_bw or speeds[i] > total):
        i += 1
    best_k, best_s = 0, 0.0
    while True:
        s = speeds[i]
        k = fit(s)
        if k * s > best_k * best_s:
            best_k, best_s = k, s
        if best_k and best_k * best_s >= total:
            break
        if i < len(speeds) - 1 and (best_k == 0 or speeds[i + 1] / best_s > 0.49):
            i += 1
            continue
        break
    if best_k == 0:                     # no channel fits: NCCL's fallback of one slow channel
        return Graph(1, 0.1, 0.1)
    k, s = best_k, best_s
    if s >= 25.0 and not (comm.arch_index >= ARCHS.index("hopper") and s < 50.0 and k > 4):
        dup = min(2 * k, max_ch)
        s = s / math.ceil(dup / k)
        k = dup
    return Graph(k, s, s)


def comm_channels(comm: Comm) -> int:
    """Channels (CTAs) a collective may use: the ring graph's, doubled by ncclTopoPostset,
    doubled again on sm90+ across nodes when a channel is fast (over 45 GB/s) and there
    are fewer than 16 (connect.cc)."""
    g = ring_graph(comm)
    n = min(MAX_CHANNELS, 2 * g.channels)
    if comm.arch_index >= ARCHS.index("hopper") and comm.nodes > 1 and g.bw_intra > 45.0 and n < 16:
        n = 2 * n
    return n


def _nvls_usable(comm: Comm) -> bool:
    return comm.nvls and comm.nodes == 1 and comm.ranks > 1 and comm.ppn <= NVLS_MAX_ARITY \
        and comm.arch_index >= ARCHS.index("hopper")


def _nvls_graph(comm: Comm) -> Graph:
    """The NVLS search: one channel per GPU of the node (minChannels = maxChannels), at the
    fastest speed whose channels fit the GPU's bandwidth, counted ranks / (ranks - 1)
    times (search.cc: a pattern other than the ring)."""
    k = min(NVLS_MAX_ARITY, comm.ppn)
    total = comm.channel_gbps * comm.ppn / (comm.ppn - 1)
    for s in _speeds(comm.arch, False):
        if s * k <= total + 1e-9:
            return Graph(k, s, s)
    return Graph(0, 0.0, 0.0)


@lru_cache(maxsize=1024)
def tune(comm: Comm, function: str) -> dict[tuple[str, str], tuple[float, float]]:
    """ncclTopoTuneModel for one function: (algorithm, protocol) -> (latency µs, bus-to-
    algorithm bandwidth GB/s), the enabled ones only (a bandwidth of 0 is left out)."""
    if function not in FUNCTIONS:
        raise RingsimError(f"unknown collective {function!r}; choose from {', '.join(FUNCTIONS)}")
    n, nodes, ppn = comm.ranks, comm.nodes, comm.ppn
    if n <= 1:
        return {("ring", "Simple"): (0.0, float("inf"))}
    arch = comm.arch_index
    index2 = nodes - 1 if nodes <= 2 else 2
    index1 = arch if nodes == 1 else (1 if comm.cpu == "amd" else 0)
    ll_max = LL_MAX_BWS[index1][index2]
    tree_max = PER_CH_MAX_TREE_BWS[arch][index2]
    ring_ll128_max = PER_CH_MAX_RING_LL128_BWS[arch][index2]
    tree_ll128_max = PER_CH_MAX_TREE_LL128_BWS[arch][index2]
    nsteps = 2 * (n - 1) if function == "all_reduce" else n - 1 if function in ("all_gather", "reduce_scatter") else n
    intra_hw = comm.intra
    hw = intra_hw if nodes == 1 else "net"
    ring = ring_graph(comm)
    graphs = {"ring": ring, "tree": ring, "nvls": _nvls_graph(comm) if _nvls_usable(comm) else Graph(0, 0.0, 0.0)}
    out = {}
    for a in ALGORITHMS:
        if function in ("broadcast", "reduce") and a != "ring":
            continue
        if function in ("all_gather", "reduce_scatter") and a == "tree":
            continue
        g = graphs[a]
        if g.channels == 0:
            continue
        for pi, p in enumerate(PROTOCOLS):
            if a == "nvls" and p != "Simple":
                continue
            if a == "nvls" and g.channels < 2:
                continue
            bw = g.bw_intra if nodes <= 2 else g.bw_inter
            if a == "nvls":
                intra_bw = g.bw_intra * NVLS_EFFICIENCY[arch] * (g.channels - 1) / g.channels
                intra_bw *= 2.0 if function == "all_reduce" else (ppn - 1) / ppn
                bw = min(intra_bw, g.bw_inter)
            bus = g.channels * bw
            if a == "ring" and p == "LL":
                bus = min(ll_max, bus * 0.5)
            if a == "ring" and p == "LL128":
                bus = min(bus * 0.92, g.channels * ring_ll128_max)
            if a == "tree" and function == "all_reduce":
                bus = min(bus * 0.92, g.channels * tree_max)
            if a == "tree" and p == "LL":
                bus = min(bus / 3.8, ll_max)
            if a == "tree" and p == "LL128":
                bus = min(bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0), g.channels * tree_ll128_max)
            if not (a != "ring" and function in ("all_gather", "reduce_scatter")):
                bus *= n / nsteps if a in ("ring", "nvls") else 0.5
            if p == "LL128" and not _ll128_enabled(comm):
                continue
            lat = BASE_LATENCY_US[a][pi]
            intra_lat = HW_LATENCY_US[intra_hw][a][pi]
            inter_lat = HW_LATENCY_US["net"]["tree" if ppn == 1 else a][pi]
            if a == "ring":
                hw_lat = HW_LATENCY_US[hw][a][pi]
                if function in ("reduce", "broadcast"):
                    lat += hw_lat                       # sameChannels: one pipeline, one step
                else:
                    overhead = 0.0
                    if nodes > 1:
                        overhead = NET_OVERHEAD_US[comm.cpu] * (3 if p == "Simple" else 1)
                    intra_lat = max(intra_lat, overhead)
                    inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if function == "all_reduce" else nodes - 1
                    lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
            elif a == "tree":
                if function == "all_reduce":
                    lat += 2 * ((ppn - 1) * intra_lat + _log2i(nodes) * inter_lat)
            elif a == "nvls":
                lat = intra_lat
            if bus > 0:
                out[(a, p)] = (lat, bus)
    return out


def _ll128_enabled(comm: Comm) -> bool:
    """LL128 is on by default on Hopper and later for every path, before Hopper up to a
    PCIe switch; inside a node only over NVLink (typeIntra <= PATH_NVB)."""
    return comm.intra == "nvlink" and comm.arch_index >= ARCHS.index("volta")


def _log2i(n: int) -> int:
    return max(0, int(n).bit_length() - 1)


TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
"""treeCorrectionFactor (tuning.cc): the tree's bandwidth at medium sizes, by protocol and
log2(bytes / 64)."""


def algo_time_us(comm: Comm, function: str, algorithm: str, protocol: str, nbytes: float) -> float | None:
    """ncclTopoGetAlgoTime: latency + bytes / (1000 x bandwidth) in µs, None where the
    pair is off."""
    entry = tune(comm, function).get((algorithm, protocol))
    if entry is None:
        return None
    lat, bw = entry
    log_size = _log2i(int(nbytes) >> 6) if int(nbytes) >> 6 else -1
    if algorithm == "tree" and function == "all_reduce" and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[PROTOCOLS.index(protocol)][log_size]
    if (algorithm == "ring" and protocol == "Simple" and comm.nodes > 1 and function == "all_reduce"
            and nbytes / (comm_channels(comm) * comm.ranks) >= 64):
        lat *= 1.9 if comm.arch_index < ARCHS.index("ampere") else 1.4
    return lat + nbytes / (1000.0 * bw)


def collective(comm: Comm, function: str, nbytes: float) -> Choice:
    """The algorithm and protocol NCCL picks for `function` of `nbytes` (NCCL's nBytes:
    the larger of the send and receive buffers, the whole gathered tensor of an
    all-gather), its time (s) and its channels (topoGetAlgoInfo)."""
    if comm.ranks <= 1:
        return Choice("ring", "Simple", 0, 0.0, float("inf"))
    best = None
    for a in ALGORITHMS:
        for p in PROTOCOLS:
            t = algo_time_us(comm, function, a, p, nbytes)
            if t is not None and t >= 0 and (best is None or t < best[0]):
                best = (t, a, p)
    t, a, p = best
    if a == "nvls":
        channels = NVLS_CHANNELS[comm.arch] if comm.arch in NVLS_CHANNELS else 16
    else:
        nt = _max_threads(comm, a, p)
        threshold = THREAD_THRESHOLD[p] * (comm.ranks if (a, p) == ("ring", "LL") else 1)
        channels = comm_channels(comm)
        while nbytes < channels * nt * threshold and channels >= 2:
            channels -= 1
    lat, _ = tune(comm, function)[(a, p)]
    bw = nbytes / max((t - lat) * 1000.0, 1e-30)
    return Choice(a, p, channels, t * 1e-6, bw)


def _max_threads(comm: Comm, algorithm: str, protocol: str) -> int:
    if protocol == "Simple" and algorithm == "ring":
        g = ring_graph(comm)
        return 256 if g.bw_intra * g.channels <= PCI_BW else MAX_THREADS["Simple"]
    return MAX_THREADS[protocol]


# --- point to point ------------------------------------------------------------------------

def _pow2_up(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def p2p_channels_per_peer(comm: Comm) -> tuple[int, int]:
    """(p2pnChannels, p2pnChannelsPerPeer) of the communicator (paths.cc): every channel
    of the communicator, a power of two; per peer, the fewest any peer gets (an NVLink
    peer 2 x its NVLinks, a PCIe peer 2, a network peer its NICs' bandwidth / 14 GB/s),
    a power of two; across nodes halved until all peers fit a round of the channels."""
    p2p_n = _pow2_up(min(comm_channels(comm), MAX_CHANNELS))
    if comm.intra == "nvlink":
        intra = 2 * max(1, int(comm.port / NVLINK_GBPS[comm.arch] + 1e-9))
    else:
        intra = 2
    per_peer = intra if comm.ppn > 1 else MAX_CHANNELS
    if comm.nodes > 1:
        net_bw = comm.nic_gbps * comm.local_nics
        per_peer = min(per_peer, max(comm.local_nics, -(-int(net_bw) // P2P_PER_CHANNEL_NET_BW)))
    per_peer = _pow2_up(per_peer)
    if comm.nodes > 1:
        while per_peer * -(-comm.ranks // P2P_PER_BATCH) > p2p_n and per_peer > 1:
            per_peer //= 2
    else:
        per_peer = min(p2p_n, per_peer)
    return p2p_n, per_peer


@dataclass(frozen=True)
class P2p:
    """One send (or receive) as NCCL splits it."""

    protocol: str
    channels: int
    latency_s: float
    bandwidth_gbps: float
    """What its channels move together, before the path's own limit."""

    def time_s(self, nbytes: float, path_gbps: float, copies: int = 1) -> float:
        """Its time over a path of `path_gbps`: `copies` latencies (a send staged through host
        memory is two copies in a row) plus bytes at the narrower of channels and path."""
        return copies * self.latency_s + nbytes / (min(self.bandwidth_gbps, path_gbps) * 1e9)


def send_recv(comm: Comm, nbytes: float, *, network: bool = False) -> P2p:
    """How NCCL runs a send of `nbytes` to one peer (enqueue.cc addP2pToPlan and
    scheduleP2pTasksToPlan): channels from nChannelsMin (the per-peer channels halved
    while they times the ranks exceed the communicator's) up, doubled while a part would
    exceed the largest part (its P2P chunk x 32 on one node, one chunk across nodes);
    LL when every channel carries at most NCCL_P2P_LL_THRESHOLD bytes. Timed as one step
    of NCCL's ring (module docstring); `network`: the peer is on another node."""
    p2p_n, per_peer = p2p_channels_per_peer(comm)
    ch_max = per_peer
    ch_min = per_peer
    while ch_min * comm.ranks > p2p_n and ch_min > 1:
        ch_min //= 2
    kind = "net" if comm.nodes > 1 else comm.intra
    step = P2P_CHUNK_BYTES[kind]
    min_part = step // 2 if comm.nodes > 1 else step // 8
    max_part = step if comm.nodes > 1 else step * 32
    if nbytes <= 0:
        channels = 1
    else:
        channels = min(ch_min, -(-int(nbytes) // min_part))
        part = max(min_part, -(-int(nbytes) // channels))
        while part > max_part and channels <= ch_max // 2:
            channels *= 2
            part = -(-int(nbytes) // channels)
    protocol = "LL" if nbytes <= channels * P2P_LL_THRESHOLD else "Simple"
    pi = PROTOCOLS.index(protocol)
    hw = "net" if network else comm.intra
    latency_us = BASE_LATENCY_US["ring"][pi] + HW_LATENCY_US[hw]["ring"][pi]
    bw = channels * p2p_channel_gbps(comm, network)
    if protocol == "LL":
        nodes = comm.nodes
        index2 = nodes - 1 if nodes <= 2 else 2
        index1 = comm.arch_index if nodes == 1 else (1 if comm.cpu == "amd" else 0)
        bw = min(LL_MAX_BWS[index1][index2], bw * 0.5)
    return P2p(protocol, channels, latency_us * 1e-6, bw)


def p2p_channel_gbps(comm: Comm, network: bool = False) -> float:
    """What NCCL sizes one P2P channel for, GB/s (paths.cc ncclTopoGetNchannels): an
    NVLink peer gets 2 channels per NVLink (half an NVLink each, at NCCL's NVLink rate),
    a PCIe peer 2 (half the port each), a network peer one per
    NCCL_P2P_PER_CHANNEL_NET_BW."""
    if network:
        return float(P2P_PER_CHANNEL_NET_BW)
    if comm.intra == "nvlink":
        return NVLINK_GBPS[comm.arch] / 2
    return comm.port / 2


def all_to_all_flow_s(comm: Comm, nbytes: float, path_gbps: float, *, network: bool = False,
                      copies: int = 1) -> float:
    """One flow of an all-to-all played as pairwise rounds (sim.hardware.topology): NCCL
    posts every peer's send in one kernel, so the rounds share one latency (1 / (ranks -
    1) each) and run side by side on their own channels; a round's flow moves at the
    narrower of its path and every peer's channels together."""
    peers = max(1, comm.ranks - 1)
    one = send_recv(comm, nbytes, network=network)
    return copies * one.latency_s / peers + nbytes / (min(all_to_all_gbps(comm, nbytes, network=network),
                                                            path_gbps) * 1e9)


def all_to_all_ctas(comm: Comm, nbytes: float, *, network: bool = False) -> int:
    """CTAs of an all-to-all's kernel: every peer's channels, at most the communicator's
    P2P channels (scheduleP2pTasksToPlan spreads the peers over them; a channel takes up
    to NCCL_MAX_DEV_WORK_P2P_PER_BATCH peers' work in turn)."""
    p2p_n, _ = p2p_channels_per_peer(comm)
    return min(p2p_n, max(1, comm.ranks - 1) * send_recv(comm, nbytes, network=network).channels)


def all_to_all_gbps(comm: Comm, nbytes: float, *, network: bool = False) -> float:
    """What an all-to-all's CTAs move together, GB/s: its CTAs at a channel's rate (LL's
    half, as a send's)."""
    one = send_recv(comm, nbytes, network=network)
    return all_to_all_ctas(comm, nbytes, network=network) * one.bandwidth_gbps / one.channels
