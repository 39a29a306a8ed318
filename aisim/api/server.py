"""The server: one live simulation behind Tornado applications, one per listener.

`local_state` builds the `ServerState` of a server whose engine runs in this process (one process, or a split
server's engine core) from its parts (`Parts`: what every serving process builds alike, and an API server too,
`multiproc.frontend`). `make_app(state, personalities)` builds the Tornado application a listener serves, every
route served here, or, in an API server, those that run in the engine core passed on to it; `serve` starts all
the scenario's listeners in the running event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tornado.httputil
import tornado.netutil
import tornado.web

from ..engine import Draws, FaultBook, Simulation
from ..errors import ListenError, ServeError
from ..fleet.data_parallel import with_data_parallel
from ..fleet.runtime import FleetRuntime
from ..scenario import Scenario
from ..scenario.distributions import DurationDistribution
from ..scenario.server import Server
from .content.hf_tokenizer import load_tokenizer
from .content.tokenizer import default_tokenizer
from .http.connections import (
    Listener,
    Policy,
    is_loopback,
    kserve_error,
    openai_error,
    security_headers,
)
from .kserve import http as kserve_http
from .kserve.state import KServeState
from .link import EngineLink, LocalEngine
from .metrics import dcgm, triton
from .metrics.feed import MetricsFeed
from .openai import admin, anthropic, lifecycle, vllm
from .openai import routes as openai_routes
from .openai.store import ResponseStore
from .pod import PodIdentity, apply
from .ratelimit import RateLimiter
from .state import ServerState, context_window

DEFAULT_PERSONALITIES = ("openai", "vllm", "vllm-metrics")
LISTEN_BACKLOG = 2048
"""Connections the kernel queues before the server accepts them (uvicorn's default, which vLLM serves
with). Tornado's default of 128 drops the rest of a burst of clients connecting at once, and they retry
only after TCP's one-second SYN timeout: 500 streams started together used to take 1.1 s to all begin."""

Relay = tuple[type[tornado.web.RequestHandler], dict[str, Any]]
"""The handler (and its arguments) that passes a request on to the engine core, in an API server."""


@dataclass
class Parts:
    """What every serving process builds alike from the scenario, whichever side of the engine it is on: the
    simulation (run here, or mirrored in an API server), the fault book and rate limiter, the `/metrics` feed,
    the fleet's runtime, the LoRA adapters and Triton's settings; and the random streams of the server."""

    scenario: Scenario
    base_dir: Path
    sim: Simulation
    faults: FaultBook
    limiter: RateLimiter
    feed: MetricsFeed
    fleet: FleetRuntime
    lora_adapters: dict[str, dict[str, str]]
    kserve: KServeState
    delay_rng: np.random.Generator
    seed_rng: np.random.Generator

    @classmethod
    def build(cls, scenario: Scenario, base_dir: Path = Path("."), *, seed: int | None = None,
              pod: PodIdentity | None = None, speed: float = 1.0, runs_engine: bool = True) -> Parts:
        """`runs_engine`: False in an API server, where the fleet starts no KV-event publisher nor router."""
        scenario = with_data_parallel(scenario, scenario.server.fleet.data_parallel_size)
        if seed is None and pod is not None:  # a fleet is not N copies of one random stream
            seed = pod.seed(scenario.seed)
        sim = Simulation(scenario, base_dir, seed=seed, macro_steps=False, retain=False)
        fault_rng, delay_rng, seed_rng = (np.random.default_rng(s)
                                          for s in np.random.SeedSequence([sim.seed, 1]).spawn(3))
        feed = MetricsFeed(sim, context_window)  # before the fleet: its KV-event sources publish after the feed's step
        fleet = FleetRuntime(scenario, sim, pod.name if pod is not None else None, speed, runs_engine)
        return cls(scenario, base_dir, sim, FaultBook(list(scenario.faults), fault_rng),
                   RateLimiter(scenario.server.rate_limits), feed, fleet,
                   {m.id: {name: "" for name in m.lora_adapters} for m in scenario.models}, KServeState(),
                   delay_rng, seed_rng)

    def state(self, engine: EngineLink, *, network_delay: DurationDistribution | None = None, speed: float = 1.0,
              pod: PodIdentity | None = None, tokenizer_path: str | None = None,
              seeds: np.random.Generator | None = None) -> ServerState:
        """The server's state around `engine`; `seeds` replaces the server's stream of request seeds."""
        delay = network_delay or self.scenario.server.network_delay
        return ServerState(self.scenario, self.sim, engine,
                           load_tokenizer(tokenizer_path) if tokenizer_path is not None else default_tokenizer(),
                           self.feed, ResponseStore(), self.fleet, self.faults, self.limiter, self.kserve,
                           self.seed_rng if seeds is None else seeds,
                           Draws(delay, self.delay_rng) if delay is not None else None, self.lora_adapters,
                           self.base_dir, speed, pod)


def local_state(scenario: Scenario, base_dir: Path = Path("."), *, seed: int | None = None,
                network_delay: DurationDistribution | None = None, speed: float = 1.0,
                record: str | Path | None = None, pod: PodIdentity | None = None,
                tokenizer_path: str | None = None) -> ServerState:
    """The state of a server whose engine runs in this process (`LocalEngine`): `seed` pins the simulation's
    seed (else the pod's, else the scenario's), `network_delay` overrides the scenario's, `record` writes the
    request log there (`aisim serve --record`), `pod` serves as that Kubernetes pod, `tokenizer_path` counts
    with a Hugging Face tokenizer (`aisim serve --tokenizer`: a folder or a model id in the local cache)."""
    parts = Parts.build(scenario, base_dir, seed=seed, pod=pod, speed=speed)
    engine = LocalEngine(parts.sim, speed, parts.faults, parts.limiter, parts.feed, record)
    return parts.state(engine, network_delay=network_delay, speed=speed, pod=pod, tokenizer_path=tokenizer_path)


def make_app(state: ServerState, personalities: tuple[str, ...] = DEFAULT_PERSONALITIES,
             metrics_path: str = "/metrics", relay: Relay | None = None,
             access_log: bool = True) -> tornado.web.Application:
    """The Tornado application of one listener, speaking the given personalities. With `relay` (an API server of a
    split server), every route whose handler runs in the engine core (`runs_in`) is passed on with it (told the
    route's handler: its error shapes). `access_log` False: Tornado's access log is not written (the engine core's
    private listener: the API server that passed a request on logs it, once, with what its client got)."""
    routes: list[Any] = []
    if "openai" in personalities or "vllm" in personalities:
        routes += openai_routes.routes()
    if "vllm" in personalities:
        fleet = state.scenario.server.fleet
        routes += vllm.routes(state.lora_updates)
        routes += lifecycle.routes(fleet.startup.sleep_mode, fleet.kv_events is not None and fleet.kv_events.enabled)
    if "vllm" in personalities or "anthropic" in personalities:  # vLLM serves Anthropic's Messages API too
        routes += anthropic.routes(strict="vllm" not in personalities)
    if "vllm-metrics" in personalities:
        routes.append((metrics_path, vllm.MetricsHandler))
    if "triton-metrics" in personalities:
        routes.append((metrics_path, triton.MetricsHandler))
    if "dcgm-metrics" in personalities:
        routes += dcgm.routes(metrics_path)
    if "admin" in personalities and state.scenario.server.admin.enabled:
        routes += admin.routes()
    if "kserve" in personalities:
        routes += kserve_http.routes()
    openai = "openai" in personalities or "vllm" in personalities
    missing: type[tornado.web.RequestHandler] = (
        openai_routes.NotFoundHandler if openai else
        anthropic.NotFoundHandler if "anthropic" in personalities else kserve_http.NotFoundHandler)
    missing_args: dict[str, Any] = {}
    if relay is not None:
        passer, passer_args = relay
        routes = [(route[0], passer, {**passer_args, "route": route[1]}) if route[1].runs_in == "engine_core"
                  else route for route in routes]
        missing, missing_args = passer, {**passer_args, "route": missing}
    quiet: dict[str, Any] = {} if access_log else {"log_function": lambda _handler: None}
    app = tornado.web.Application(routes, state=state, compress_response=False, **quiet,
                                  transforms=[security_headers(tuple(state.scenario.server.cors_origins))],
                                  default_handler_class=missing, default_handler_args=missing_args)
    return apply(app, state.pod)


def open_listener(state: ServerState, app: tornado.httputil.HTTPServerConnectionDelegate,
                  personalities: tuple[str, ...], host: str) -> Listener:
    """A listener for `app` with the server's hygiene (`http.connections`), its refusals in the personality's
    error shape (OpenAI's, or Triton's for a KServe-only listener)."""
    server = state.scenario.server
    openai = "openai" in personalities or "vllm" in personalities or "kserve" not in personalities
    policy = Policy.of(server, host, openai_error if openai else kserve_error, lambda: state.draining)
    http = Listener(app, server, policy, state.registry)
    state.http_servers.append(http)
    return http


class RefusedToStart(ServeError):
    """A configuration `serve` will not start with (an admin listener without a token, say)."""


def check_admin(server: Server, host: str) -> None:
    """The admin personality needs a token, unless it is bound to loopback and marked `insecure`."""
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


async def start_grpc(state: ServerState, host: str, port: int, passed_on: Any = None) -> int:
    """A `kserve-grpc` listener (HTTP/2 on a port of its own); returns its port. grpcio and Triton's stubs are an
    optional extra (`aisim[triton]`), imported only for a scenario that serves gRPC."""
    from .kserve import grpc

    grpc_server, bound = await grpc.start(state, host, port, passed_on)
    state.grpc_servers.append(grpc_server)
    return bound


async def serve(state: ServerState, host: str | None = None, port: int | None = None,
                port_offset: int = 0) -> list[tuple[str, int]]:
    """Start every listener of the scenario (the first one's port overridden by `port`, the others' moved by
    `port_offset`); returns the (host, port) pairs actually bound."""
    server = state.scenario.server
    address = host or server.host
    check_admin(server, address)
    state.start()
    bound: list[tuple[str, int]] = []
    for index, listener in enumerate(server.listeners):
        personalities = tuple(listener.personalities)
        chosen = port if (index == 0 and port is not None) else listener_port(listener.port, port_offset)
        try:
            if "kserve-grpc" in personalities:  # validation keeps it alone on its listener
                bound.append((address, await start_grpc(state, address, chosen)))
                continue
            sockets = tornado.netutil.bind_sockets(chosen, address, backlog=LISTEN_BACKLOG)
        except OSError as error:
            raise ListenError(address, chosen, error, "gRPC" if "kserve-grpc" in personalities else "") from None
        http = open_listener(state, make_app(state, personalities, listener.metrics_path), personalities, address)
        http.add_sockets(sockets)
        bound.append((host or server.host, sockets[0].getsockname()[1]))
    return bound

