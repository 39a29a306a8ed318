"""The server: one live simulation behind Tornado applications, one per listener.

`ServerState` owns everything the handlers share: the simulation on the real-time clock, the
tokenizer, each model's content source, the fault book, the rate limiter and the metrics.
`make_app(state, personalities)` builds the Tornado application a listener serves; `serve`
starts all the scenario's listeners in the running event loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tornado.netutil
import tornado.web

from ..engine.deployment import ServedModel
from ..engine.live import Live
from ..engine.sampling import Draws
from ..engine.simulation import Simulation
from ..errors import ServeError
from ..fleet.data_parallel import with_data_parallel
from ..fleet.runtime import FleetRuntime
from ..scenario import Scenario
from ..scenario.distributions import DurationDistribution
from ..scenario.models import Model
from .connections import (
    Listener,
    Policy,
    Registry,
    default_max_open,
    is_loopback,
    kserve_error,
    openai_error,
    security_headers,
)
from .content import ContentSource
from .faults import FaultBook
from .metrics_feed import MetricsFeed
from .pod import PodIdentity, apply
from .ratelimit import RateLimiter
from .recording import Recording
from .shared_memory import SharedMemory
from .slices import Intake
from .tokenizer import Tokenizer, default_tokenizer

if TYPE_CHECKING:
    from .handlers import GenerationHandler
    from .multiproc.frontend import EngineClient
    from .responses import ResponseStore

DEFAULT_PERSONALITIES = ("openai", "vllm", "vllm-metrics")
LISTEN_BACKLOG = 2048
"""Connections the kernel queues before the server accepts them (uvicorn's default, which vLLM serves
with). Tornado's default of 128 drops the rest of a burst of clients connecting at once, and they retry
only after TCP's one-second SYN timeout: 500 streams started together used to take 1.1 s to all begin."""


@dataclass
class ServerState:
    """What every handler of one server shares."""

    scenario: Scenario
    base_dir: Path = Path(".")
    seed: int | None = None
    network_delay: DurationDistribution | None = None
    speed: float = 1.0
    record: str | Path | None = None
    """Write a request log here (`aisim serve --record`)."""
    pod: PodIdentity | None = None
    """The Kubernetes pod this server is (`PodIdentity.from_env`): its headers and labels, and its own seed
    unless `seed` pins one."""
    tokenizer_path: str | None = None
    """Count, split and `/tokenize` with this Hugging Face tokenizer (`aisim serve --tokenizer`: a folder or a
    model id in the local cache) instead of the built-in default."""
    runs_engine: bool = True
    """False in an API-server process of a split server (`multiproc`): the engine core runs the simulation and
    what belongs to it (the fleet's KV-event publishers and prefill/decode router)."""
    sim: Simulation = field(init=False)
    live: Live = field(init=False)
    tokenizer: Tokenizer = field(init=False)
    contents: dict[str, ContentSource] = field(init=False)
    faults: FaultBook = field(init=False)
    limiter: RateLimiter = field(init=False)
    api_keys: dict[str, str] = field(init=False)
    lora_adapters: dict[str, dict[str, str]] = field(init=False)
    created: int = field(init=False)
    metrics: MetricsFeed = field(init=False)
    triton_logging: dict[str, Any] = field(init=False)
    """Triton's log settings (`/v2/logging`)."""
    triton_trace: dict[str, Any] = field(init=False)
    """Triton's global trace settings; `triton_model_trace` holds per-model overrides."""
    triton_model_trace: dict[str, dict[str, Any]] = field(default_factory=dict)
    triton_scrapes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per GPU, (busy ns, virtual time) at the previous Triton metrics scrape."""
    recording: Recording | None = field(init=False, default=None)
    """The request log being written (None: not recording)."""
    requests_in_flight: int = field(init=False, default=0)
    """Generating requests between their arrival at a handler and the end of their answer, on every listener
    (vLLM's server load, `GET /load`)."""
    responses: ResponseStore = field(init=False)
    """The Responses API's stored responses (bounded: see `ResponseStore`), shared by every listener."""
    draining: bool = field(init=False, default=False)
    """Shutting down (`drain`): no new connections or requests, the ones in flight finishing."""
    hurry: bool = field(init=False, default=False)
    """End the grace period of a `drain` now (a second signal)."""
    handlers: set[GenerationHandler] = field(init=False, default_factory=set)
    """The generating requests in flight (what `drain` ends when the grace period is over)."""
    registry: Registry = field(init=False)
    """Every listener's open connections, under one cap (`server.connections.maxOpen`)."""
    intake: Intake = field(init=False, default_factory=Intake)
    """How many generating requests start per loop turn (`slices.Intake`)."""
    lora_updates: bool = field(init=False)
    """Runtime LoRA loading is served (`server.loraRuntimeUpdates` or `VLLM_ALLOW_RUNTIME_LORA_UPDATING`)."""
    fleet: FleetRuntime = field(init=False)
    """KV-event publishers, data-parallel ranks, the KV-transfer role, start-up and sleep (`aisim.fleet`)."""
    core: EngineClient | None = field(init=False, default=None)
    """The engine core this API-server process talks to (`aisim serve --api-server-count N`, `multiproc`): faults
    and rate limits are decided there. None in the single process, where the engine runs here."""

    def __post_init__(self) -> None:
        scenario = self.scenario = with_data_parallel(self.scenario, self.scenario.server.fleet.data_parallel_size)
        if self.seed is None and self.pod is not None:  # a fleet is not N copies of one random stream
            self.seed = self.pod.seed(scenario.seed)
        self.sim = Simulation(scenario, self.base_dir, seed=self.seed, macro_steps=False, retain=False)
        self.live = Live(self.sim, self.speed)
        server_seq = np.random.SeedSequence([self.sim.seed, 1]).spawn(3)
        fault_rng, self._delay_rng, self._seed_rng = (np.random.default_rng(s) for s in server_seq)
        self._seeds: list[int] = []
        self._context_lengths: dict[str, int] = {}
        self._entropy, self._entropy_used = b"", 0
        if self.tokenizer_path is not None:
            # imported here: it imports the handlers, which import this module
            from .hf_tokenizer import load_tokenizer

            self.tokenizer = load_tokenizer(self.tokenizer_path)
        else:
            self.tokenizer = default_tokenizer()
        self.contents = {m.id: ContentSource(m.content, self.base_dir) for m in scenario.models}
        self.faults = FaultBook(list(scenario.faults), fault_rng)
        self.limiter = RateLimiter(scenario.server.rate_limits)
        self.api_keys = {k.key: k.name for k in scenario.server.api_keys}
        self.network_delay = self.network_delay or scenario.server.network_delay
        self._delays = Draws(self.network_delay, self._delay_rng) if self.network_delay is not None else None
        self.lora_adapters = {m.id: {name: "" for name in m.lora_adapters} for m in scenario.models}
        self.lora_updates = scenario.server.lora_runtime_updates or os.environ.get(
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower() in ("1", "true")  # as vLLM's envs.py reads it
        self.registry = Registry(scenario.server.connections.max_open or default_max_open())
        self.created = int(time.time())
        self._started_ms = time.time() * 1000
        self.metrics = MetricsFeed(self)
        self.fleet = FleetRuntime(scenario, self.sim, self.pod.name if self.pod is not None else None, self.speed,
                                  self.runs_engine)
        # imported here: the handlers' modules import this one
        from .responses import ResponseStore

        self.responses = ResponseStore()
        self.triton_logging = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
                               "log_verbose_level": 0, "log_format": "default"}
        self.triton_trace = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0",
                             "trace_file": "", "trace_mode": "triton"}
        self._task: asyncio.Task[None] | None = None
        self.http_servers: list[Listener] = []
        """The listeners `serve` started (closed by `stop`)."""
        self.shared_memory = SharedMemory()
        """Triton's registered system shared-memory regions (both KServe wires read and write them)."""
        self.grpc_servers: list[Any] = []
        """The gRPC listeners (`kserve-grpc`) `serve` started (`grpc.aio.Server`s, stopped by `stop`)."""
        if self.record is not None:
            self.recording = Recording(self.record, scenario.metadata.name, self.speed, self.sim.seed, self.live.started_wall)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the simulation's clock on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.live.run())
            self.fleet.started = time.monotonic()  # the simulated start-up runs from here

    async def stop(self) -> None:
        """Stop serving. Listeners close first, then every open connection, as a client that goes away
        closes its own: the handlers abort their requests in the engine (the request log records them
        as aborted) and end before the clock stops, so no handler is cancelled halfway through."""
        for http in self.http_servers:
            http.stop()
        for http in self.http_servers:
            await http.close_all_connections()
        for grpc_server in self.grpc_servers:  # its calls are cancelled, which aborts their requests
            await grpc_server.stop(None)
        await asyncio.sleep(0)  # the handlers whose requests just ended return
        self.http_servers.clear()
        self.grpc_servers.clear()
        self.live.stop()
        if self._task is not None:
            await self._task
            self._task = None
        self.fleet.close()
        if self.recording is not None:
            self.recording.close(self.sim)
            self.recording = None
        self.shared_memory.close()

    async def drain(self, grace_s: float | None = None) -> int:
        """Shut down as Kubernetes expects on SIGTERM: stop accepting, close idle connections, let the requests in
        flight finish for up to `grace_s` (default `server.shutdownGrace`), then end each stream still open with
        a final error event (and `[DONE]`) and each waiting request with a 503, and `stop`. Returns how many
        requests were ended that way (0: all finished in time)."""
        grace = self.scenario.server.shutdown_grace / 1e9 if grace_s is None else grace_s
        self.draining = True
        for http in self.http_servers:
            http.stop()
            http.close_idle()
        deadline = time.monotonic() + grace
        while any(http.busy() for http in self.http_servers) and time.monotonic() < deadline and not self.hurry:
            await asyncio.sleep(0.02)
        cut = list(self.handlers)
        for handler in cut:
            handler.shut_down()
        for _ in range(50):  # the cut handlers write their last event and finish within a few loop turns
            if not self.handlers:
                break
            await asyncio.sleep(0.01)
        await self.stop()
        return len(cut)

    # -- lookups -----------------------------------------------------------------------------

    def model(self, name: str) -> Model | None:
        """The model a client names (an id, an alias or a loaded LoRA adapter's name)."""
        found = self.scenario.model_named(name)
        if found is not None:
            return found
        return next((self.scenario.model_named(base) for base, loras in self.lora_adapters.items() if name in loras), None)

    def served(self, model: Model) -> ServedModel:
        return self.sim.models[model.id]

    def max_model_len(self, model: Model) -> int:
        served = self.served(model)
        if served.plans:
            return served.plans[0].max_model_len
        fixed = self._context_lengths.get(model.id)
        if fixed is None:  # asked on every request; pydantic's private attributes are slow to read
            fixed = self._context_lengths[model.id] = model.engine.max_model_len or model.resolved().max_position or 32768
        return fixed

    def epoch_ms(self, sim_ns: int) -> int:
        """A simulated instant as milliseconds since the epoch (the server started at virtual time 0)."""
        return int(self._started_ms + sim_ns / 1e6)

    def delay_s(self) -> float:
        """One draw of the network delay, in seconds (0 without one)."""
        return self._delays.next() / 1e9 if self._delays is not None else 0.0

    def new_id(self, nbytes: int) -> str:
        """`nbytes` of the system's entropy in hex, for response and request ids. Ids are names, not part of
        the simulation: like OpenAI's they differ between servers (replicas behind one gateway started
        with the same seed must not repeat each other's ids), so they do not come from the seed. The
        entropy is read 4 KiB at a time: `secrets` made a system call per id."""
        start = self._entropy_used
        if start + nbytes > len(self._entropy):
            self._entropy, start = os.urandom(4096), 0
        self._entropy_used = start + nbytes
        return self._entropy[start:start + nbytes].hex()

    def next_seed(self) -> int:
        """A seed for a request that did not give one (a deterministic sequence per server, drawn in chunks)."""
        if not self._seeds:
            self._seeds = self._seed_rng.integers(2**62, size=256).tolist()[::-1]
        return self._seeds.pop()


def make_app(state: ServerState, personalities: tuple[str, ...] = DEFAULT_PERSONALITIES,
             metrics_path: str = "/metrics") -> tornado.web.Application:
    """The Tornado application of one listener, speaking the given personalities."""
    from . import (
        admin_api,
        anthropic_api,
        dcgm_api,
        kserve_api,
        openai_api,
        triton_metrics,
        vllm_api,
    )

    routes: list[Any] = []
    if "openai" in personalities or "vllm" in personalities:
        routes += openai_api.routes()
    if "vllm" in personalities:
        routes += vllm_api.routes(state.lora_updates)
        from . import lifecycle_api

        fleet = state.scenario.server.fleet
        routes += lifecycle_api.routes(fleet.startup.sleep_mode, fleet.kv_events is not None and fleet.kv_events.enabled)
    if "vllm" in personalities or "anthropic" in personalities:  # vLLM serves Anthropic's Messages API too
        routes += anthropic_api.routes(strict="vllm" not in personalities)
    if "vllm-metrics" in personalities:
        routes.append((metrics_path, vllm_api.MetricsHandler))
    if "triton-metrics" in personalities:
        routes.append((metrics_path, triton_metrics.MetricsHandler))
    if "dcgm-metrics" in personalities:
        routes += dcgm_api.routes(metrics_path)
    if "admin" in personalities and state.scenario.server.admin.enabled:
        routes += admin_api.routes()
    if "kserve" in personalities:
        routes += kserve_api.routes()
    openai = "openai" in personalities or "vllm" in personalities
    missing = (openai_api.NotFoundHandler if openai else
               anthropic_api.NotFoundHandler if "anthropic" in personalities else kserve_api.NotFoundHandler)
    app = tornado.web.Application(routes, state=state, compress_response=False,
                                  transforms=[security_headers(tuple(state.scenario.server.cors_origins))],
                                  default_handler_class=missing)
    return apply(app, state.pod)


class RefusedToStart(ServeError):
    """A configuration `serve` will not start with (an admin listener without a token, say)."""


def check_admin(state: ServerState, host: str) -> None:
    """The admin personality needs a token, unless it is bound to loopback and marked `insecure`."""
    server = state.scenario.server
    admin = server.admin
    if not admin.enabled or admin.token is not None or not any("admin" in lis.personalities for lis in server.listeners):
        return
    if not admin.insecure:
        raise RefusedToStart("the admin personality needs server.admin.token (or server.admin.insecure: true on a "
                             "loopback address)")
    if not is_loopback(host):
        raise RefusedToStart(f"server.admin.insecure serves the admin endpoints without a token only on a loopback "
                             f"address, not on {host}")


def listener_port(declared: int, offset: int) -> int:
    """A listener's port moved by `--port-offset` (0, a free port, stays 0): two servers of one scenario run
    side by side with different offsets, every port of each moved alike."""
    if declared == 0 or offset == 0:
        return declared
    moved = declared + offset
    if not 0 < moved <= 65535:
        raise OSError(f"port {declared} moved by the offset {offset} is {moved}, outside 1-65535")
    return moved


async def serve(state: ServerState, host: str | None = None, port: int | None = None,
                port_offset: int = 0) -> list[tuple[str, int]]:
    """Start every listener of the scenario (the first one's port overridden by `port`, the others' moved by
    `port_offset`); returns the (host, port) pairs actually bound."""
    server = state.scenario.server
    address = host or server.host
    check_admin(state, address)
    state.start()
    bound: list[tuple[str, int]] = []
    for index, listener in enumerate(server.listeners):
        personalities = tuple(listener.personalities)
        chosen = port if (index == 0 and port is not None) else listener_port(listener.port, port_offset)
        if "kserve-grpc" in personalities:  # HTTP/2 on a port of its own (validation keeps it alone)
            from . import kserve_grpc

            grpc_server, bound_port = await kserve_grpc.start(state, address, chosen)
            state.grpc_servers.append(grpc_server)
            bound.append((address, bound_port))
            continue
        app = make_app(state, personalities, listener.metrics_path)
        openai = "openai" in personalities or "vllm" in personalities or "kserve" not in personalities
        policy = Policy.of(server, address, openai_error if openai else kserve_error, lambda: state.draining)
        http = Listener(app, server, policy, state.registry)
        sockets = tornado.netutil.bind_sockets(chosen, address, backlog=LISTEN_BACKLOG)
        http.add_sockets(sockets)
        state.http_servers.append(http)
        bound.append((host or server.host, sockets[0].getsockname()[1]))
    return bound
