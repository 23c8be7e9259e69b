"""The bench file being written: its header, the key of each entry and its progress line (hw.bench)."""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

import torch

from hw.bench.options import FORMAT, PARTS, VERSION
from hw.devices import describe_device
from sim.errors import RingsimError
from sim.inputs import read_json

# ---- the command ----------------------------------------------------------------------

def _key(part: str, e: dict[str, Any]) -> tuple:
    if part == "compute":
        return tuple(e[k] for k in ("kind", "dtype", "batch", "heads", "kv_heads", "head_dim",
                                    "q_tokens", "kv_tokens", "mask"))
    if part == "transfer":
        return (e["bytes"], e["direction"])
    if part == "collective":
        return (e["op"], e["n_gpus"], e["shard_bytes"])
    if part == "concurrency":
        return (e.get("kind", "fwd"),) + tuple(e[k] for k in ("processes", "dtype", "batch", "heads", "kv_heads",
                                                              "head_dim", "q_tokens", "mask")) + (e.get("pass", 1),)
    if part == "ring_conditions":
        return ((e.get("kind", "fwd"), e.get("hops", 1))
                + tuple(e[k] for k in ("processes", "dtype", "batch", "heads", "kv_heads", "head_dim", "q_tokens",
                                       "mask", "bytes")) + (e.get("pass", 1),))
    return tuple(e[k] for k in ("dtype", "batch", "heads", "kv_heads", "head_dim", "q_tokens",
                                "mask", "bytes"))


def _describe_device(device, backend: str, threads: int | None) -> dict[str, Any]:
    return {"kind": device.type, "name": describe_device(device), "torch": torch.__version__,
            "backend": backend, "threads_per_rank": threads if device.type == "cpu" else None,
            "cpu_count": os.cpu_count(), "hostname": socket.gethostname()}


def _open_doc(a: argparse.Namespace, device_desc: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    path = a.output
    if os.path.exists(path):
        if a.resume and not a.force:
            doc = read_json(path, what="bench file", max_bytes=64 * 1024 * 1024)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
                raise RingsimError(f"{path} is not a ringsim-hw-bench file (version {VERSION})")
            old = doc.get("device", {})
            if (old.get("kind"), old.get("name")) != (device_desc["kind"], device_desc["name"]):
                raise RingsimError(f"{path} was measured on {old.get('name')!r}, not on this "
                                   f"{device_desc['name']!r}; use another file or --force")
            for part in PARTS:
                if not isinstance(doc.get(part, []), list):
                    raise RingsimError(f"{path}: {part} must be a list")
                doc.setdefault(part, [])
            for e in doc["collective"]:
                if isinstance(e, dict) and "world" in e and "n_gpus" not in e:
                    e["n_gpus"] = e.pop("world")     # the key of files written before it was n_gpus
            return doc
        if not a.force:
            raise RingsimError(f"{path} exists; pass --force to overwrite it or --resume to continue it")
    return {"format": FORMAT, "version": VERSION, "complete": False, "device": device_desc,
            "settings": {"samples": plan["samples"], "warmup": plan["warmup"], "quick": plan["quick"]},
            **{part: [] for part in PARTS}}


def _fmt(entry_part: str, e: dict[str, Any]) -> str:
    if entry_part == "compute":
        return (f"compute {e['kind']} {e['dtype']} b={e['batch']} h={e['heads']}/{e['kv_heads']} "
                f"d={e['head_dim']} {e['q_tokens']}x{e['kv_tokens']} {e['mask']}: "
                f"{e['median_s'] * 1e3:.3f} ms, {e['rate_flops'] / 1e9:.2f} GFLOP/s")
    if entry_part == "concurrency":
        return (f"concurrency {e['processes']} processes, {e.get('kind', 'fwd')} {e['dtype']} {e['q_tokens']} tokens: "
                f"{e['mean_s'] * 1e3:.3f} ms per block" + _checked(e) + _pass(e))
    if entry_part == "ring_conditions":
        return (f"ring conditions {e['processes']} ranks, {e.get('kind', 'fwd')} {e['q_tokens']} tokens, "
                f"{e.get('hops', 1)} x {e['bytes']} B per exchange: "
                f"compute x{e['compute_slowdown']:.2f}, transfer x{e['transfer_slowdown']:.2f}" + _checked(e)
                + _pass(e))
    if entry_part == "collective":
        return (f"collective {e['op']} on {e['n_gpus']} GPUs, {e['shard_bytes']} B shard: "
                f"{e['median_s'] * 1e3:.3f} ms, {e['gbps']:.3f} GB/s sent per rank")
    if entry_part == "transfer":
        return (f"transfer {e['direction']} {e['bytes']} B: {e['median_s'] * 1e3:.3f} ms, "
                f"{e['gbps']:.3f} GB/s")
    return (f"interference {e['dtype']} {e['q_tokens']} tokens, {e['bytes']} B each way: "
            f"{e['median_alone_s'] * 1e3:.3f} ms alone, {e['median_with_s'] * 1e3:.3f} ms with "
            f"transfer (x{e['slowdown']:.2f})")


def _pass(e: dict[str, Any]) -> str:
    return f", pass {e['pass']}" if e.get("pass", 1) > 1 else ""


def _checked(e: dict[str, Any]) -> str:
    if e.get("rejected"):
        return f" REJECTED after {e['attempts']} attempts"
    return f" (bound x{e['bound']:.2f})" if "bound" in e else ""
