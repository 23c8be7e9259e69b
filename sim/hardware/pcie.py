"""A PCIe node: GPUs under switches, switches under each socket's root complex, sockets
joined by their link, and the links a flow between two GPUs of the node crosses
(docs/design.md, "PCIe nodes").

The node's GPUs are numbered switch by switch and socket by socket: GPU i sits under
switch i // gpus_per_switch of socket i // gpus_per_socket. Each GPU has its own x16
port (sim.hardware.topology: the "link" ports), each switch one x16 uplink to its socket's root
complex, each socket's root complex forwards between its root ports, its memory and the
socket link, and the sockets are joined pairwise by their link (UPI on Intel, xGMI on
AMD). Every link is directed: a flow holds one direction of each link on its route.

Routes. A flow whose two GPUs may talk peer to peer goes the short way: under one switch
it turns in the switch (only the two ports), else up its switch's uplink, through its
socket's root complex (in, then out), across the socket link if the other GPU is on the
other socket, through that socket's root complex and down the other switch's uplink.
A flow that may not go peer to peer is staged through host memory: the sender writes it
into a buffer in its socket's memory and the receiver reads it back, so it goes up its
uplink and through the root complex even when both GPUs share a switch, through its
socket's host memory, and across the socket link when the receiver sits on the other
socket. Which pairs go peer to peer (`p2p`):
- "on": every pair (NVIDIA's data-center cards where the platform allows it);
- "socket": pairs on one socket (many dual-socket servers: P2P across the socket link
  is disabled or unsupported);
- "switch": pairs under one switch: NCCL's default on x86 servers of more than two GPUs
  ("By default don't use P2P across CPU Host Bridges and further apart": p2pLevel =
  PATH_PXB in ncclTopoCheckP2p, NVIDIA/nccl src/graph/paths.cc); NCCL moves every other
  pair's traffic through shared host memory;
- "off": no pair (GeForce cards: the driver does not allow P2P).

Host memory. Each socket's staging through its memory is one resource, `staged_gbps`
wide, which every flow staged there holds: a copy through host memory alone runs at that
rate, and copies staged through one socket at once share it. Both are measured: CUDA's
p2pBandwidthLatencyTest on PCIe 4.0 servers gives one staged copy 20.1-22.4 GB/s
(`Unidirectional P2P=Disabled`, NVIDIA/nccl issue #814) and two at once, one each way,
19.1-21.2 GB/s together (`Bidirectional P2P=Disabled`, NVIDIA/nccl-tests issue #74):
one copy's rate, shared.

Time of a flow: alpha + bytes / rate, the rate being the narrowest of its route: the
GPU ports, the links it crosses (each at its per-direction bandwidth over its lanes,
below) and, when staged, its socket's host memory. Staging adds a second alpha (two
copies in series, each a DMA of its own). Under NCCL (sim.hardware.nccl) alpha is NCCL's
latency and the rate is also bounded by the channels NCCL gives the flow; the route,
its rate and the second latency of a staged flow are the same.

Sharing. As everywhere in ringsim, a link carries one flow at a time and flows queue in
schedule order (sim.hardware.topology): k flows of b bytes through one link end at k b / B either
way. A link wider than a GPU's port (a socket link of several UPI links, a root complex)
carries several flows at once: it is `lanes` = floor(bandwidth / port bandwidth)
resources, each bandwidth / lanes wide. A flow takes the root complex's lane of the
switch it comes from (in) or goes to (out), and the socket link's lane of its sender's
place on its socket, modulo lanes: the members of a round of an all-to-all are distinct
senders, so its flows spread over the lanes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.errors import RingsimError
from sim.reasons import Clause, clause, english
from sim.units import positive_ints

P2P_MODES = ("on", "socket", "switch", "off")

PCIE_X16_GBPS = {gen: gts * 16 * 128 / 130 / 8 for gen, gts in ((3, 8.0), (4, 16.0), (5, 32.0))}
"""One direction of a x16 link, GB/s: PCI-SIG's 8, 16 and 32 GT/s per lane for PCIe 3.0,
4.0 and 5.0, x 16 lanes x 128b/130b encoding / 8 bits."""

STAGED_SHARE = 22.2 / 31.5
"""A socket's staging through host memory runs at this share of the x16 link: the median
of the off-diagonal 'Unidirectional P2P=Disabled Bandwidth Matrix' of CUDA's
p2pBandwidthLatencyTest on a PCIe 4.0 server, 20.1-22.4 GB/s (NVIDIA/nccl issue #814),
over the 31.5 GB/s of PCIe 4.0 x16. The same share is assumed on PCIe 3.0 and 5.0."""


@dataclass(frozen=True, kw_only=True)
class SocketLink:
    name: str
    bandwidth_gbps: float
    """GB/s per direction, all of the links between two sockets together."""
    source: str


SOCKET_LINKS: dict[str, SocketLink] = {s.name: s for s in [
    # What GPU traffic gets across the sockets: the bandwidths NCCL's topology model
    # gives the link between CPUs (NVIDIA/nccl src/graph/topo.h, ncclTopoGetInterCpuBw),
    # far below the UPI/xGMI line rates (Intel's Sapphire Rapids: 4 UPI 2.0 links at
    # 16 GT/s, 32 GB/s each per direction), which GPU peer traffic does not reach.
    SocketLink(name="upi-skl", bandwidth_gbps=10.0,
               source="NVIDIA/nccl src/graph/topo.h SKL_QPI_BW = 10 GB/s: Intel Skylake to Ice Lake Xeons "
                      "(CPU model 0x55 to 0x8E)"),
    SocketLink(name="upi-spr", bandwidth_gbps=22.0,
               source="NVIDIA/nccl src/graph/topo.h SRP_QPI_BW = 22 GB/s: Intel Sapphire Rapids Xeons "
                      "(CPU model 0x8F to 0xCE)"),
    SocketLink(name="upi-emr", bandwidth_gbps=40.0,
               source="NVIDIA/nccl src/graph/topo.h ERP_QPI_BW = 40 GB/s: Intel Xeons from CPU model 0xCF"),
    SocketLink(name="xgmi", bandwidth_gbps=16.0,
               source="NVIDIA/nccl src/graph/topo.h AMD_BW = 16 GB/s: AMD EPYC (xGMI between sockets)"),
]}


def socket_link(name: str) -> SocketLink:
    for key, s in SOCKET_LINKS.items():
        if key.lower() == name.lower():
            return s
    raise RingsimError(f"unknown socket link {name!r}; choose from {', '.join(SOCKET_LINKS)}")


@dataclass(frozen=True, kw_only=True)
class Pcie:
    """The PCIe fabric of one node (module docstring). Bandwidths GB/s per direction."""

    gen: int = 4
    """PCIe generation of the switches' uplinks (3, 4 or 5)."""
    gpus_per_switch: int = 2
    gpus_per_socket: int = 4
    p2p: str = "on"
    socket_link: str = "upi-spr"
    """A SOCKET_LINKS name: what GPU traffic gets between two sockets."""
    staged_gbps: float | None = None
    """What one socket's host memory stages, GB/s, for one copy or shared by several;
    None: STAGED_SHARE of the uplink's x16 (measure yours with p2pBandwidthLatencyTest's
    Unidirectional P2P=Disabled matrix)."""
    root_gbps: float | None = None
    """What one socket's root complex forwards per direction, GB/s; None: as much as its
    switches' uplinks bring (it never binds)."""

    def __post_init__(self) -> None:
        if self.gen not in PCIE_X16_GBPS:
            raise RingsimError(f"unknown PCIe generation {self.gen!r}; choose from "
                               f"{', '.join(map(str, PCIE_X16_GBPS))}")
        positive_ints(self, "gpus_per_switch", "gpus_per_socket")
        if self.gpus_per_socket % self.gpus_per_switch:
            raise RingsimError(f"{self.gpus_per_switch} GPUs per PCIe switch do not divide the "
                               f"{self.gpus_per_socket} GPUs per socket")
        if self.p2p not in P2P_MODES:
            raise RingsimError(f"unknown peer-to-peer mode {self.p2p!r}; choose from {', '.join(P2P_MODES)}")
        socket_link(self.socket_link)
        for name in ("staged_gbps", "root_gbps"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")):
                raise RingsimError(f"{name} must be a positive number, got {v!r}")

    def check_node(self, gpus_per_node: int) -> None:
        if gpus_per_node % self.gpus_per_socket:
            raise RingsimError(f"{self.gpus_per_socket} GPUs per socket do not divide the {gpus_per_node} "
                               "GPUs per node")

    def words(self) -> str:
        """A short description, such as 'PCIe 4.0, 2 GPUs a switch, 4 a socket, P2P under a switch'."""
        p2p = {"on": "P2P everywhere", "socket": "P2P within a socket", "switch": "P2P under a switch",
               "off": "no P2P"}[self.p2p]
        under = ("each GPU on its own root port" if self.gpus_per_switch == 1
                 else f"{self.gpus_per_switch} GPUs a switch")
        return f"PCIe {self.gen}.0, {under}, {self.gpus_per_socket} a socket, {p2p}"

    @property
    def uplink_gbps(self) -> float:
        return PCIE_X16_GBPS[self.gen]

    @property
    def socket_gbps(self) -> float:
        return socket_link(self.socket_link).bandwidth_gbps

    def fabric(self, gpus_per_node: int, port_gbps: float) -> "Fabric":
        self.check_node(gpus_per_node)
        return Fabric(self, gpus_per_node, port_gbps)


LINK_KINDS = ("switch uplink", "root complex", "socket link", "host memory")
"""What a fabric resource is, by code (Fabric.kinds)."""
LINK_KIND_KEYS = ("switch-uplink", "root-complex", "socket-link", "host-memory")
"""The same, as sim.reasons' words (its `link_kind` field)."""


class Fabric:
    """The links of one node's PCIe fabric as resources, and every pair's route: for
    GPUs i, j of a node, the resources (-1 padded, offsets inside the node) a flow i -> j
    holds, its rate and its extra latency. Resources of a node, in order: each switch's
    uplink up, then down (only with more than one GPU per switch: with one, the uplink is
    the GPU's port); each socket's root complex in (from its devices), then out, in lanes;
    the socket link of each ordered pair of sockets, in lanes; each socket's host memory
    (staged copies). `links` says which each resource is, as a sim.reasons clause and its
    lane (None for a link of one lane); `names` in English ("socket 1 root complex in lane 2")."""

    def __init__(self, pcie: Pcie, gpus_per_node: int, port_gbps: float) -> None:
        self.pcie = pcie
        g = gpus_per_node
        self.gpus = g
        n_sw = g // pcie.gpus_per_switch
        n_sock = g // pcie.gpus_per_socket
        sw_per_sock = pcie.gpus_per_socket // pcie.gpus_per_switch
        root_gbps = pcie.root_gbps if pcie.root_gbps is not None else sw_per_sock * pcie.uplink_gbps
        self.widths = {"uplink": pcie.uplink_gbps, "root": root_gbps, "socket": pcie.socket_gbps}
        lanes = {k: max(1, int(v / port_gbps + 1e-9)) for k, v in self.widths.items()}
        self.lanes = lanes
        links, kinds, rates = [], [], []
        uplinks = pcie.gpus_per_switch > 1

        def add(link: Clause, lane: int | None, kind: int, rate: float) -> int:
            links.append((link, lane))
            kinds.append(kind)
            rates.append(rate)
            return len(links) - 1

        up = down = None
        if uplinks:
            up = [add(clause("link.uplink", switch=s, direction="up"), None, 0, pcie.uplink_gbps) for s in range(n_sw)]
            down = [add(clause("link.uplink", switch=s, direction="down"), None, 0, pcie.uplink_gbps)
                    for s in range(n_sw)]
        lr, ls = lanes["root"], lanes["socket"]
        rc_in = [[add(clause("link.root", socket=k, direction="in"), x if lr > 1 else None, 1, root_gbps / lr)
                  for x in range(lr)] for k in range(n_sock)]
        rc_out = [[add(clause("link.root", socket=k, direction="out"), x if lr > 1 else None, 1, root_gbps / lr)
                   for x in range(lr)] for k in range(n_sock)]
        sock = {(a, b): [add(clause("link.socket", a=a, b=b), x if ls > 1 else None, 2, pcie.socket_gbps / ls)
                         for x in range(ls)]
                for a in range(n_sock) for b in range(n_sock) if a != b}
        staged_gbps = pcie.staged_gbps if pcie.staged_gbps is not None else STAGED_SHARE * pcie.uplink_gbps
        memory = [add(clause("link.memory", socket=k), None, 3, staged_gbps) for k in range(n_sock)]
        self.links, self.kinds = links, np.array(kinds, dtype=np.int64)
        self.names = [english(link) + ("" if lane is None else english(clause("link.lane", lane=lane)))
                      for link, lane in links]
        self.rates = np.array(rates)
        width = 7
        self.route = np.full((g, g, width), -1, dtype=np.int64)
        self.rate = np.full((g, g), float(port_gbps))
        self.staged = np.zeros((g, g), dtype=bool)
        for i in range(g):
            for j in range(g):
                if i == j:
                    continue
                si, sj = i // pcie.gpus_per_switch, j // pcie.gpus_per_switch
                ki, kj = i // pcie.gpus_per_socket, j // pcie.gpus_per_socket
                p2p = {"on": True, "off": False, "socket": ki == kj, "switch": si == sj}[pcie.p2p]
                held = []
                if not (p2p and si == sj):
                    if uplinks:
                        held.append(up[si])
                    held.append(rc_in[ki][(si % sw_per_sock) % lr])
                    if not p2p:
                        held.append(memory[ki])
                    if ki != kj:
                        held.append(sock[ki, kj][(i % pcie.gpus_per_socket) % ls])
                    held.append(rc_out[kj][(sj % sw_per_sock) % lr])
                    if uplinks:
                        held.append(down[sj])
                self.route[i, j, :len(held)] = held
                rate = min([float(port_gbps)] + [rates[h] for h in held])
                self.staged[i, j] = not p2p
                self.rate[i, j] = rate

    @property
    def n_resources(self) -> int:
        return len(self.links)
