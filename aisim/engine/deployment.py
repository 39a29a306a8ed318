"""A served model at run time: its versions' engines, its lifecycle, and where new requests go.

The version named first (or `lifecycle.initialVersion`) is loaded before the run starts, as a vLLM
server loads its model before it listens; the others load when the scenario's lifecycle schedule
says, taking their load time. Each loaded version has its own engines (replicas); new requests
go to the active version's router, requests in flight finish where they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..scenario.hardware import Gpu, expand_devices
from ..scenario.models import KServe, Model, Version
from ..scenario.presets import GIB
from ..scenario.quantization import on_gpu
from . import runtimes
from .batcher import TritonEngine
from .costmodel import CostModel, calibration, graph_capture_limit, online
from .gpu import GpuDevice
from .gpu_memory import ReplicaMemory, record_levels, startup_problem
from .kernel import NORMAL, URGENT, Kernel
from .kv import KvCache
from .lifecycle import (
    IllegalTransition,
    Lifecycle,
    State,
    TailWatch,
    incompatibility,
    load_time_ns,
    sandbox_problem,
)
from .lockstep import Lockstep
from .memory import MemoryPlan, activation_peak, kv_bytes_per_token, plan
from .pool import Allocator, OutOfMemoryError
from .replica import Replica, StreamPlacement
from .request import Request
from .served import Engine, MockEngine, Router
from .timeline import Timeline

NS = 1_000_000_000


@dataclass
class Host:
    """What building engines needs from the simulation."""

    kernel: Kernel
    timeline: Timeline
    devices: dict[str, Gpu]
    macro_steps: bool
    pools: dict[str, Allocator]
    """The memory pool of each GPU device."""
    gpus: dict[str, GpuDevice]
    """The engines and streams of each GPU device."""
    detail: str = "step"
    """Kernel detail: one kernel per step, or per layer."""


def load_failure(plan_: MemoryPlan) -> str:
    """vLLM's start-up error when the KV cache cannot hold one request (`kv_cache_utils.py`)."""
    if not plan_.has_kv:
        return ""
    if plan_.num_blocks <= 0:
        return ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine.")
    if plan_.num_blocks < plan_.request_blocks:
        need = plan_.kv_needed / GIB
        avail = plan_.kv_available / GIB
        return (f"ValueError: To serve at least one request with the model's max seq len ({plan_.max_model_len}), "
                f"({need:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({avail:.2f} GiB). Based on the available memory, the estimated maximum model length is "
                f"{plan_.kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
                "when initializing the engine.")
    return ""


@dataclass(eq=False)
class ServedModel:
    """One model of the scenario at run time."""

    model: Model
    host: Host
    rng: np.random.Generator
    versions: dict[str, list[Engine]] = field(default_factory=dict)
    """Engines of each loaded version."""
    routers: dict[str, Router] = field(default_factory=dict)
    plans: list[MemoryPlan] = field(default_factory=list)
    gpu_names: list[str] = field(default_factory=list)
    fitted: bool = True
    uncertainty: float = 0.0
    """The cost model's relative error band on the model's GPUs (`calibration.constants`): wider where
    the constants are extrapolated from another GPU."""
    failure: str = ""
    """Why the model could not load, or ''."""
    crash: str = ""
    """Why the serving version's engines died (PyTorch's out-of-memory error), or ''."""
    requests: list[Request] = field(default_factory=list)
    generates: bool = True
    """False for embedding and classification models: their requests produce no tokens."""
    lifecycle: Lifecycle = field(init=False)
    watch: TailWatch | None = None
    frontend_ns: int = 0
    """The API server's time on a request before the engine sees it (`online.py`; 0 unless `vllm serve`)."""
    frontend_token_ns: float = 0.0
    """The API server's tokenizer time per prompt token (`online.py`; 0 unless `vllm serve`): one thread for every
    request, so prompts arriving together are tokenized one after another (`front_end`)."""
    tokenizer_free_at: int = 0
    """When the API server's tokenizer thread finishes the prompts it has been given."""
    _waiting: dict[str, list[Callable[[str], None]]] = field(default_factory=dict)
    """Callers of `request_load` waiting for a version to finish loading."""

    def front_end(self, now: int, prompt_tokens: int) -> int:
        """When a request that reached the API server at `now` with `prompt_tokens` tokens reaches the engine: vLLM's
        API server tokenizes text prompts on a single thread (`AsyncMicrobatchTokenizer`'s one-worker executor), so
        its prompt waits for those tokenized before it, then takes `frontend_token_ns` a token; the rest of the
        request's trip (`frontend_ns`: HTTP, input processing, the hop to the engine core) follows."""
        if self.frontend_token_ns:
            start = max(now, self.tokenizer_free_at)
            self.tokenizer_free_at = start + round(self.frontend_token_ns * prompt_tokens)
            now = self.tokenizer_free_at
        return now + self.frontend_ns

    def __post_init__(self) -> None:
        model, timeline = self.model, self.host.timeline
        self.lifecycle = Lifecycle(model, lambda t, v, s, r: timeline.add(t, "model_state", model.id, v, s, r))
        self.generates = model.resolved().task == "generate"
        first = self.lifecycle.active
        version = self._version(first)
        self.lifecycle.move(first, State.LOADING, 0, "loading before the run starts")
        problem = self._build(version)
        if problem:
            self.failure = problem
            self.lifecycle.move(first, State.UNAVAILABLE, 0, problem)
        else:
            reason = "mock mode" if model.mock else f"loaded in {self._load_s(version):.1f} s before the run starts"
            self.lifecycle.move(first, State.READY, 0, reason)
        if model.lifecycle is not None:
            for action in model.lifecycle.schedule:
                self.host.kernel.at(action.at, partial(self._act, action.action, action.version), URGENT)

    @property
    def mock(self) -> bool:
        return self.model.mock

    @property
    def engines(self) -> list[Engine]:
        """Every engine of every version that was loaded."""
        return [e for engines in self.versions.values() for e in engines]

    @property
    def router(self) -> Router | None:
        """Where new requests go: the active version's router (None if it is not loaded)."""
        return self.routers.get(self.lifecycle.active)

    def _version(self, name: str) -> Version:
        return next(v for v in self.model.versions if v.version == name)

    def _load_s(self, version: Version) -> float:
        if self.mock or not self.plans:
            return 0.0
        gpu = self.host.devices[self.model.placement.gpus[0]].resolved()  # type: ignore[union-attr]
        return load_time_ns(self.model, version, gpu) / NS

    # -- engines -----------------------------------------------------------------------------

    def _build(self, version: Version) -> str:
        """Create the engines of a version; the reason it cannot serve, or ''."""
        host, model = self.host, self.model
        if model.latency is not None:
            engine = MockEngine(model.id, host.kernel, host.timeline, model.latency, self.rng, model.engine.max_num_seqs)
            self._install(version.version, [engine])
            return ""
        assert model.placement is not None
        devices = expand_devices(model.placement.gpus, host.devices)
        if model.resolved_runtime() != "vllm":
            return self._build_triton(version, devices)
        tp = model.placement.tensor_parallel
        arch = model.resolved()
        engines: list[Engine] = []
        placed: list[ReplicaMemory] = []
        plans, names = [], []
        ranks = model.placement.data_parallel or len(devices) // tp
        lockstep: Lockstep | None = None
        for start in range(0, min(ranks, len(devices) // tp) * tp, tp):
            group = tuple(devices[start:start + tp])
            profile = host.devices[group[0]].resolved()
            memory = plan(model, profile)
            efficiency, fitted = calibration.efficiency(profile, model.cost_model)
            if model.engine.entrypoint == "server":
                self.frontend_ns = online.frontend_ns(profile, model.cost_model)
                self.frontend_token_ns = online.frontend_token_ns(profile, model.cost_model)
            self.fitted = self.fitted and fitted
            self.uncertainty = max(self.uncertainty, calibration.constants(profile).uncertainty)
            plans.append(memory)
            names.append(profile.name)
            runtime = model.resolved_runtime()
            tensors = ReplicaMemory([(d, host.pools[d]) for d in group], arch, tp, model.engine.cuda_graphs, runtime,
                                    expert_parallel=model.expert_parallel_size())
            checked = startup_problem(tensors.pools, memory, model.engine.gpu_memory_utilization) if runtime == "vllm" else ""
            failure = (checked or load_failure(memory) or runtimes.load_problem(model, version, profile)
                       or self._place(tensors, memory))
            if failure:
                for loaded in placed:
                    loaded.unload()
                self.plans, self.gpu_names = plans, names
                return failure
            placed.append(tensors)
            cost = CostModel(on_gpu(arch, profile.compute_capability), profile, efficiency, tp,
                             kv_bytes_per_token(arch, tp, model.engine.kv_cache_dtype), cuda_graphs=model.engine.cuda_graphs,
                             factor=version.latency_factor * runtimes.step_factor(model, version),
                             graph_max_tokens=graph_capture_limit(memory.max_num_seqs, memory.max_num_batched_tokens),
                             expert_parallel=model.expert_parallel_size(),
                             data_parallel=model.data_parallel_size() if model.lockstep() else 1,
                             kv_dtype=model.engine.kv_cache_dtype, offline=model.engine.entrypoint == "offline",
                             async_scheduling=model.engine.overlapped())
            kv = KvCache(memory.num_blocks, memory.block_size, model.engine.enable_prefix_caching, memory.max_model_len)
            suffix = "" if version.version == model.versions[0].version else f"@v{version.version}"
            replica = Replica(
                f"{model.id}{suffix}/{len(engines)}", host.kernel, host.timeline, cost, kv, memory.max_num_seqs,
                memory.max_num_batched_tokens, model.engine.scheduling_policy,
                model.engine.long_prefill_token_threshold, group, model.placement.stream,
                macro_steps=host.macro_steps, async_scheduling=model.engine.overlapped(),
            )
            replica.memory = tensors
            if model.lockstep():
                lockstep = lockstep or Lockstep(host.kernel, cost.step_ns(1, 1, 0, 1.0))
                lockstep.add(replica)
            replica.on_crash = lambda replica, message, v=version.version: self._crashed(v, message)
            replica.placement = StreamPlacement([host.gpus[d] for d in group], host.detail, arch,
                                                -(-memory.max_model_len // memory.block_size))
            for device in replica.placement.devices:
                device.attach(replica)
            engines.append(replica)
        if not self.plans:
            self.plans, self.gpu_names = plans, names
        self._install(version.version, engines)
        self._log(version, plans[0])
        return ""

    def _build_triton(self, version: Version, devices: list[str]) -> str:
        """A Triton backend's model version (ONNX Runtime, TensorRT, Python): one dynamic batcher in
        front of its instances; the weights once per device, a TensorRT execution context per instance."""
        host, model = self.host, self.model
        kserve = model.kserve or KServe()
        arch = model.resolved()
        groups = {str(index): expand_devices(group.gpus, host.devices) or devices
                  for index, group in enumerate(kserve.instance_groups)}
        used = list(dict.fromkeys(d for group in groups.values() for d in group))
        profile = host.devices[used[0]].resolved()
        batch = max(kserve.max_batch_size, 1)
        memory = dataclasses.replace(plan(model, profile), activation_peak=activation_peak(arch, batch, batch, 1))
        instances = {d: sum(g.count for g, ds in zip(kserve.instance_groups, groups.values()) if d in ds) for d in used}
        self.plans, self.gpu_names = [memory], [profile.name]
        tensors = ReplicaMemory([(d, host.pools[d]) for d in used], arch, 1, False, model.resolved_runtime(),
                                contexts=max(instances.values()))
        failure = runtimes.load_problem(model, version, profile) or self._place(tensors, memory)
        if failure:
            return failure
        efficiency, fitted = calibration.efficiency(profile, model.cost_model)
        self.fitted = fitted
        self.uncertainty = calibration.constants(profile).uncertainty
        cost = CostModel(arch, profile, efficiency, 1, cuda_graphs=False,
                         factor=version.latency_factor * runtimes.step_factor(model, version))
        suffix = "" if version.version == model.versions[0].version else f"@v{version.version}"
        engine = TritonEngine(f"{model.id}{suffix}", host.kernel, host.timeline, cost, kserve, version,
                              {k: [host.gpus[d] for d in ds] for k, ds in groups.items()}, tensors)
        engine.on_crash = lambda engine, message, v=version.version: self._crashed(v, message)
        for device in used:
            host.gpus[device].attach(engine)
        self._install(version.version, [engine])
        self._log(version, memory)
        return ""

    def _place(self, tensors: ReplicaMemory, memory: MemoryPlan) -> str:
        """Put a replica's tensors in its GPUs' pools; PyTorch's out-of-memory error, or ''."""
        try:
            tensors.load(memory)
        except OutOfMemoryError as error:
            tensors.unload()
            return f"torch.OutOfMemoryError: {error}"
        finally:
            for gpu, pool in tensors.pools:
                record_levels(pool, gpu, self.host.timeline, self.host.kernel.now)
        return ""

    def _log(self, version: Version, memory: MemoryPlan) -> None:
        """The runtime's start-up lines, on the timeline."""
        now, timeline = self.host.kernel.now, self.host.timeline
        for message in runtimes.provider_warnings(self.model, version):
            timeline.add(now, "log", self.model.id, version.version, "WARNING", message)
        for message in runtimes.load_log(self.model, memory, self._load_s(version)):
            timeline.add(now, "log", self.model.id, version.version, "INFO", message)

    def _install(self, version: str, engines: list[Engine]) -> None:
        self.versions[version] = engines
        self.routers[version] = Router(engines)
        for engine in engines:
            engine.on_finish = lambda request, v=version: self._finished(v, request)

    # -- lifecycle actions -------------------------------------------------------------------

    def _act(self, action: str, version: str) -> None:
        now = self.host.kernel.now
        try:
            {"load": self._load, "switch": self._switch, "unload": self._unload}[action](version, now)
        except IllegalTransition as error:
            self.lifecycle.refuse(now, version, str(error))

    def _load(self, version: str, now: int) -> None:
        target = self._version(version)
        seconds = self._load_s(target)
        self.lifecycle.move(version, State.LOADING, now, f"loading ({seconds:.1f} s)")
        self.host.kernel.at(now + int(seconds * NS), lambda: self._loaded(target), NORMAL)

    def _loaded(self, version: Version) -> None:
        now = self.host.kernel.now
        problem = sandbox_problem(version) or self._build(version)
        if problem:
            self.lifecycle.move(version.version, State.UNAVAILABLE, now, problem)
        else:
            self.lifecycle.move(version.version, State.READY, now, "sandbox inference passed")
            if version.version == self.lifecycle.active:
                self.failure = self.crash = ""
        for done in self._waiting.pop(version.version, []):
            done(problem or "")

    # -- repository control (Triton's load and unload API) -----------------------------------

    def reconfigure(self, kserve: KServe) -> None:
        """A Triton load with a config override: the versions built from now on batch and run their instances
        as `kserve` says (the model's other settings are unchanged)."""
        self.model = self.model.model_copy(update={"kserve": kserve})

    def request_load(self, done: Callable[[str], None]) -> None:
        """Load the serving version now (or load it again: it keeps serving meanwhile); `done` gets ''
        or why it failed, once the simulated load time has passed."""
        version = self.lifecycle.active
        life = self.lifecycle.lives[version]
        now = self.host.kernel.now
        if life.state in (State.READY, State.DEGRADED):
            self.host.kernel.at(now + int(self._load_s(life.version) * NS), lambda: done(""), NORMAL)
            return
        self._waiting.setdefault(version, []).append(done)
        if life.state is not State.LOADING:
            if life.state is State.UNLOADING:
                self._waiting[version].remove(done)
                done(f"version {version} is unloading")
                return
            self._load(version, now)

    def request_unload(self, done: Callable[[], None]) -> None:
        """Unload every loaded version: they drain the requests they hold, then become UNAVAILABLE. A version
        whose load failed is UNAVAILABLE already; its reason becomes `unloaded` too (Triton's index then
        shows it so, and it no longer counts against the server's readiness)."""
        now = self.host.kernel.now
        for version, life in self.lifecycle.lives.items():
            if life.state is State.UNAVAILABLE and life.reason != "unloaded":
                life.reason, life.since = "unloaded", now
                self.lifecycle.record(now, version, State.UNAVAILABLE.value, "unloaded")
        loaded = [v for v, life in self.lifecycle.lives.items() if life.state in (State.READY, State.DEGRADED)]
        left = [len(loaded)]

        def drained() -> None:
            left[0] -= 1
            if left[0] == 0:
                done()

        if not loaded:
            done()
        for version in loaded:
            self.lifecycle.move(version, State.UNLOADING, now, "unloading")
            self._drain(version, drained)

    def _switch(self, version: str, now: int) -> None:
        life = self.lifecycle.lives[version]
        if life.state is not State.READY or version not in self.versions:
            self.lifecycle.refuse(now, version, f"cannot switch to version {version!r}: it is {life.state}")
            return
        rules = self.model.lifecycle.compatibility if self.model.lifecycle else None
        active = self.lifecycle.active
        why = incompatibility(self._version(version), self._version(active), rules) if rules else None
        if why:
            self.lifecycle.refuse(now, version, f"incompatible with version {active!r}: {why}")
            return
        self.lifecycle.previous.append(active)
        self.lifecycle.active = version
        self.host.timeline.add(now, "model_state", self.model.id, version, "READY", f"serving new requests (was {active!r})")
        rollback = self.model.lifecycle.rollback if self.model.lifecycle else None
        if rollback is not None and rollback.enabled:
            self.watch = TailWatch(rollback.p99_above, rollback.window)
            self._schedule_check()

    def _unload(self, version: str, now: int) -> None:
        if version == self.lifecycle.active:
            self.lifecycle.refuse(now, version, f"version {version!r} is serving; switch away first")
            return
        self.lifecycle.move(version, State.UNLOADING, now, "draining requests in flight")
        self._drain(version)

    def _crashed(self, version: str, message: str) -> None:
        """An engine of `version` died (its error goes to the log); when all have, the version is unavailable."""
        now = self.host.kernel.now
        self.host.timeline.add(now, "log", self.model.id, version, "ERROR", message)
        if all(getattr(e, "dead", "") for e in self.versions.get(version, [])):
            if version == self.lifecycle.active:
                self.crash = message
            self.lifecycle.move(version, State.UNAVAILABLE, now, "engine died")

    def _drain(self, version: str, then: Callable[[], None] | None = None) -> None:
        engines = self.versions.get(version, [])
        if any(e.outstanding for e in engines):
            self.host.kernel.after(NS // 10, lambda: self._drain(version, then))
            return
        for engine in engines:
            if isinstance(engine, (Replica, TritonEngine)):
                engine.leave_gpus()
        self.versions.pop(version, None)
        self.routers.pop(version, None)
        self.lifecycle.move(version, State.UNAVAILABLE, self.host.kernel.now, "unloaded")
        if then is not None:
            then()

    # -- rollback ----------------------------------------------------------------------------

    def _finished(self, version: str, request: Request) -> None:
        """Watch the active version's latency: time to first token for generating models (their
        end-to-end time grows with the answer's length), end-to-end time for the others."""
        if self.watch is not None and version == self.lifecycle.active:
            end = request.first_token_at if self.generates and request.first_token_at >= 0 else request.finished_at
            self.watch.add(request.finished_at, end - request.arrival)

    def _schedule_check(self) -> None:
        assert self.watch is not None
        self.host.kernel.after(max(self.watch.window_ns // 30, NS // 10), self._check)

    def _check(self) -> None:
        watch = self.watch
        if watch is None:
            return
        now = self.host.kernel.now
        active = self.lifecycle.active
        if watch.breached_for_window(now) and self.lifecycle.previous:
            back = self.lifecycle.previous.pop()
            self.lifecycle.move(active, State.DEGRADED, now,
                                f"P99 {'TTFT' if self.generates else 'latency'} above {watch.threshold_ns / 1e6:.0f} ms for "
                                f"{watch.window_ns / NS:.0f} s: rolling back to version {back!r}")
            self.lifecycle.active = back
            self.lifecycle.rollbacks += 1
            self.host.timeline.add(now, "model_state", self.model.id, back, "READY", "serving new requests (rollback)")
            self.watch = None
            return
        if watch.finished or any(e.outstanding for e in self.versions.get(active, [])):
            self._schedule_check()
        else:
            self.watch = None
