"""Which host a profile belongs to: differences named field by field, and the warning
`ringsim simulate --profile` prints for a CPU profile measured elsewhere."""

import json

from sim.calibration.calibrate import calibrate
from sim.cli.main import main
from sim.hardware.host import differences, mismatch_line, this_host
from tests.sim.calibration.test_calibrate import bench

HERE = {"kind": "cpu", "device": "AMD EPYC (2 cores)", "cpu_count": 2, "torch": "2.13.0",
        "backend": "gloo", "threads_per_rank": 1, "hostname": "a"}


def test_differences_name_each_field_and_ignore_what_does_not_matter():
    assert differences(HERE, {**HERE, "hostname": "b", "torch": "2.13.0+cpu"}) == []
    other = {**HERE, "device": "Intel Xeon (4 cores)", "cpu_count": 4, "torch": "2.12.1", "threads_per_rank": 2}
    assert differences(HERE, other) == ["device AMD EPYC (2 cores) here Intel Xeon (4 cores)", "cores 2 here 4",
                                        "torch 2.13.0 here 2.12.1", "threads per rank 1 here 2"]
    # a field one side does not know is not compared
    assert differences({"device": "AMD EPYC (2 cores)"}, {**HERE, "backend": "nccl"}) == []
    line = mismatch_line(HERE, other, "p.json")
    assert line.startswith("warning: profile p.json was measured on another host (device AMD EPYC")
    assert "ringsim calibrate --check p.json" in line and "\n" not in line
    assert mismatch_line(HERE, HERE, "p.json") is None


def test_this_host_describes_a_cpu_host_like_a_profile_does():
    h = this_host(threads_per_rank=1)
    assert h["kind"] == "cpu" and h["backend"] == "gloo" and isinstance(h["cpu_count"], int)
    assert h["device"].endswith(f"({h['cpu_count']} cores)")


def test_simulate_warns_once_for_a_cpu_profile_from_another_host(tmp_path, capsys):
    here = this_host()
    b = bench()
    b["device"].update(name="Some Other CPU (64 cores)", cpu_count=64)
    path = tmp_path / "p.json"
    calibrate(b).save(path)
    assert main(["simulate", "--profile", str(path), "--gpus", "2", "--seq", "4096", "--dtype", "fp32",
                 "--json"]) == 0
    out = capsys.readouterr()
    json.loads(out.out)                                   # stdout stays one JSON object
    (line,) = out.err.strip().splitlines()
    assert line.startswith(f"warning: profile {path} was measured on another host")
    assert f"cores 64 here {here['cpu_count']}" in line
    # measured here: no word
    b["device"].update(name=here["device"], cpu_count=here["cpu_count"], torch=here["torch"])
    calibrate(b).save(path, overwrite=True)
    assert main(["simulate", "--profile", str(path), "--gpus", "2", "--seq", "4096", "--dtype", "fp32"]) == 0
    assert capsys.readouterr().err == ""
