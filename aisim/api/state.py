"""What every handler of one server shares: `ServerState`.

The state knows no handler and builds none of its parts: `server.py` hands them over (the engine behind its
link, the tokenizer, the `/metrics` feed, the stored responses, ...), for one process and a split server's engine
core alike, and `multiproc.frontend` for an API server. The parts a handler module defines are typed here by what
the state's users need of them (`Protocol`s), so that this module imports no personality.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..engine import Call, Draws, FaultBook, ServedModel, Simulation
from ..fleet.runtime import FleetRuntime
from ..scenario import Scenario
from ..scenario.models import Model
from .content.text import ContentSource
from .content.tokenizer import Tokenizer
from .http.connections import Listener, Registry, default_max_open
from .http.slices import Intake
from .kserve.state import KServeState
from .link import EngineLink
from .openai.store import StoredResponse
from .pod import PodIdentity
from .ratelimit import RateLimiter


class MetricsSource(Protocol):
    """vLLM's `/metrics` text (`metrics.feed.MetricsFeed`)."""

    def scrape(self) -> tuple[bytes, str]: ...


class Responses(Protocol):
    """The Responses API's stored responses (`openai.store.ResponseStore`)."""

    def put(self, response_id: str, stored: StoredResponse) -> None: ...

    def get(self, response_id: str, owner: str | None) -> StoredResponse | None: ...

    def delete(self, response_id: str, owner: str | None) -> bool: ...


class Cancellable(Protocol):
    """A generating request in flight, as the shutdown and sleep mode see it (`openai.handlers.GenerationHandler`)."""

    calls: list[Call]

    def shut_down(self) -> None: ...


def context_window(served: ServedModel) -> int:
    """A model's context window: its engine's `max_model_len` (as the memory plan fixed it), else the scenario's,
    the family's or 32,768 tokens."""
    if served.plans:
        return served.plans[0].max_model_len
    model = served.model
    return model.engine.max_model_len or model.resolved().max_position or 32768


@dataclass(eq=False)
class ServerState:
    """What every handler of one server shares (one per process)."""

    scenario: Scenario
    sim: Simulation
    """The simulation: run here by a `LocalEngine`; in an API server, the engine core's served models mirrored
    (their lifecycles and configurations: `multiproc.mirror`), never run."""
    engine: EngineLink
    """The engine, wherever it runs: every submission, abort, fault, admission and observation goes through it."""
    tokenizer: Tokenizer
    metrics: MetricsSource
    responses: Responses
    fleet: FleetRuntime
    """KV-event publishers, data-parallel ranks, the KV-transfer role, start-up and sleep (`aisim.fleet`)."""
    faults: FaultBook
    limiter: RateLimiter
    kserve: KServeState
    seeds: np.random.Generator
    """Where the seeds of requests that give none come from (`next_seed`)."""
    delays: Draws | None = None
    """The network delay's draws (None: no delay)."""
    lora_adapters: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per model id, its loaded LoRA adapters (name -> path)."""
    base_dir: Path = Path(".")
    speed: float = 1.0
    pod: PodIdentity | None = None
    """The Kubernetes pod this server is (`PodIdentity.from_env`): its headers and labels."""
    contents: dict[str, ContentSource] = field(init=False)
    api_keys: dict[str, str] = field(init=False)
    lora_updates: bool = field(init=False)
    """Runtime LoRA loading is served (`server.loraRuntimeUpdates` or `VLLM_ALLOW_RUNTIME_LORA_UPDATING`)."""
    created: int = field(init=False)
    registry: Registry = field(init=False)
    """Every listener's open connections, under one cap (`server.connections.maxOpen`)."""
    intake: Intake = field(init=False, default_factory=Intake)
    """How many generating requests start per loop turn (`http.slices.Intake`)."""
    requests_in_flight: int = field(init=False, default=0)
    """Generating requests between their arrival at a handler and the end of their answer, on every listener
    (vLLM's server load, `GET /load`)."""
    handlers: set[Cancellable] = field(init=False, default_factory=set)
    """The generating requests in flight (what `drain` ends when the grace period is over)."""
    draining: bool = field(init=False, default=False)
    """Shutting down (`drain`): no new connections or requests, the ones in flight finishing."""
    hurry: bool = field(init=False, default=False)
    """End the grace period of a `drain` now (a second signal)."""
    http_servers: list[Listener] = field(init=False, default_factory=list)
    """The listeners `serve` started (closed by `stop`)."""
    grpc_servers: list[Any] = field(init=False, default_factory=list)
    """The gRPC listeners (`kserve-grpc`) `serve` started (`grpc.aio.Server`s, stopped by `stop`)."""

    def __post_init__(self) -> None:
        scenario = self.scenario
        server = scenario.server
        self.contents = {m.id: ContentSource(m.content, self.base_dir) for m in scenario.models}
        self.api_keys = {k.key: k.name for k in server.api_keys}
        self.lora_updates = server.lora_runtime_updates or os.environ.get(
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower() in ("1", "true")  # as vLLM's envs.py reads it
        self.registry = Registry(server.connections.max_open or default_max_open())
        self.created = int(time.time())
        self._started_ms = time.time() * 1000
        self._seeds: list[int] = []
        self._context_lengths: dict[str, int] = {}
        self._entropy, self._entropy_used = b"", 0
        self._task: asyncio.Task[None] | None = None

    @property
    def triton_logging(self) -> dict[str, Any]:
        """Triton's log settings (`kserve.logging`), under the name earlier callers read them by."""
        return self.kserve.logging

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the engine's clock on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.engine.run())
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
        self.engine.stop()
        if self._task is not None:
            await self._task
            self._task = None
        self.fleet.close()
        self.engine.close()
        self.kserve.shared_memory.close()

    async def drain(self, grace_s: float | None = None) -> int:
        """Shut down as Kubernetes expects on SIGTERM: stop accepting, close idle connections, let the requests in
        flight finish for up to `grace_s` (default `server.shutdownGrace`), then end each stream still open with
        a final error event (and `[DONE]`) and each waiting request with a 503, and `stop`. Returns how many
        requests were ended that way (0: all finished in time)."""
        cut = await self.finish_requests(grace_s)
        await self.stop()
        return cut

    async def finish_requests(self, grace_s: float | None = None) -> int:
        """`drain` but the final `stop`: a split server's engine core drains its private listeners so (the requests
        its API servers passed on end as in one process) while its engine still serves the API servers."""
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
            fixed = self._context_lengths[model.id] = context_window(served)
        return fixed

    def epoch_ms(self, sim_ns: int) -> int:
        """A simulated instant as milliseconds since the epoch (the server started at virtual time 0)."""
        return int(self._started_ms + sim_ns / 1e6)

    def delay_s(self) -> float:
        """One draw of the network delay, in seconds (0 without one)."""
        return self.delays.next() / 1e9 if self.delays is not None else 0.0

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
            self._seeds = self.seeds.integers(2**62, size=256).tolist()[::-1]
        return self._seeds.pop()
