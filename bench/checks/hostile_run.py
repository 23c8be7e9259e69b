"""A hostile user's run of the command line: seeded random inputs (bad options, boundary
numbers, damaged files, random valid configurations), each run as its own `ringsim` process
with a timeout, and classified:

- traceback: a Python traceback on standard error, or a process killed by a signal;
- hang: still running at the timeout;
- impossible: exit 0 with --json output that breaks an invariant (sim.invariants);
- lost file: a file made before the run (inputs and would-be outputs, known contents) changed
  or gone afterwards, where the run was not asked to replace it;
- messy error: exit 2 with more or less than one line on standard error;
- other exit: any other status (1 is a measured check's verdict, never a bad input's);
- clean error: exit 2 and one line; valid: exit 0 (with --json, a result within its bounds).

    python bench/checks/hostile_run.py [--count 400] [--jobs 2] [--timeout 600] [--seed 53] [--out FILE.json] [--force]

prints a table of the classes (and every input that is neither a clean error nor valid) and
writes bench/results/checks/<machine>/hostile-run.json. The inputs differ from the suite's
corpus (tests/hostile): they are drawn here, from the seed.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, add_force, cpu_host, keep_results, save_json  # noqa: E402
from sim.errors import RingsimError  # noqa: E402
from sim.invariants import check_rows, check_run, check_step  # noqa: E402
from tests.hostile import damaged  # noqa: E402

BAD_NUMBERS = ["0", "-1", "-0", "nan", "inf", "-inf", "1e300", "1e-300", "", " ", "abc", "0x10", "1,2,,3", "８",
               "9" * 40, "2.5", "1e12", "-7k", "3M", "1G", "4294967297", "None", "[]", "'", "--", "1 2"]
BAD_WORDS = ["", " ", "x" * 300, "../../etc/passwd", "NUL", "ring;rm", "\u00e9", "all,", ",", "None", "-", "0"]
SIMULATE_NUMERIC = ["--gpus", "--seq", "--batch", "--heads", "--kv-heads", "--head-dim", "--seed", "--window",
                    "--gpus-per-node", "--nics-per-node", "--nic-gbps", "--pcie-gen", "--gpus-per-switch",
                    "--gpus-per-socket", "--staged-gbps", "--tflops", "--efficiency", "--overhead-us", "--link-gbps",
                    "--link-latency-us", "--head-groups", "--ulysses-degree", "--ring-degree", "--tile"]
SIMULATE_WORDS = ["--dtype", "--pass", "--docs", "--cluster", "--gpu", "--link", "--inter-link", "--p2p",
                  "--socket-link", "--kernel", "--merge", "--comm-cost", "--scheme", "--placement", "--layout",
                  "--sync", "--granularity", "--impl"]
STEP_NUMERIC = ["--seq", "--global-batch", "--microbatches", "--gpus", "--tp", "--cp", "--pp", "--dp", "--zero",
                "--interleave", "--layers", "--heads", "--kv-heads", "--head-dim", "--hidden", "--ffn", "--vocab",
                "--params"]
PLAN_NUMERIC = ["--seq", "--global-batch", "--batch", "--seed", "--window", "--nodes", "--gpus-per-node",
                "--nics-per-node", "--memory-gb", "--param-shards", "--top", "--workers", "--headroom"]
SMALL = ["--gpus", "2", "--seq", "4096", "--heads", "8", "--kv-heads", "8"]
"""A small workload the bad option is added to: a run that accepts it stays short."""


class Case:
    """One input: its argv (file names under the run's folder as {dir}), the files to make
    first (name -> bytes), and which of them the run may replace."""

    def __init__(self, kind: str, argv: list[str], files: dict[str, bytes] | None = None,
                 may_change: tuple[str, ...] = ()):
        self.kind, self.argv, self.files, self.may_change = kind, argv, files or {}, may_change


def _profile_bytes(rng: random.Random) -> bytes:
    """The committed CPU profile, damaged one way drawn from `rng`."""
    text = Path(damaged.PROFILE).read_text()
    how = rng.choice(["truncate", "flip", "number", "type", "nest", "drop"])
    if how == "truncate":
        return text[: rng.randrange(len(text))].encode()
    if how == "flip":
        b = bytearray(text.encode())
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    d = json.loads(text)
    g = rng.choice(d["compute"]["groups"])
    if how == "number":
        bad = rng.choice([0.0, -1.0, 1e300, 1e-300, float("nan"), float("inf"), 10 ** 30, True])
        where = rng.choice(["point_s", "point_flops", "overhead", "rate", "latency", "bandwidth", "slowdown"])
        if where.startswith("point"):
            g["points"][rng.randrange(len(g["points"]))][0 if where == "point_flops" else 1] = bad
        elif where == "overhead":
            g["fit"]["overhead_s"] = bad
        elif where == "rate":
            g["fit"]["flops_per_s"] = bad
        elif where in ("latency", "bandwidth"):
            d["link"]["latency_s" if where == "latency" else "bandwidth_bytes_per_s"] = bad
        else:
            d.setdefault("contention", {})["slowdown_in_flight"] = bad
    elif how == "type":
        key = rng.choice(["compute", "link", "contention", "version", "format", "measured_on"])
        d[key] = rng.choice(["text", 7, [], None, {"a": 1}])
    elif how == "nest":
        return ('{"format": "ringsim-profile", "x": ' + damaged.deep_json(rng.choice([100, 5000, 200000])) + "}").encode()
    else:
        del g["points"][: rng.randint(0, len(g["points"]))]
        g.pop(rng.choice(["fit", "dtype", "mask"]), None)
    return json.dumps(d).encode()


def _trace_bytes(rng: random.Random, archive: bytes) -> bytes:
    how = rng.choice(["truncate", "claims", "bomb", "flip", "json-types", "empty", "header"])
    if how == "truncate":
        return archive[: rng.randrange(len(archive))]
    if how == "claims":
        member = rng.choice(["start_s.npy", "rank.npy", "flops.npy"])
        shape = (rng.choice([10 ** 11, 2 ** 40, 10 ** 9]),)
        return damaged.archive_with({member: damaged.npy_claiming(shape, b"\0" * 64)}, base=archive)
    if how == "bomb":
        return damaged.claim_size(archive, rng.choice(["end_s.npy", "header.json"]), rng.choice([2 ** 32 - 16, 10 ** 9]))
    if how == "flip":
        b = bytearray(archive)
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if how == "json-types":
        d = {"format": "ringsim-trace", "version": 3, "source": "simulated", "n_gpus": rng.choice([2, 0, -1, 1e9]),
             "streams": ["compute"], "kinds": ["fwd"], "columns": {"rank": [0, "a"], "start_s": [float("nan")]}}
        return json.dumps(d).encode()
    if how == "header":
        return damaged.archive_with({"header.json": damaged.deep_json(rng.choice([100, 100000])).encode()},
                                    base=archive)
    return b""


def _spec_text(rng: random.Random) -> str:
    how = rng.choice(["range", "deep", "types", "product", "aliases", "unknown"])
    if how == "range":
        end, by = rng.choice([10 ** 8, 10 ** 12, 10 ** 30]), rng.choice(["step: 1", "times: 1.0000001"])
        return f"seq: {{from: 1, to: {end}, {by}}}\n"
    if how == "deep":
        return "gpus: " + damaged.deep_json(rng.choice([80, 1000, 100000])) + "\n"
    if how == "types":
        return f"gpus: {rng.choice(['[a, b]', '{x: 1}', 'null', '-3', '1e999', '[[8]]'])}\nseq: 4096\n"
    if how == "product":
        return "".join(f"{k}: {{from: 1, to: 4000, step: 1}}\n" for k in rng.sample(["seed", "seq", "batch", "heads"], 2))
    if how == "aliases":
        return "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n" \
               "gpus: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    return f"{rng.choice(['warp', 'json', 'trace', 'force'])}: 1\n"


def _bench_bytes(rng: random.Random) -> bytes:
    d = damaged.bench_dict(kind=rng.choice(["cpu", "cuda"]),
                           time_s=rng.choice([0.0, 1e300, 1e-300, float("inf"), float("nan"), -1.0, 0.01]))
    how = rng.choice(["version", "none", "types", "as-is"])
    if how == "version":
        d["version"] = rng.choice([0, 2, 99, "1", None])
    elif how == "types":
        d["compute"] = rng.choice(["x", {}, [1, 2], None])
    elif how == "none":
        d.pop(rng.choice(["format", "device", "compute"]))
    return json.dumps(d).encode()


def bad_option(rng: random.Random) -> Case:
    cmd = rng.choice(["simulate", "simulate", "compare", "step", "plan", "sweep", "gemm", "hw run", "hw bench",
                      "validate", "calibrate", "trace import", "dashboard"])
    v = rng.choice(BAD_NUMBERS)
    if cmd in ("simulate", "compare"):
        flag = rng.choice(SIMULATE_NUMERIC + SIMULATE_WORDS)
        if flag in SIMULATE_WORDS:
            v = rng.choice(BAD_WORDS)
        extra = [] if cmd == "simulate" else rng.choice([[], ["--schemes", rng.choice(["all", "", ",", "ring,x"])],
                                                         ["--impls", rng.choice(["all", "", "te,,"])]])
        return Case("bad option", [cmd, *SMALL, flag, v, *extra, "--json"])
    if cmd == "step":
        return Case("bad option", ["step", "--model", "llama3-8b", "--seq", "8k", "--global-batch", "64k",
                                   rng.choice(STEP_NUMERIC), v, "--json"])
    if cmd == "plan":
        return Case("bad option", ["plan", "--model", "llama3-8b", "--seq", "16k", rng.choice(PLAN_NUMERIC), v,
                                   "--json"])
    if cmd == "sweep":
        flag = rng.choice(["--workers", "--batch-size", "--scheduler", "--format"])
        return Case("bad option", ["sweep", "{dir}/ok.yaml", "--out", "{dir}/out.csv", flag, v],
                    {"ok.yaml": b"gpus: 2\nseq: 4096\n"})
    if cmd == "gemm":
        return Case("bad option", ["gemm", "--m", v, "--n", "64", "--k", "64", "--json"])
    if cmd == "hw run":
        flag = rng.choice(["--gpus", "--seq", "--batch", "--heads", "--head-dim", "--repeats", "--warmup",
                           "--threads", "--timeout"])
        bad = rng.choice(["0", "-1", "nan", "", "abc", "1e300", "-5"])
        return Case("bad option", ["hw", "run", flag, bad])
    if cmd == "hw bench":
        flag = rng.choice(["--samples", "--warmup", "--batch", "--parts", "--dtypes", "--compute-passes"])
        bad = rng.choice(["0", "-1", "nan", "", "abc", "everything"])
        return Case("bad option", ["hw", "bench", flag, bad, "--output", "{dir}/bench.json"])
    if cmd == "validate":
        flag = rng.choice(["--gpus", "--repeats", "--rounds", "--heads", "--kv-heads", "--head-dim", "--replays",
                           "--warmup", "--reference-s", "--remeasure", "--seqs"])
        bad = rng.choice(["0", "-1", "nan", "abc", "1e300", "-5"])
        return Case("bad option", ["validate", "--profile", damaged.PROFILE, "--quick", flag, bad])
    if cmd == "calibrate":
        flag = rng.choice(["--tolerance", "--replays", "--gpu"])
        bad = {"--tolerance": ["0", "-1", "nan", "abc", "5", "inf"], "--replays": ["0", "-1", "nan", "abc"],
               "--gpu": ["Z80", "", "H100-SXM"]}[flag]
        return Case("bad option", ["calibrate", "--check", damaged.PROFILE, flag, rng.choice(bad)])
    if cmd == "trace import":
        return Case("bad option", ["trace", "import", rng.choice(["{dir}/none.json", "", "{dir}", "/dev/null"])])
    flag = rng.choice(["--port", "--threads", "--workers", "--profile", "--traces-dir"])
    bad = {"--port": rng.choice(["0", "-1", "70000", "abc"]), "--threads": rng.choice(["0", "-1", "1000"]),
           "--workers": rng.choice(["0", "-2", "100"]), "--profile": "{dir}/none.json",
           "--traces-dir": "{dir}/nowhere"}[flag]
    return Case("bad option", ["dashboard", flag, bad])


def boundary(rng: random.Random) -> Case:
    g = rng.choice([1, 2, 3, 1024, 4096, 65536, 2 ** 20])
    seq = rng.choice([1, g, 2 * g, 2 ** 31, 2 ** 31 + 2 * g, 10 ** 15])
    hd = rng.choice([1, 8, 255, 256, 257, 512, 10 ** 6])
    heads = rng.choice([1, 2 ** 16, 10 ** 7])
    cmd = rng.choice(["simulate", "compare", "step", "plan"])
    if cmd == "step":
        return Case("boundary", ["step", "--model", "llama3-8b", "--seq", str(seq), "--global-batch",
                                 str(seq * rng.choice([1, 2 ** 20])), "--cp", str(rng.choice([1, 2, 1024])), "--json"])
    if cmd == "plan":
        return Case("boundary", ["plan", "--model", "llama3-405b", "--seq", str(seq), "--nodes",
                                 str(rng.choice([1, 10 ** 6])), "--json"])
    if cmd == "compare" and 64 < g < 65536:
        # every scheme's variants at 1,024 or 4,096 GPUs is a long run (over 15 minutes for 4,096 on
        # 2 cores), not a hostile one; 65,536 GPUs and more are refused by the memory estimate
        g = 64
    argv = [cmd, "--gpus", str(g), "--seq", str(seq), "--head-dim", str(hd), "--heads", str(heads),
            "--kv-heads", str(heads), "--json"]
    if cmd == "compare":
        argv += ["--schemes", "all"]
    return Case("boundary", argv)


def damaged_file(rng: random.Random, archive: bytes) -> Case:
    what = rng.choice(["profile", "profile", "trace", "trace", "spec", "bench", "gpu-profile"])
    if what == "profile":
        cmd = rng.choice([["simulate", *SMALL], ["compare", *SMALL], ["plan", "--model", "llama3-8b", "--seq", "16k",
                                                                      "--memory-gb", "80"],
                          ["step", "--model", "llama3-8b", "--seq", "8k", "--global-batch", "64k"]])
        return Case("damaged file", [*cmd, "--profile", "{dir}/profile.json", "--json"],
                    {"profile.json": _profile_bytes(rng)})
    if what == "gpu-profile":
        d = json.loads(Path(ROOT / "bench/results/gpu/h200/profile-published.json").read_text())
        k = next(iter(d["kernels"].values()))
        choice = rng.choice(["floor", "scale", "version", "gpu"])
        if choice == "floor":
            k["floors"][next(iter(k["floors"]))] = rng.choice([-1, 1e300, float("nan"), "x"])
        elif choice == "scale":
            k["rate_scale"] = {g: rng.choice([0, -1, 1e300, float("inf")]) for g in (k.get("rate_scale") or {"fwd": 1})}
        elif choice == "version":
            d["version"] = rng.choice([0, 99, "1"])
        else:
            d["gpu"] = rng.choice(["Z80", "", None])
        return Case("damaged file", ["simulate", *SMALL, "--profile", "{dir}/gpu.json", "--json"],
                    {"gpu.json": json.dumps(d).encode()})
    if what == "trace":
        name = rng.choice(["t.npz", "t.json"])
        data = _trace_bytes(rng, archive)
        cmd = rng.choice([["calibrate", "--from-traces", "{dir}/" + name, "-o", "{dir}/new-profile.json"],
                          ["validate", "--trace", "{dir}/" + name], ["trace", "import", "{dir}/" + name]])
        return Case("damaged file", cmd, {name: data})
    if what == "spec":
        ext = rng.choice(["yaml", "toml"])
        text = _spec_text(rng)
        if ext == "toml":
            text = text.replace(": ", " = ").replace("{from", "{from").replace(", ", ", ")
        return Case("damaged file", ["sweep", f"{{dir}}/spec.{ext}", *rng.choice([["--dry-run"], ["--out", "{dir}/o.csv"]])],
                    {f"spec.{ext}": text.encode()})
    return Case("damaged file", ["calibrate", "{dir}/bench.json", "-o", "{dir}/new-profile.json"],
                {"bench.json": _bench_bytes(rng)})


def valid_config(rng: random.Random) -> Case:
    g = rng.choice([1, 2, 3, 4, 8, 16])
    seq = str(g * rng.choice([96, 384, 1536]))
    wl = ["--gpus", str(g), "--seq", seq, "--heads", str(rng.choice([8, 16, 32])), "--kv-heads",
          str(rng.choice([1, 2, 4, 8])), "--head-dim", str(rng.choice([32, 64, 80, 96, 128, 160, 192, 256])),
          "--dtype", rng.choice(["bf16", "fp16", "fp32"]), rng.choice(["--causal", "--no-causal"]),
          "--pass", rng.choice(["fwd", "bwd", "fwdbwd"]),
          "--gpu", rng.choice(["H100-SXM", "H200", "A100-SXM-80GB", "B200", "MI300X", "L40S", "RTX-4090"])]
    cmd = rng.choice(["simulate", "simulate", "compare", "step", "plan"])
    if cmd == "simulate":
        return Case("valid config", ["simulate", *wl, "--scheme", rng.choice(["ring", "allgather", "ulysses", "hybrid"]),
                                     "--layout", rng.choice(["contiguous", "striped", "zigzag"]),
                                     "--sync", rng.choice(["step", "buffered"]),
                                     "--impl", rng.choice(["ideal", "te", "rfa", "torch", "usp"]), "--json"])
    if cmd == "compare":
        return Case("valid config", ["compare", *wl, *rng.choice([[], ["--schemes", "all"], ["--impls", "all"]]),
                                     "--json"])
    if cmd == "step":
        s = rng.choice([2048, 8192])
        return Case("valid config", ["step", "--model", rng.choice(["llama3-8b", "llama3-70b"]), "--seq", str(s),
                                     "--global-batch", str(s * rng.choice([8, 64])), "--tp", str(rng.choice([1, 2, 8])),
                                     "--cp", str(rng.choice([1, 2])), "--pp", str(rng.choice([1, 2, 4])),
                                     "--zero", str(rng.choice([0, 1, 3])), "--json"])
    return Case("valid config", ["plan", "--model", "llama3-8b", "--seq", rng.choice(["16k", "64k"]),
                                 "--gpus-per-node", str(rng.choice([2, 4, 8])), "--json"])


def kept_output(rng: random.Random) -> Case:
    """An output named over a file that exists, without --force: it must be refused and kept."""
    cmd = rng.choice([["simulate", *SMALL, "--trace", "{dir}/kept.npz"],
                      ["simulate", *SMALL, "--chrome-trace", "{dir}/kept.json"],
                      ["step", "--model", "llama3-8b", "--seq", "8k", "--global-batch", "64k", "--trace",
                       "{dir}/kept.npz"],
                      ["calibrate", "{dir}/bench.json", "-o", "{dir}/kept.json"],
                      ["trace", "import", "{dir}/none.json", "--out", "{dir}/kept.parquet"]])
    return Case("kept output", cmd, {"kept.npz": b"the user's own file", "kept.json": b"{\"mine\": true}",
                                     "kept.parquet": b"PAR1 mine", "bench.json": json.dumps(damaged.bench_dict()).encode()})


def generate(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    archive = damaged.trace_archive()
    makers: list[tuple[Callable[[], Case], int]] = [
        (lambda: bad_option(rng), 35), (lambda: boundary(rng), 15), (lambda: damaged_file(rng, archive), 25),
        (lambda: valid_config(rng), 18), (lambda: kept_output(rng), 7)]
    pool = [m for m, w in makers for _ in range(w)]
    return [rng.choice(pool)() for _ in range(count)]


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def impossible(argv: list[str], out: str) -> str | None:
    """The invariant a --json output breaks, or None (not JSON output: nothing to check)."""
    if "--json" not in argv:
        return None
    try:
        d = json.loads(out)
    except ValueError:
        return "its --json output is not JSON"
    try:
        cmd = argv[0]
        if cmd == "simulate":
            check_run(d, argv)
        elif cmd == "compare":
            check_rows(d["rows"], {"argv": " ".join(argv)})
        elif cmd == "step":
            check_step(d, argv)
        elif cmd == "plan":
            for c in d["candidates"]:
                (check_step if "mfu" in c else check_run)(c, argv)
    except RingsimError as e:
        return str(e)
    except (KeyError, TypeError) as e:
        return f"its output lacks {e}"
    return None


def run_case(i: int, case: Case, timeout_s: float, work: Path) -> dict[str, Any]:
    folder = work / f"case{i:04d}"
    folder.mkdir()
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    before = {name: _digest(folder / name) for name in case.files}
    argv = [a.replace("{dir}", str(folder)) for a in case.argv]
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    try:
        p = subprocess.run([sys.executable, "-m", "sim.cli.main", *argv], cwd=folder, env=env,
                           capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = None, "", (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else ""
    wall = time.monotonic() - t0
    lost = [name for name, h in before.items() if name not in case.may_change and _digest(folder / name) != h]
    lines = [x for x in err.strip().splitlines() if x.strip()]
    if rc is None:
        verdict, why = "hang", f"still running after {timeout_s:g} s"
    elif "Traceback (most recent call last)" in err or rc < 0:
        verdict, why = "traceback", (lines[-1] if lines else f"killed by signal {-rc}")
    elif lost:
        verdict, why = "lost file", f"changed or removed: {', '.join(lost)}"
    elif rc == 0:
        bad = impossible(argv, out)
        verdict, why = ("impossible", bad) if bad else ("valid", "")
    elif rc == 2:
        verdict, why = ("clean error", lines[0]) if len(lines) == 1 else ("messy error", " | ".join(lines[-3:]))
    else:
        verdict, why = "other exit", f"status {rc}: {lines[-1] if lines else ''}"
    shutil.rmtree(folder, ignore_errors=True)
    return {"index": i, "kind": case.kind, "argv": argv, "rc": rc, "verdict": verdict, "why": why[:400],
            "wall_s": round(wall, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=400, help="inputs to generate and run (default 400)")
    ap.add_argument("--jobs", type=int, default=2, help="processes at once (default 2)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds before a run counts as a hang (default 600: a 4,096-GPU ring plays for minutes on "
                         "a loaded 2-core host)")
    ap.add_argument("--seed", type=int, default=53, help="the generator's seed (default 53)")
    ap.add_argument("--out", default=None, help="JSON results (default bench/results/checks/<machine>/hostile-run.json)")
    add_force(ap)
    a = ap.parse_args()
    out = Path(a.out) if a.out else RESULTS / "checks" / cpu_host() / "hostile-run.json"
    keep_results("hostile_run", out, force=a.force, make_folders=True)
    cases = generate(a.count, a.seed)
    work = Path(tempfile.mkdtemp(prefix="ringsim-hostile-"))
    t0 = time.monotonic()
    results: list[dict[str, Any]] = []
    try:
        with futures.ThreadPoolExecutor(a.jobs) as pool:
            jobs = [pool.submit(run_case, i, c, a.timeout, work) for i, c in enumerate(cases)]
            for n, f in enumerate(futures.as_completed(jobs), 1):
                r = f.result()
                results.append(r)
                if r["verdict"] not in ("clean error", "valid"):
                    print(f"[{n}/{len(cases)}] {r['verdict']}: ringsim {' '.join(r['argv'])[:200]}: {r['why'][:200]}",
                          flush=True)
                elif n % 50 == 0:
                    print(f"[{n}/{len(cases)}] {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results.sort(key=lambda r: r["index"])
    classes = ["traceback", "hang", "impossible", "lost file", "messy error", "other exit", "clean error", "valid"]
    kinds = sorted({r["kind"] for r in results})
    counts = {k: {c: sum(1 for r in results if r["kind"] == k and r["verdict"] == c) for c in classes} for k in kinds}
    totals = {c: sum(counts[k][c] for k in kinds) for c in classes}
    print()
    print(f"{'input kind':16}" + "".join(f"{c:>13}" for c in classes))
    for k in kinds:
        print(f"{k:16}" + "".join(f"{counts[k][c]:>13}" for c in classes))
    print(f"{'all':16}" + "".join(f"{totals[c]:>13}" for c in classes))
    elapsed = time.monotonic() - t0
    print(f"{len(results)} inputs, seed {a.seed}, {a.jobs} at once, timeout {a.timeout:g} s: {elapsed:.0f} s")
    save_json(out, {"command": " ".join(["python", "bench/checks/hostile_run.py", *sys.argv[1:]]),
                    "seed": a.seed, "count": len(results), "jobs": a.jobs, "timeout_s": a.timeout,
                    "elapsed_s": round(elapsed, 1), "totals": totals, "by_kind": counts,
                    "results": results}, force=a.force, indent=1)
    print(f"wrote {out}")
    bad = sum(totals[c] for c in classes[:4])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
