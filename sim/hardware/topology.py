"""GPUs in nodes, the ports a flow holds, and the flows a collective is made of.

Ranks are packed `gpus_per_node` to a node (sim.hardware.cluster.Hardware). Inside a node every
GPU has its own port to the others in each direction (NVLink through NVSwitch, or PCIe
in a box without NVLink); between nodes a GPU's traffic leaves through a NIC: one per
GPU, or `nics_per_node`, each shared by gpus_per_node / nics_per_node GPUs. A flow
holds its sender's outgoing port and its receiver's incoming port (inside a node the two
GPUs' ports, between nodes the two NICs) for its whole duration, alpha + bytes /
bandwidth at the link it crosses (docs/design.md, "Link time"; sim.hardware.cluster.Hardware
.transfer_times_s), or under NCCL what NCCL's model gives it: its share, by bytes, of
its collective's NCCL time, a round of NCCL's grouped send/receive, or a send as NCCL
splits it (sim.hardware.nccl, Hardware.group_transfer_times_s). The switches, and the
network between the NICs, are taken to be non-blocking (a full fat tree).

A port carries one flow at a time: flows that meet on a port queue, in schedule order
(sim.engine.schedule). Sharing the bandwidth would finish a batch of equal flows at the same
moment as queueing does (k flows of b bytes through one port end at k*b/B either way),
and queueing keeps every start time a max-plus recurrence, which the wave player
computes exactly (sim.engine.players); what queueing misses is that a flow behind another
starts late instead of running slowly, and that a lone flow cannot speed up.

Collectives are played as the point-to-point flows an implementation sends:
- **all-to-all** (`all_to_all`): pairwise exchange, a flow per ordered pair of a group,
  in rounds in which every member sends once and receives once. Members are numbered
  (node, GPU in node); round (a, b) sends to the member a nodes on and b GPUs on, the
  rounds inside the node first. In a round that crosses nodes every member crosses, so
  with one NIC per GPU every NIC carries one flow each way per round.
- **all-gather** (`all_gather`): a ring all-gather, in two levels when the group spans
  nodes: first a ring across the nodes among the GPUs with the same place in their node
  (over their NICs: each block crosses the network once per node, as NCCL's rings over
  every NIC do), then a ring inside each node passing what each GPU gathered. Every GPU
  sends (N - 1) blocks.
- **reduce-scatter** (`reduce_scatter`): the mirror: a ring inside each node, then the
  ring across nodes; (N - 1) blocks sent per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.errors import RingsimError
from sim.hardware.pcie import Fabric

if TYPE_CHECKING:
    from sim.hardware.cluster import Hardware


@dataclass(frozen=True)
class Topology:
    """The ports of n_gpus ranks in nodes of gpus_per_node, with nics_per_node NICs."""

    n_gpus: int
    gpus_per_node: int
    nics_per_node: int
    link_name: str = "link"
    fabric: Fabric | None = None
    """Each node's PCIe links (sim.hardware.pcie), None without: then a flow inside a node holds
    only its two GPUs' ports."""

    @classmethod
    def of(cls, hardware: Hardware, n_gpus: int) -> "Topology":
        g = hardware.gpus_per_node
        nics = hardware.nics_per_node or g
        return cls(n_gpus, g, nics, hardware.link.name, hardware.fabric)

    @property
    def n_nodes(self) -> int:
        return -(-self.n_gpus // self.gpus_per_node)

    @property
    def n_nics(self) -> int:
        return self.n_nodes * self.nics_per_node

    def node(self, rank) -> np.ndarray:
        return np.asarray(rank) // self.gpus_per_node

    def nic(self, rank) -> np.ndarray:
        """The NIC that carries a rank's traffic between nodes."""
        rank = np.asarray(rank)
        per_nic = self.gpus_per_node // self.nics_per_node
        return self.node(rank) * self.nics_per_node + (rank % self.gpus_per_node) // per_nic

    # resources: the compute streams (0..n-1), then each GPU's port out, its port in,
    # each NIC's port out and in
    def resource_names(self) -> list[str]:
        n, k = self.n_gpus, self.n_nics
        per = self.nics_per_node
        names = ([f"GPU {r} compute" for r in range(n)]
                 + [f"GPU {r} {self.link_name} out" for r in range(n)]
                 + [f"GPU {r} {self.link_name} in" for r in range(n)]
                 + [f"node {i // per} NIC {i % per} out" for i in range(k)]
                 + [f"node {i // per} NIC {i % per} in" for i in range(k)])
        if self.fabric is not None:
            names += [f"node {node} {name}" for node in range(self.n_nodes) for name in self.fabric.names]
        return names

    @property
    def fabric_base(self) -> int:
        """The first fabric resource (node 0's), after the NICs' ports."""
        return 3 * self.n_gpus + 2 * self.n_nics

    def route(self, src, dst) -> list[np.ndarray]:
        """Every resource a flow src -> dst holds: its two ports (`ports`), then, inside a
        PCIe node, the links of its route (sim.hardware.pcie.Fabric; -1 where a flow holds fewer)."""
        out, into = self.ports(src, dst)
        if self.fabric is None:
            return [out, into]
        src, dst = np.broadcast_arrays(np.asarray(src), np.asarray(dst))
        g = self.gpus_per_node
        held = self.fabric.route[src % g, dst % g]                       # (..., width)
        inside = (src // g == dst // g)[..., None]
        held = np.where(inside & (held >= 0), held + self.fabric_base + (src // g)[..., None] * self.fabric.n_resources,
                        -1)
        used = int((held >= 0).any(axis=tuple(range(held.ndim - 1))).sum()) if held.size else 0
        return [out, into] + [held[..., x] for x in range(used)]

    def ports(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        """The resources a flow src -> dst holds: (sender's port out, receiver's port in)."""
        src, dst = np.asarray(src), np.asarray(dst)
        n, k = self.n_gpus, self.n_nics
        inside = self.node(src) == self.node(dst)
        out = np.where(inside, n + src, 3 * n + self.nic(src))
        into = np.where(inside, 2 * n + dst, 3 * n + k + self.nic(dst))
        return out, into

    def crosses_nodes(self, src, dst) -> np.ndarray:
        return self.node(src) != self.node(dst)

    # --- collectives -------------------------------------------------------------------

    def all_to_all(self, groups: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """The rounds of a pairwise all-to-all within each group (rows of `groups`, ranks):
        per round (src, dst) arrays, every member of every group once in each."""
        groups = np.asarray(groups)
        m = groups.shape[1]
        if m == 1:
            return []
        dst_index = np.stack([self._round_table(row) for row in groups])   # (groups, rounds, m)
        src = np.broadcast_to(groups[:, None, :], dst_index.shape)
        dst = np.take_along_axis(np.broadcast_to(groups[:, None, :], dst_index.shape), dst_index, axis=2)
        return [(src[:, j].ravel(), dst[:, j].ravel()) for j in range(m - 1)]

    def _round_table(self, members: np.ndarray) -> np.ndarray:
        """(rounds, m): for each round, the index (into members) each member sends to."""
        m = len(members)
        node = self.node(members)
        nodes, count = np.unique(node, return_counts=True)
        if (count == count[0]).all():
            p, q = len(nodes), int(count[0])
            # (node in group, place in node) of each member, and the member at each place
            order = np.lexsort((members, node))
            a = np.empty(m, dtype=np.int64)
            b = np.empty(m, dtype=np.int64)
            a[order] = np.arange(m) // q
            b[order] = np.arange(m) % q
            at = np.empty((p, q), dtype=np.int64)
            at[a, b] = np.arange(m)
            rounds = [(x, y) for x in range(p) for y in range(q) if (x, y) != (0, 0)]
            return np.stack([at[(a + x) % p, (b + y) % q] for x, y in rounds])
        return np.stack([(np.arange(m) + j) % m for j in range(1, m)])

    def _levels(self, ranks: int) -> tuple[int, int]:
        """(nodes, GPUs per node) of a collective over ranks 0..ranks-1."""
        g = min(self.gpus_per_node, ranks)
        if ranks % g:
            raise RingsimError(f"{ranks} GPUs do not fill whole nodes of {g}: a collective across "
                               "nodes needs a multiple of --gpus-per-node")
        return ranks // g, g

    def collective_flows(self) -> int:
        """How many flows one two-level ring collective over every rank has (`all_gather`,
        `reduce_scatter`): every rank sends once per step, at nodes - 1 steps across nodes
        and GPUs per node - 1 inside them."""
        nodes, g = self._levels(self.n_gpus)
        return self.n_gpus * (nodes - 1 + g - 1)

    def all_gather(self) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """The steps of a two-level ring all-gather over every rank (module docstring):
        per step (level, src, dst, blocks) with level 0 across nodes (each flow carries one
        rank's block: `blocks` is that rank, shape (n,)) and level 1 inside nodes (each flow
        carries the blocks of every node's GPU at one place: `blocks` is (n, nodes)).
        A flow at a step forwards what its sender received at the step before (at the
        first step of level 1: everything its sender gathered at level 0)."""
        nodes, g = self._levels(self.n_gpus)
        r = np.arange(self.n_gpus)
        k, l = r // g, r % g
        steps = []
        for s in range(1, nodes):
            steps.append((0, r, ((k + 1) % nodes) * g + l, ((k - s + 1) % nodes) * g + l))
        for s in range(1, g):
            place = (l - s + 1) % g
            steps.append((1, r, k * g + (l + 1) % g, np.arange(nodes)[None, :] * g + place[:, None]))
        return steps

    def reduce_scatter(self) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """The steps of the two-level ring reduce-scatter (module docstring): level 1 (inside
        nodes) first, then level 0 (across); per step (level, src, dst, blocks), the blocks
        whose partial sums the flow carries, as in `all_gather`. A flow at a step sends
        what its sender received at the step before, with its own part added."""
        nodes, g = self._levels(self.n_gpus)
        r = np.arange(self.n_gpus)
        k, l = r // g, r % g
        steps = []
        for s in range(1, g):
            place = (l - s) % g
            steps.append((1, r, k * g + (l + 1) % g, np.arange(nodes)[None, :] * g + place[:, None]))
        for s in range(1, nodes):
            steps.append((0, r, ((k + 1) % nodes) * g + l, ((k - s) % nodes) * g + l))
        return steps
