"""The engine's tensors in the GPU memory pools: load, per-step activations, other processes, OOM."""

from __future__ import annotations

from aisim.engine.batcher import TritonEngine
from aisim.engine.gpu_memory import OrtArena
from aisim.engine.memory import activation_peak, activation_tensors, plan
from aisim.engine.report import build_report
from aisim.engine.simulation import Simulation
from aisim.scenario import load_scenario
from aisim.scenario.models import Model
from aisim.scenario.presets import GIB, GPU_PROFILES

from .conftest import SCENARIOS
from .engine_helpers import llama, poisson, run, scenario

OOM_TEXT = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "


def test_the_oom_scenario_ends_in_pytorchs_out_of_memory_error_and_loses_no_request() -> None:
    sim = run(load_scenario(SCENARIOS / "oom.yaml"), base_dir=SCENARIOS)
    report = build_report(sim)
    model = report["models"]["llama3-8b"]
    assert model["state"] == "DEAD" and model["crash"].startswith(OOM_TEXT)
    assert "GPU 0 has a total capacity of 22.04 GiB of which " in model["crash"]
    assert "Process 100000 has " in model["crash"]  # the memory hog, as NVML lists it
    counts = model["requests"]
    assert counts["arrived"] == counts["completed"] + counts["failed"] and counts["failed"] > 0
    records = list(sim.timeline.records())
    hog = next(r for r in records if r["type"] == "fault")
    crash = next(r for r in records if r["type"] == "oom")
    assert hog["t_ns"] == 40 * 10**9 and crash["t_ns"] >= 45 * 10**9  # the first long prefill after the hog
    assert model["crash"] == "torch.OutOfMemoryError: " + crash["message"]
    levels = [r["level"] for r in records if r["type"] == "memory" and r["t_ns"] <= hog["t_ns"]]
    assert levels == ["warning", "critical"]  # 90 % reserved by vLLM, then the hog
    pool = report["gpus"]["gpu0"]
    assert pool["num_ooms"] == 1 and pool["num_alloc_retries"] == 1  # PyTorch frees its cache and retries first
    assert pool["entered"] == {"warning": 1, "critical": 1}
    assert [r["state"] for r in records if r["type"] == "model_state"][-1] == "UNAVAILABLE"


def test_requests_of_a_dead_engine_fail_with_vllms_engine_dead_error() -> None:
    sim = run(load_scenario(SCENARIOS / "oom.yaml"), base_dir=SCENARIOS)
    failed = [r for r in sim.requests if r.outcome == "failed"]
    assert {r.error for r in failed} == {"EngineCore encountered an issue. See stack trace (above) for the root cause."}
    crash_time = next(r["t_ns"] for r in sim.timeline.records() if r["type"] == "oom")
    assert all(r.finished_at >= crash_time for r in failed)


def test_a_hog_that_lets_go_gives_its_memory_back() -> None:
    hog = {"kind": "oom", "size": "2GiB", "hold": "1s", "trigger": {"at": "1s"}, "scope": {"gpus": ["g"]}}
    sim = run(scenario([llama()], [poisson("2/s", 10, 100, 20)], faults=[hog]))
    records = [r for r in sim.timeline.records() if r["type"] == "fault"]
    assert [(r["t_ns"], r["kind"]) for r in records] == [(10**9, "oom"), (2 * 10**9, "oom_end")]
    assert records[0]["detail"] == "another process holds 2.00 GiB"  # PyTorch's format_size
    assert sim.pools["g"].device.other_processes == {}
    assert all(r.outcome == "completed" for r in sim.requests)


def test_power_of_two_rounding_keeps_vllms_default_plan_off_a_buddy_allocator() -> None:
    gpus = [{"id": "g", "profile": "A10G", "memoryPool": {"allocator": "buddy"}}]
    sim = run(scenario([llama()], [poisson("2/s", 3, 100, 20)], gpus=gpus))
    failure = build_report(sim)["models"]["m"]["failure"]
    assert failure.startswith(OOM_TEXT)
    assert "reserved by PyTorch but unallocated" in failure
    assert all(r.outcome == "failed" for r in sim.requests)


def test_the_pool_holds_weights_kv_cache_and_cuda_graphs_tagged_and_steps_add_their_activations() -> None:
    sim = run(scenario([llama()], [poisson("4/s", 20, 300, 30)]))
    model = Model.model_validate(llama())
    memory = plan(model, GPU_PROFILES["H100-SXM"])
    arch = model.resolved()
    graphs = 512 * (2 * arch.hidden + 2 * arch.hidden + 2 * arch.intermediate) * 2  # forward activations at 512 tokens, BF16
    kv = memory.num_blocks * memory.block_size * memory.kv_bytes_per_token
    pool = sim.pools["g"]
    held = {"weights": 0, "kv_cache": 0, "cuda_graph": 0}
    for segment in pool.state().segments:
        for block in segment.blocks:
            if block.state == "allocated":
                held[block.tag] += block.requested
    assert held == {"weights": memory.weights // 32 * 32, "kv_cache": kv // 32 * 32, "cuda_graph": graphs}
    stats = pool.memory_stats()
    assert stats["allocated_bytes.all.current"] < stats["allocated_bytes.all.peak"]  # steps came and went


def test_steps_that_fit_a_cuda_graph_allocate_only_their_logits() -> None:
    def allocations(**engine: object) -> int:
        sim = run(scenario([llama(**engine)], [poisson("4/s", 20, 300, 30)]))
        return sim.pools["g"].memory_stats()["allocation.all.allocated"]

    assert allocations(cudaGraphs=False) > allocations() * 2  # eager steps allocate four tensors, graphed ones one


def test_activation_tensors_add_up_to_the_profiled_peak() -> None:
    arch = Model.model_validate(llama()).resolved()
    tensors = dict(activation_tensors(arch, 8192, 1024, 1))
    assert tensors["mlp"] == 8192 * 2 * 14336 * 2 and tensors["logits"] == 1024 * 128256 * 4
    assert sum(tensors.values()) == activation_peak(arch, 8192, 1024, 1)
    assert round(sum(tensors.values()) / GIB, 2) == 1.18  # vLLM logs 1.24 GiB for this model and these limits


def test_each_runtime_puts_what_it_loads_in_the_pool() -> None:
    models = [{"id": f"{runtime}-model", "family": "resnet-50", "runtime": runtime, "placement": {"gpus": ["g"]}}
              for runtime in ("tensorrt", "onnxruntime")]
    sources = [{"name": m["id"], "model": m["id"], "arrival": {"kind": "batch", "requests": 4}, "promptTokens": 1,
                "outputTokens": 0} for m in models]
    sim = run(scenario(models, sources, gpus=[{"id": "g", "profile": "T4"}]))
    assert all(r.outcome == "completed" for r in sim.requests)  # no vLLM start-up check between them
    layers = Model.model_validate(models[0]).resolved().layers
    # weights for both; TensorRT's execution context stays, and so does the region ONNX Runtime's arena took
    # for the runs (one: every run of one item fits in the first, 1 MiB)
    assert _allocated(sim) == {"weights": 2 * layers, "execution_context": 1, "onnxruntime_arena": 1}


def _allocated(sim: Simulation) -> dict[str, int]:
    """Allocated blocks of GPU `g`'s pool, by tag."""
    held: dict[str, int] = {}
    for segment in sim.pools["g"].state().segments:
        for block in segment.blocks:
            if block.state == "allocated":
                held[block.tag] = held.get(block.tag, 0) + 1
    return held


def test_an_onnx_runtime_arena_takes_regions_doubling_in_size_and_keeps_them() -> None:
    """BFC's kNextPowerOfTwo: a region of max(request, next), `next` from 1 MiB doubling per extension;
    a run that fits in a region it holds takes nothing."""
    arena, mib = OrtArena(), 1 << 20
    sizes = [1000, mib, 3 * mib // 2, 2 * mib, 10 * mib, 9 * mib, 11 * mib]
    assert [arena.extension(size) for size in sizes] == [mib, 0, 2 * mib, 0, 10 * mib, 0, 11 * mib]


def _python_backend(instances: int) -> tuple[Simulation, TritonEngine]:
    """A Python-backend Triton model (batch 1) with `instances` instances on a T4, and four requests arriving at
    once; the workload is started, no event has run."""
    model = {"id": "py", "family": "resnet-50", "runtime": "python", "placement": {"gpus": ["g"]},
             "kserve": {"maxBatchSize": 1, "instanceGroups": [{"count": instances}]}}
    sources = [{"name": "b", "model": "py", "arrival": {"kind": "batch", "requests": 4}, "promptTokens": 1,
                "outputTokens": 0}]
    sim = Simulation(scenario([model], sources, gpus=[{"id": "g", "profile": "T4"}]))
    (engine,) = sim.served_models[0].engines
    assert isinstance(engine, TritonEngine)
    sim.start_workload()
    return sim, engine


def test_a_triton_execution_frees_its_own_memory_and_not_another_instance_s() -> None:
    """Two instances of a Python-backend model run at once; the first to end used to free both executions'
    activations. At every event, each busy instance holds exactly one run's."""
    sim, engine = _python_backend(instances=2)
    overlapping = 0
    while sim.kernel.peek() is not None:
        sim.kernel.step()
        busy = sum(instance.busy for instance in engine.instances)
        assert _allocated(sim).get("activation:run", 0) == busy, f"at {sim.kernel.now} ns"
        overlapping += busy == 2
    assert overlapping and all(r.outcome == "completed" for r in sim.requests)


def test_a_triton_request_given_up_in_the_queue_is_canceled_and_one_given_up_while_running_is_served() -> None:
    """One instance, four requests at once: the first runs, three queue. The client of the running one and
    of one queued one go away: the queued one leaves the queue as a CANCELED failure, the running one
    finishes (counted as served: Triton does not stop an execution under way)."""
    sim, engine = _python_backend(instances=1)
    while len(sim.requests) < 4 or not any(i.busy for i in engine.instances):
        sim.kernel.step()
    running, queued = sim.requests[0], sim.requests[2]
    assert len(engine.queue) == 3 and queued in engine.queue
    sim.abort(running)
    sim.abort(queued)
    while sim.kernel.peek() is not None:
        sim.kernel.step()
    stats = engine.triton
    assert stats.failures == {"CANCELED": 1} and stats.fail.count == 1
    assert stats.success.count == 3 and stats.inference_count == 3 and stats.execution_count == 3
    assert [r.outcome for r in sim.requests] == ["aborted", "completed", "aborted", "completed"]


def test_a_memory_hog_fired_again_keeps_what_it_holds() -> None:
    """oom.yaml's hog asks for 3 GiB and gets what is free; fired a second time (the TUI, the admin API) it used
    to take what was then free, nothing, and give its whole hold back."""
    sim = Simulation(load_scenario(SCENARIOS / "oom.yaml"), SCENARIOS)
    pool = sim.pools["gpu0"]
    sim.fire_fault("memory-hog")
    first = dict(pool.device.other_processes)
    assert first and all(held > 0 for held in first.values())
    sim.fire_fault("memory-hog")
    assert pool.device.other_processes == first
