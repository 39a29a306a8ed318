"""Compile a scenario into a running simulation: GPUs, model replicas, workload feeds, faults.

Randomness: one `SeedSequence` from the scenario seed, spawned into one child per workload
source and one per mock model, in document order, and one for the API faults the workload's clients
meet; nothing else draws random numbers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ..errors import RunError
from ..scenario import Scenario
from ..scenario.faults import DcgmField, OutOfMemory, SlowDown, Trigger, Xid
from ..scenario.hardware import expand_devices
from ..scenario.workload import Concurrency
from ..telemetry.board import gpu_uuid
from ..telemetry.sampler import GpuTelemetry, Source
from .client_faults import SimulatedClients
from .deployment import Host, ServedModel
from .gpu import GpuDevice
from .gpu_memory import record_levels
from .kernel import URGENT, Kernel, VirtualClock
from .pool import Allocator, make_allocator
from .pool.oom import format_size
from .replica import Replica
from .request import Outcome, Request, Watcher
from .timeline import Timeline
from .workload import Arrival, ClosedLoop, SourceFeed
from .xid import apply_xid

ROLLING_RECORDS = int(os.environ.get("AISIM_TIMELINE_WINDOW", "100000"))
"""Timeline records of each kind a non-retaining (serving) simulation keeps: the most memory a server's timeline
holds (about 1.1 KiB per step run: some 110 MiB once full, after about 10 minutes of a busy server).
`AISIM_TIMELINE_WINDOW` sets it (`bench/split_soak.py` shrinks it, so that 5 minutes fill it)."""


def wants_telemetry(scenario: Scenario) -> bool:
    """Whether a scenario asks for GPU telemetry: a `telemetry` section, a listener speaking `dcgm-metrics`
    or `admin`, or an XID or DCGM-field fault. Without it no sampling happens (headless runs stay fast)."""
    return ("telemetry" in scenario.model_fields_set
            or any(isinstance(f, (Xid, DcgmField)) for f in scenario.faults)
            or any(p in ("dcgm-metrics", "admin") for listener in scenario.server.listeners for p in listener.personalities))


class EndlessWorkload(RunError, ValueError):
    """The workload never stops and no stop time was given."""


class Simulation:
    """A scenario compiled onto one kernel; `run` drives it on the virtual clock."""

    def __init__(self, scenario: Scenario, base_dir: Path = Path("."), seed: int | None = None,
                 macro_steps: bool = True, retain: bool = True, telemetry: bool | None = None) -> None:
        """`retain=False` (a long-running server) keeps no list of past requests and only a rolling
        window of the timeline, so memory stays bounded. `telemetry`: sample the GPUs (None: when the
        scenario asks for it, `wants_telemetry`)."""
        self.scenario = scenario
        self.base_dir = base_dir
        self.seed = scenario.seed if seed is None else seed
        self.kernel = Kernel()
        self.retain = retain
        self.timeline = Timeline(scenario.simulation.timeline.per_token, None if retain else ROLLING_RECORDS)
        self.macro_steps = macro_steps
        sources = scenario.workload.sources if scenario.workload else []
        workload_seq, model_seq, fault_seq = np.random.SeedSequence(self.seed).spawn(3)
        self._source_rngs = [np.random.default_rng(s) for s in workload_seq.spawn(len(sources))]
        self._model_rngs = [np.random.default_rng(s) for s in model_seq.spawn(len(scenario.models))]
        self.devices = scenario.gpu_devices()
        self.pools = self._pools()
        self.gpus = {device: GpuDevice(self.kernel, device, gpu, self.timeline) for device, gpu in self.devices.items()
                     if device in gpu.device_ids()}
        hostname = scenario.telemetry.dcgm.hostname
        nvidia = [d for d in self.gpus.values() if self.devices[d.device].resolved().vendor == "nvidia"]
        for index, gpu_device in enumerate(nvidia):  # numbered as the telemetry numbers them
            gpu_device.uuid = gpu_uuid(hostname, index)
        host = Host(self.kernel, self.timeline, self.devices, macro_steps, self.pools, self.gpus, scenario.simulation.detail)
        self.models: dict[str, ServedModel] = {}
        for index, model in enumerate(scenario.models):
            served = ServedModel(model, host, self._model_rngs[index])
            for name in model.names:
                self.models[name] = served
        self.requests: list[Request] = []
        self.submitted = 0
        self._arrived = 0
        wanted = wants_telemetry(scenario) if telemetry is None else telemetry
        self.telemetry: GpuTelemetry | None = self._telemetry() if wanted else None
        """The DCGM view of the GPUs (None: not sampled)."""
        self.fault_actions: dict[str, Callable[[], None]] = {}
        """What each engine-level fault of the catalogue does when it starts, by name (`fire_fault`)."""
        self._schedule_faults()
        self.clients = SimulatedClients(self, np.random.default_rng(fault_seq))
        """The workload's clients, which meet the scenario's API faults."""

    # -- building ----------------------------------------------------------------------------

    def _pools(self) -> dict[str, Allocator]:
        """One memory pool per GPU device, with the allocator its GPU entry names."""
        pools: dict[str, Allocator] = {}
        for gpu in self.scenario.gpus:
            capacity = gpu.resolved().capacity
            for device in gpu.device_ids():
                pools[device] = make_allocator(gpu.memory_pool, capacity, device_index=len(pools),
                                               clock=lambda: self.kernel.now)
        return pools

    def _telemetry(self) -> GpuTelemetry:
        sources = [Source(device, self.devices[device].resolved(), gpu, self.pools[device]) for device, gpu in self.gpus.items()]
        return GpuTelemetry(self.kernel, self.timeline, self.scenario.telemetry, sources)

    def _schedule_faults(self) -> None:
        for index, fault in enumerate(self.scenario.faults):
            name = fault.name or f"fault-{index}"
            if isinstance(fault, SlowDown):
                self._schedule_slowdown(fault, name)
            elif isinstance(fault, OutOfMemory):
                self._schedule_hog(fault, name, 100_000 + index)
            elif isinstance(fault, Xid):
                self._schedule_xid(fault, name)
            elif isinstance(fault, DcgmField):
                self._schedule_field(fault, name)

    def _schedule_xid(self, fault: Xid, name: str) -> None:
        devices = [d for d in expand_devices(fault.scope.gpus, self.devices) if d in self.gpus]

        def fire() -> None:
            for device in devices:
                self.timeline.add(self.kernel.now, "fault", name, "xid", device, f"XID {fault.code}")
                self.xid(device, fault.code)

        self._arm(fault.trigger, name, fire)

    def xid(self, device: str, code: int) -> list[str]:
        """An XID error on `device` now (a fault, or the admin API); the engines it killed."""
        return apply_xid(code, device, self.gpus[device], self.served_models, self.kernel, self.timeline, self.telemetry)

    def _schedule_field(self, fault: DcgmField, name: str) -> None:
        telemetry = self.telemetry
        if telemetry is None:  # a run without telemetry (a replay): there is no reading to change
            return
        devices = [d for d in expand_devices(fault.scope.gpus, self.devices) if d in self.gpus]

        def inject() -> None:
            for device in devices:
                if device in telemetry.boards:
                    telemetry.inject(device, fault.field, fault.value, fault.duration, source=name)

        self._arm(fault.trigger, name, inject)

    def _schedule_hog(self, fault: OutOfMemory, name: str, pid: int) -> None:
        """Another process takes `size` bytes on the scoped GPUs (as much as is free), for `hold` or for good.
        Fired again while it holds memory (a periodic trigger, the TUI, the admin API), it tops its hold up
        towards `size` with what is free; it never gives back part of what it has."""
        devices = expand_devices(fault.scope.gpus, self.devices)

        def take() -> None:
            now = self.kernel.now
            for device in devices:
                pool = self.pools[device]
                held = pool.device.other_processes.get(pid, 0)
                taken = max(held, min(fault.size, held + max(pool.device.free_bytes(), 0)))
                pool.set_other_process(pid, taken)
                self.timeline.add(now, "fault", name, "oom", device, f"another process holds {format_size(taken)}")
                record_levels(pool, device, self.timeline, now)
            if fault.hold is not None:
                self.kernel.after(fault.hold, give_back, URGENT)

        def give_back() -> None:
            for device in devices:
                self.pools[device].set_other_process(pid, 0)
                record_levels(self.pools[device], device, self.timeline, self.kernel.now)
            self.timeline.add(self.kernel.now, "fault", name, "oom_end", ",".join(devices), "")

        self._arm(fault.trigger, name, take)

    def _arm(self, trigger: Trigger, name: str, action: Callable[[], None]) -> None:
        """Schedule a fault by its trigger and keep its action in the catalogue, so that it can also be
        fired by hand (the TUI, the admin API)."""
        self.fault_actions[name] = action
        self._at_each_start(trigger, action)

    def fire_fault(self, name: str) -> None:
        """Start the catalogue's fault `name` now, whatever its trigger says (its trigger stays armed);
        raises KeyError for a name that is not an engine-level fault of the scenario."""
        self.fault_actions[name]()

    def _at_each_start(self, trigger: Trigger, action: Callable[[], None]) -> None:
        """Run `action` whenever a time-triggered fault starts: once `at`, or `every` period from
        `from` (one period in when absent) until `until`."""
        if trigger.at is not None:
            self.kernel.at(trigger.at, action, URGENT)
            return
        period = trigger.every
        assert period is not None

        def fire() -> None:
            if trigger.until is not None and self.kernel.now > trigger.until:
                return
            action()
            self.kernel.after(period, fire, URGENT)

        self.kernel.at(trigger.from_ if trigger.from_ is not None else period, fire, URGENT)

    def _targets(self, fault: SlowDown) -> list[Replica]:
        scope = fault.scope
        chosen: list[Replica] = []
        for served in dict.fromkeys(self.models.values()):
            if scope.models and not set(scope.models) & set(served.model.names):
                continue
            for engine in served.engines:
                if isinstance(engine, Replica) and (not scope.gpus or set(scope.gpus) & self._gpu_names(engine)):
                    chosen.append(engine)
        return chosen

    def _gpu_names(self, replica: Replica) -> set[str]:
        return set(replica.gpus) | {self.devices[d].id for d in replica.gpus}

    def _schedule_slowdown(self, fault: SlowDown, name: str) -> None:
        def begin() -> None:
            start = self.kernel.now
            targets = self._targets(fault)
            for replica in targets:
                replica.slowdown = fault.factor
                replica.interrupt()
            lasting = f" for {fault.duration / 1e9:g} s" if fault.duration is not None else ""
            self.timeline.add(start, "fault", name, "slowdown", ",".join(r.name for r in targets),
                              f"steps {fault.factor:g}x slower{lasting}")
            if fault.duration is not None:
                self.kernel.at(start + fault.duration, lambda: end(targets), URGENT)

        def end(targets: list[Replica]) -> None:
            for replica in targets:
                replica.slowdown = 1.0
                replica.interrupt()
            self.timeline.add(self.kernel.now, "fault", name, "slowdown_end", ",".join(r.name for r in targets), "")

        self._arm(fault.trigger, name, begin)

    # -- arrivals ----------------------------------------------------------------------------

    def start_workload(self) -> None:
        """Let the scenario's workload sources start arriving (what `run` does before its clock starts)."""
        workload = self.scenario.workload
        if workload is None:
            return
        classes = {c.name: c for c in self.scenario.priority_classes}
        for index, source in enumerate(workload.sources):
            rng = self._source_rngs[index]
            feed = iter(SourceFeed(index, source, rng, self.base_dir, classes, workload.duration))
            if isinstance(source.arrival, Concurrency):
                ClosedLoop(feed, source.arrival, rng.spawn(1)[0], self._send_closed,
                           lambda time, action: self.kernel.at(time, action, URGENT), lambda: self.kernel.now).start()
            else:
                self._next_arrival(feed)

    def _send_closed(self, arrival: Arrival, on_end: Callable[[Request], None]) -> bool:
        """A closed-loop client's request, unless the workload's request limit is reached."""
        workload = self.scenario.workload
        assert workload is not None
        if (workload.requests is not None and self._arrived >= workload.requests) or \
                (workload.duration is not None and self.kernel.now > workload.duration):
            return False
        self._arrived += 1
        self.clients.arrive(arrival, on_end)
        return True

    def _next_arrival(self, feed: Iterator[Arrival]) -> None:
        limit = self.scenario.workload.requests if self.scenario.workload else None
        if limit is not None and self._arrived >= limit:
            return
        arrival = next(feed, None)
        if arrival is None:
            return
        self._arrived += 1
        self.kernel.at(arrival.time, lambda: self._arrive(arrival, feed), URGENT)

    def _arrive(self, arrival: Arrival, feed: Iterator[Arrival]) -> None:
        self.clients.arrive(arrival)
        self._next_arrival(feed)

    def receive(self, arrival: Arrival, watcher: Watcher | None = None, live_tokens: bool = True,
                on_end: Callable[[Request], None] | None = None) -> Request:
        """A request reaches the server now: counted and recorded, not yet routed (`submit` routes it; a fault
        the client meets may end it before, `aisim.engine.client_faults`); `on_end` is told when it ends."""
        served = self.models[arrival.model]
        request = Request(self.submitted, served.model.id, arrival.source, self.kernel.now, arrival.prompt,
                          arrival.output, arrival.priority, arrival.group, arrival.prefix, stream=arrival.stream,
                          watcher=watcher, live_tokens=live_tokens, stage=arrival.stage, token_ids=arrival.token_ids,
                          rank=arrival.rank, kept_blocks=[] if arrival.keep_blocks else None, on_end=on_end)
        self.submitted += 1
        if not served.generates:
            request.output = 0
        if self.retain:
            self.requests.append(request)
            served.requests.append(request)
        self.timeline.add(request.arrival, "request_arrived", request.id, served.model.id, arrival.source,
                          arrival.prompt, request.output, arrival.priority)
        return request

    def submit(self, arrival: Arrival, watcher: Watcher | None = None, live_tokens: bool = True,
               on_end: Callable[[Request], None] | None = None) -> Request:
        """A request reaches the server now (from the workload, or from an API handler that watches it;
        `live_tokens=False` when the handler needs the tokens only at the end; `on_end` is told when it ends)."""
        now = self.kernel.now
        served = self.models[arrival.model]
        request = self.receive(arrival, watcher, live_tokens, on_end)
        router = served.routers.get(arrival.version) if arrival.version else served.router
        error = self._reject(served, request) or ("" if router else f"Request for unknown model: '{served.model.id}' "
                                                  "has no available versions")
        if error or router is None:
            request.conclude("failed", now, self.timeline, error)
        else:
            if arrival.kv_tokens:  # KV blocks from a prefill engine arrive first (`aisim.api.openai.disagg`): those the
                # chosen replica does not cache already, as vLLM's connector loads only the tokens it lacks
                missing = router.missing_blocks(request, arrival.kv_tokens)
                delay = arrival.kv_latency_ns + missing * arrival.kv_block_ns if missing else 0
                self.kernel.at(served.front_end(now, request.prompt) + delay,
                               lambda: None if request.done else router.submit_transferred(request, arrival.kv_tokens))
            elif served.frontend_ns or served.frontend_token_ns:
                self.kernel.at(served.front_end(now, request.prompt),
                               lambda: None if request.done else router.submit(request))
            else:
                router.submit(request)
            if arrival.timeout:  # the client's timeout: it closes the connection, and the server aborts the request
                request.deadline = self.kernel.at(now + arrival.timeout, lambda: self.abort(request))
        return request

    def abort(self, request: Request, outcome: Outcome = "aborted", error: str = "") -> None:
        """The client of `request` went away: its engine drops it and frees what it held (one still in the API
        server's hands, `frontend_ns`, never reaches the engine). `outcome`: how the client counts it (a stream
        a fault cut short, `aisim.engine.client_faults`)."""
        if request.done:
            return
        if request.engine is None:
            request.conclude(outcome, self.kernel.now, self.timeline, error)
        else:
            request.engine.abort(request, outcome, error)

    def _reject(self, served: ServedModel, request: Request) -> str:
        if served.failure:
            return f"model {served.model.id!r} failed to load: {served.failure}"
        if served.plans:
            limit = served.plans[0].max_model_len
            if request.prompt + request.output > limit:
                return (f"This model's maximum context length is {limit} tokens. However, you requested "
                        f"{request.prompt + request.output} tokens ({request.prompt} in the messages, "
                        f"{request.output} in the completion). Please reduce the length of the messages or completion.")
        return ""

    # -- running -----------------------------------------------------------------------------

    def stop_time(self, until: int | None = None) -> int | None:
        """When the run stops: `until`, else the scenario's `simulation.until`; None when the workload drains."""
        if until is not None:
            return until
        if self.scenario.simulation.until is not None:
            return self.scenario.simulation.until
        workload = self.scenario.workload
        if workload is None:
            return None
        endless = [s.name for s in workload.sources if s.arrival.kind in ("poisson", "gamma", "constant") and s.requests is None]
        if endless and workload.duration is None and workload.requests is None:
            raise EndlessWorkload(
                f"source(s) {', '.join(endless)} never stop: give workload.duration, workload.requests, "
                "a source's requests, simulation.until or --until"
            )
        return None

    def run(self, until: int | None = None, progress: Callable[[int], None] | None = None) -> None:
        """Run the whole scenario on the virtual clock."""
        stop = self.stop_time(until)
        self.start_workload()
        VirtualClock(self.kernel).run(stop, progress)

    @property
    def served_models(self) -> list[ServedModel]:
        """Each served model once, in scenario order."""
        return list(dict.fromkeys(self.models.values()))
