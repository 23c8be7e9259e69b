"""The players (sim.engine.players): SimPy and the wave player give the per-op reference times
bit for bit, on the ring and on any schedule, with resources shared or not."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.play import play, simulate
from sim.engine.schedule import ComputeOp, Schedule, TransferOp, cut_waves
from sim.scenario.config import Workload
from tests.sim.reference import LAYOUTS, any_schedule, hardware, reference_trace_spans, scenario


@settings(max_examples=40, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), n=st.integers(1, 7), causal=st.booleans(),
       overlap=st.booleans(), pass_=st.sampled_from(["fwd", "bwd", "fwdbwd"]),
       gbps=st.sampled_from([0.001, 0.3, 1000.0]), overhead_us=st.sampled_from([0.0, 5.0]),
       sync=st.sampled_from(["step", "buffered"]))
def test_recurrence_player_gives_the_simpy_trace_bit_for_bit(layout, n, causal, overlap, pass_,
                                                            gbps, overhead_us, sync):
    hw = hardware(tflops=1e-3, gbps=gbps, overhead_us=overhead_us)
    sc = scenario(n=n, seq=4 * n, layout=layout, causal=causal, overlap=overlap, pass_=pass_,
                  hw=hw, heads=2, kv_heads=1, head_dim=4, sync=sync)
    a, b = simulate(sc), simulate(sc, player="recurrence")
    assert a.spans == b.spans


@settings(max_examples=150, deadline=None)
@given(case=any_schedule(), overhead_us=st.sampled_from([0.0, 3.0]), latency_us=st.sampled_from([0.0, 2.0]))
def test_any_schedule_plays_the_same_on_waves_per_op_and_simpy(case, overhead_us, latency_us):
    n, ops = case
    hw = hardware(tflops=1e-3, gbps=0.01, latency_us=latency_us, overhead_us=overhead_us)
    w = Workload()
    schedule = Schedule.from_ops(n, ops)
    schedule.check()
    assert schedule.ops == ops
    rebuilt = Schedule.from_ops(n, list(ops))
    rebuilt._ops = None              # materialized again from the columns
    assert rebuilt.ops == ops
    want = reference_trace_spans(ops, n, hw, w)
    assert play(schedule, hw, w, player="recurrence").spans == want
    assert play(schedule, hw, w, player="simpy").spans == want


@settings(max_examples=100, deadline=None)
@given(case=any_schedule(), ports=st.integers(1, 3), data=st.data())
def test_transfers_sharing_a_resource_play_the_same_on_both_players(case, ports, data):
    """Links that meet in one resource (a NIC port, say) carry their transfers one at a
    time in schedule order, whoever sends them: both players and the reference agree."""
    n, ops = case
    resources = [f"GPU {op.rank} compute" if isinstance(op, ComputeOp)
                 else f"port {data.draw(st.integers(0, ports - 1))}" for op in ops]
    hw = hardware(tflops=1e-3, gbps=0.01, latency_us=1.0)
    w = Workload()
    schedule = Schedule.from_ops(n, ops, resources)
    schedule.check()
    assert [schedule.resource_names[r] for r in schedule.resource] == resources
    want = reference_trace_spans(ops, n, hw, w, resources)
    assert play(schedule, hw, w, player="recurrence").spans == want
    assert play(schedule, hw, w, player="simpy").spans == want


@settings(max_examples=150, deadline=None)
@given(case=any_schedule(), ports=st.integers(1, 4), data=st.data())
def test_operations_holding_several_shared_resources_play_as_the_reference(case, ports, data):
    """A flow holds its sender's port and its receiver's (a NIC each, say), and ports are
    shared: an op starts when every resource it holds is free, in schedule order per
    resource. The wave player, SimPy and the per-op reference agree bit for bit."""
    n, ops = case
    resources = []
    for op in ops:
        own = f"GPU {op.rank} compute" if isinstance(op, ComputeOp) else f"port {data.draw(st.integers(0, ports - 1))} out"
        more = data.draw(st.lists(st.sampled_from([f"port {p} in" for p in range(ports)] + ["GPU 0 compute"]),
                                  max_size=2, unique=True))
        resources.append(tuple([own] + [m for m in more if m != own]))
    hw = hardware(tflops=1e-3, gbps=0.01, latency_us=1.0, overhead_us=data.draw(st.sampled_from([0.0, 2.0])))
    w = Workload()
    schedule = Schedule.from_ops(n, ops, resources)
    schedule.check()
    held = [tuple(schedule.resource_names[r] for r in col if r >= 0) for col in schedule.resource_rows().T]
    assert held == resources
    want = reference_trace_spans(ops, n, hw, w, resources)
    assert play(schedule, hw, w, player="recurrence").spans == want
    assert play(schedule, hw, w, player="simpy").spans == want
    # the waves cut from the columns are those cut from the operations
    assert cut_waves(schedule.resource_rows(), schedule.after).tolist() == schedule.wave_starts.tolist()


def test_a_flow_waits_for_the_receiving_port_as_well_as_the_sending_one():
    # 0 -> 2 and 1 -> 2 leave through different ports but enter through one: they queue
    ops = [TransferOp(0, 0, 2, "a2a", 0, 0, 1000, (0,), ()), TransferOp(1, 1, 2, "a2a", 0, 1, 1000, (1,), ())]
    hw = hardware(gbps=1e-3, latency_us=0.0)          # 1 ms per 1000 bytes
    shared = Schedule.from_ops(3, ops, [("0 out", "2 in"), ("1 out", "2 in")])
    assert shared.wave_starts.tolist() == [0, 1, 2]
    for player in ("recurrence", "simpy"):
        trace = play(shared, hw, Workload(), player=player)
        sends = sorted((s.start_s, s.end_s) for s in trace.spans if s.stream == "send")
        assert [t for span in sends for t in span] == pytest.approx([0.0, 1e-3, 1e-3, 2e-3])


def test_two_links_through_one_port_queue_behind_each_other():
    # rank 0 -> 1 and rank 2 -> 1 both enter through one port: the second waits
    ops = [TransferOp(0, 0, 1, "kv", 0, 0, 1000, (0,), ()), TransferOp(1, 2, 1, "kv", 0, 2, 1000, (2,), ())]
    hw = hardware(gbps=1e-3, latency_us=0.0)          # 1 ms per 1000 bytes
    apart = play(Schedule.from_ops(3, ops), hw, Workload(), player="recurrence")
    shared = Schedule.from_ops(3, ops, ["port 1 in", "port 1 in"])
    for player in ("recurrence", "simpy"):
        trace = play(shared, hw, Workload(), player=player)
        sends = sorted(t for s in trace.spans if s.stream == "send" for t in (s.start_s, s.end_s))
        assert sends == pytest.approx([0.0, 1e-3, 1e-3, 2e-3])
    sends = sorted(t for s in apart.spans if s.stream == "send" for t in (s.start_s, s.end_s))
    assert sends == pytest.approx([0.0, 0.0, 1e-3, 1e-3])


@settings(max_examples=60, deadline=None)
@given(scheme=st.sampled_from(["allgather", "ulysses", "hybrid", "ring"]), per_node=st.sampled_from([1, 2, 4]),
       nodes=st.integers(1, 3), nic_share=st.sampled_from([1, 2, 4]), causal=st.booleans(),
       pass_=st.sampled_from(["fwd", "bwd", "fwdbwd"]), groups=st.sampled_from([1, 2]),
       placement=st.sampled_from(["ulysses-inner", "ring-inner"]), gbps=st.sampled_from([0.01, 1.0, 100.0]))
def test_scheme_schedules_with_shared_nics_play_the_same_on_both_players_and_the_reference(
        scheme, per_node, nodes, nic_share, causal, pass_, groups, placement, gbps):
    """Flows between nodes meet on NICs shared by several GPUs: the wave player, SimPy and
    the per-op reference (each op holding all its resources) give one trace."""
    from hypothesis import assume

    from sim.errors import RingsimError
    from sim.scenario.config import Scenario
    from sim.schemes import get
    from tests.sim.reference import cluster, resources_of, run_by

    n = per_node * nodes
    hw = cluster(gpus_per_node=per_node, nics_per_node=max(per_node // nic_share, 1), tflops=1e-3,
                 nvlink_gbps=gbps, nic_gbps=gbps / 5, overhead_us=1.0)
    w = Workload(seq=16 * n, heads=4, kv_heads=2, head_dim=4, causal=causal, pass_=pass_)
    settings_ = {"allgather": dict(head_groups=groups), "hybrid": dict(placement=placement)}.get(scheme, {})
    try:
        sc = Scenario(workload=w, hardware=hw, n_gpus=n, **run_by(scheme, **settings_))
    except RingsimError:
        assume(False)
    schedule = get(scheme).build_schedule(sc)
    schedule.check()
    want = reference_trace_spans(schedule.ops, n, hw, w, resources_of(schedule))
    assert play(schedule, hw, w, player="recurrence").spans == want
    assert play(schedule, hw, w, player="simpy").spans == want


@pytest.mark.parametrize("layout", ["contiguous", "striped", "zigzag"])
@pytest.mark.parametrize("chunk", [5, 1 << 18])
def test_durations_timed_once_per_run_of_equal_blocks_are_each_ops_own(monkeypatch, layout, chunk):
    """durations_s times a run of equal blocks once (chunk by chunk): every op still gets
    the float the hardware's per-op method gives it, with the kernel table (rates by
    pass, mask and size) and with a model that has only the per-op methods."""
    from sim.engine import players
    from sim.engine.players import durations_s
    from sim.hardware.cluster import Gpu, Hardware
    from sim.schemes import get
    from tests.sim.reference import PerOpHardware, reference_durations, scenario

    monkeypatch.setattr(players, "_CHUNK", chunk)
    # the per-op transfer times of the link model (NCCL's depend on the communicator)
    unfused = Hardware(gpu=Gpu.preset("H100-SXM", kernel="fa2", merge="unfused"), comm_cost="link")
    for model in (Hardware(comm_cost="link"), unfused):
        for hw in (model, PerOpHardware(model)):
            sc = scenario(n=6, seq=6 * 1024, layout=layout, causal=True, pass_="fwdbwd", hw=Hardware())
            schedule = get("ring").build_schedule(sc)
            got = durations_s(schedule, hw, sc.workload).tolist()
            assert got == reference_durations(schedule.ops, model, sc.workload)


@settings(max_examples=60, deadline=None)
@given(case=any_schedule(), ports=st.integers(1, 3), lanes=st.integers(1, 4), data=st.data())
def test_the_wave_player_plays_columns_of_durations_each_as_alone(case, ports, lanes, data):
    """times_waves given ops x K durations: each column's starts and ends are those of
    that column played alone, bit for bit, shared resources and extra ones included."""
    import numpy as np

    from sim.engine.players import times_waves

    n, ops = case
    resources = []
    for op in ops:
        own = f"GPU {op.rank} compute" if isinstance(op, ComputeOp) else f"port {data.draw(st.integers(0, ports - 1))}"
        more = data.draw(st.lists(st.sampled_from([f"port {p} in" for p in range(ports)]), max_size=1))
        resources.append(tuple([own, *more]))
    schedule = Schedule.from_ops(n, ops, resources)
    dur = np.array(data.draw(st.lists(st.lists(st.sampled_from([0.0, 0.1, 1.0, 2.5, 1e-7]), min_size=lanes,
                                                max_size=lanes), min_size=len(ops), max_size=len(ops))))
    dur = dur.reshape(len(ops), lanes)
    start, end = times_waves(schedule, dur)
    for k in range(lanes):
        one_start, one_end = times_waves(schedule, np.ascontiguousarray(dur[:, k]))
        assert start[:, k].tolist() == one_start.tolist() and end[:, k].tolist() == one_end.tolist()
