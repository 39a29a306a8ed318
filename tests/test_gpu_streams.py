"""Streams on one GPU: priorities, preemption at block boundaries, its delay and cap, copies, events."""

from __future__ import annotations

from aisim.engine.gpu import ComputeEngine, GpuDevice, GraphRun, Job, Op
from aisim.engine.kernel import Kernel, VirtualClock
from aisim.engine.timeline import Timeline
from aisim.scenario.hardware import Gpu

US = 1_000
MS = 1_000_000


def engine(**preemption: int | None) -> tuple[Kernel, Timeline, ComputeEngine]:
    kernel, timeline = Kernel(), Timeline()
    return kernel, timeline, ComputeEngine(kernel, "g", timeline, **preemption)  # type: ignore[arg-type]


def launch(kernel: Kernel, compute: ComputeEngine, at: int, name: str, priority: int, work: int) -> None:
    kernel.at(at, lambda: compute.submit(Job(name, "test", f"s{priority}", priority, work, lambda job: None)))


def ends(kernel: Kernel, timeline: Timeline) -> dict[str, tuple[int, int]]:
    """Each kernel's (start, end), after running everything."""
    VirtualClock(kernel).run()
    return {r["name"]: (r["start_ns"], r["t_ns"]) for r in timeline.records() if r["type"] == "kernel"}


def test_waiting_kernels_run_by_priority_and_equal_priorities_share_the_sms() -> None:
    kernel, timeline, compute = engine(context_switch_ns=10 * US)
    for name, priority in (("low1", 0), ("mid", -1), ("high", -3), ("low2", 0)):
        launch(kernel, compute, 0, name, priority, 1 * MS)
    spans = ends(kernel, timeline)
    # low1 started first; the switch to `mid` drains it for 10 us, then `high` (arrived meanwhile) goes first
    assert spans["high"] == (10 * US, 1010 * US)
    assert spans["mid"] == (1010 * US, 2010 * US)
    # low1 has 990 us left, low2 1 ms: sharing the SMs, low1 ends after 2 x 990 us, low2 10 us later
    assert spans["low1"] == (0, 3990 * US)
    assert spans["low2"] == (2010 * US, 4000 * US)


def test_a_higher_priority_kernel_waits_for_resident_blocks_and_never_interrupts_mid_kernel() -> None:
    kernel, timeline, compute = engine(context_switch_ns=25 * US)
    launch(kernel, compute, 0, "batch", 0, 10 * MS)
    launch(kernel, compute, 2 * MS, "chat", -5, 1 * MS)
    spans = ends(kernel, timeline)
    assert spans["chat"] == (2 * MS + 25 * US, 3 * MS + 25 * US)  # after the 25 us drain
    assert spans["batch"] == (0, 11 * MS)  # it kept running during the drain: only chat's 1 ms is added
    preemption = next(r for r in timeline.records() if r["type"] == "preemption")
    assert (preemption["t_ns"], preemption["preempted_streams"], preemption["stream"]) == (2 * MS, "s0", "s-5")


def test_past_the_cap_a_higher_priority_kernel_waits_for_the_kernel_boundary() -> None:
    kernel, timeline, compute = engine(context_switch_ns=10 * US, max_per_second=1)
    launch(kernel, compute, 0, "batch", 0, 10 * MS)
    launch(kernel, compute, 1 * MS, "chat1", -5, 1 * MS)
    launch(kernel, compute, 3 * MS, "chat2", -5, 1 * MS)
    spans = ends(kernel, timeline)
    assert spans["chat1"] == (1010 * US, 2010 * US)
    assert spans["batch"][1] == 11 * MS
    assert spans["chat2"] == (11 * MS, 12 * MS)  # one preemption per second: it waits for batch to end
    assert compute.preempted == 1


def test_the_wait_threshold_delays_preemption_and_a_kernel_that_ends_first_avoids_it() -> None:
    kernel, timeline, compute = engine(context_switch_ns=10 * US, wait_threshold_ns=500 * US)
    launch(kernel, compute, 0, "long", 0, 10 * MS)
    launch(kernel, compute, 1 * MS, "urgent", -2, 1 * MS)
    launch(kernel, compute, 20 * MS, "short", 0, 200 * US)
    launch(kernel, compute, 20 * MS + 50 * US, "patient", -2, 1 * MS)
    spans = ends(kernel, timeline)
    assert spans["urgent"] == (1510 * US, 2510 * US)  # waited 500 us, then the 10 us switch
    assert spans["patient"] == (20 * MS + 200 * US, 21 * MS + 200 * US)  # `short` ended within the threshold
    assert compute.preempted == 1


def device() -> tuple[Kernel, Timeline, GpuDevice]:
    kernel, timeline = Kernel(), Timeline()
    gpu = Gpu.model_validate({"id": "g", "profile": "H100-SXM", "streams": [{"name": "a", "priority": -1}, {"name": "b"}]})
    return kernel, timeline, GpuDevice(kernel, "g", gpu, timeline)


def run_graph(ops: list[Op]) -> tuple[int, list[dict[str, object]]]:
    kernel, timeline, gpu = device()
    finished: list[int] = []
    GraphRun([gpu], ops, "test", lambda: finished.append(kernel.now))
    VirtualClock(kernel).run()
    return finished[0], [r for r in timeline.records() if r["type"] in ("kernel", "copy")]


def test_copies_overlap_with_kernels_of_other_streams_and_wait_for_their_own_stream() -> None:
    overlapped, _ = run_graph([Op("upload", "h2d", "b", 1 * MS), Op("kernel", "compute", "a", 1 * MS)])
    assert overlapped == 1 * MS
    serial, records = run_graph([Op("upload", "h2d", "a", 1 * MS), Op("kernel", "compute", "a", 1 * MS)])
    assert serial == 2 * MS
    kernel_record = next(r for r in records if r["type"] == "kernel")
    assert kernel_record["start_ns"] == 1 * MS  # stream order: after the copy on its stream


def test_a_cross_stream_event_makes_the_waiting_op_start_after_it() -> None:
    ops = [Op("compute", "compute", "a", 2 * MS), Op("download", "d2h", "b", 1 * MS, waits=(0,)),
           Op("other", "compute", "b", 1 * MS)]
    end, records = run_graph(ops)
    download = next(r for r in records if r["name"] == "download")
    other = next(r for r in records if r["name"] == "other")
    assert download["start_ns"] == 2 * MS  # cudaStreamWaitEvent: after `compute`, though stream b was free
    assert other["start_ns"] == 3 * MS  # stream order on b: after the download
    assert end == 4 * MS  # `other` (priority 0) waited for nothing else: the SMs were free after 2 ms
