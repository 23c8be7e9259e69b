"""What the page is made of, as data: its views (tabs), its summary cards and the help
line under each control. The layout builds the page from them (a view's components and
callbacks are in dashboard/views/<its value>.py), the translations name their texts after
them and the URL names the views by them; this module imports none of those.
"""

from __future__ import annotations

TABS = (
    ("questions", "Questions"),
    ("timeline", "Timeline"),
    ("blocks", "Block map"),
    ("compare", "Compare layouts"),
    ("schemes", "Compare schemes"),
    ("sweep", "When transfers hide"),
    ("memory", "Memory"),
    ("merge", "Exact merge"),
    ("measured", "Measured vs simulated"),
    ("traces", "Profiler traces"),
    ("plan", "Plan"),
    ("inference", "Inference"),
)

HELP = {
    "seq": "tokens per sequence, before sharding",
    "kv-heads": "fewer than heads: GQA; 1: MQA",
    "docs": "lengths repeated to fill the sequence (256,7392,544), or drawn: lognormal:median=4k,sigma=1.2 "
            "or sample:300,4096,812 (blank: one document)",
    "seed": "draws a distribution's lengths",
    "window": "sliding window: a query sees itself and the window − 1 keys before it (blank: none)",
    "tflops": "achieved TFLOP/s; blank: peak × efficiency",
    "efficiency": "fraction of peak (blank: 0.5)",
    "overhead-us": "flat model: per block (blank: 5 µs); kernel model: a call's host floor (blank: measured)",
    "link-gbps": "per direction (blank: preset)",
    "link-latency-us": "per transfer (blank: preset)",
    "granularity": "exact pairs, or whole tiles",
    "sync": "per step: post, compute, wait (as kernels do); buffered: forward a block as soon as a buffer is free",
    "scheme": "how the GPUs share the sequence's K/V",
    "impl": "whose implementation of the scheme runs: its merge, host-side operations and streams per step",
    "head-groups": "gather K/V group by group of heads, each gather behind the previous group's compute "
                   "(1: one gather, exposed); must divide the K/V heads",
    "ulysses-degree": "GPUs per all-to-all group (blank: the largest that fits the heads and a node)",
    "ring-degree": "GPUs per ring; Ulysses degree × ring degree = GPUs (blank: from the other)",
    "cluster": "sets the GPU, the links, GPUs and NICs per node; change any of them after",
    "nics-per-node": "each shared by its share of the node's GPUs (blank: one per GPU)",
    "nic-gbps": "per direction (blank: the link between nodes)",
}
"""A line of help under these controls (their keys name the message `ctl.<id>.help`)."""

SUMMARY_CARDS = (
    ("m-makespan", "makespan"), ("m-ideal", "ideal"), ("m-efficiency", "efficiency"),
    ("m-imbalance", "load imbalance"), ("m-overlap", "overlap efficiency"),
    ("m-exposed", "exposed comm (worst GPU)"), ("m-memory", "peak memory per GPU"),
)
