"""An API-server process: HTTP, parsing, tokens, content and SSE writes, with the engine in the engine core.

The handlers are the single process's, around a state whose engine link is an `EngineClient`: a submission
becomes a message, the engine core's events come back per step and reach each `Call` as the engine's own would,
fault picks and rate-limit admissions are asked over the socket, and `/metrics`' observations and the request
log's lines (`RemoteRecording`) go to the engine core. Routes whose handlers run in the engine core (metrics,
admin, model control, health, stored responses, ...: `runs_in`) are passed on to its private listener
(`relay.Forward`, and `grpc_relay.GrpcForward` for gRPC), so their answers are the single process's, byte for byte.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from ...engine import ApiFault, Arrival, Call, FaultBook, Simulation
from ...scenario import Scenario
from ...scenario.distributions import DurationDistribution
from ..openai.errors import ErrorAnswer
from ..pod import PodIdentity
from ..ratelimit import RateLimiter
from ..server import Parts
from ..state import ServerState
from . import wire
from .mirror import Mirror

T = TypeVar("T")

NO_CONTENT_TYPE = "X-Aisim-No-Content-Type"
"""Marks a forwarded request that came without a `Content-Type` (the engine core's listener removes both)."""
LAZY_S = 0.002
"""How long an observation for the engine core may wait for a message to go out with (`EngineClient.send`)."""


def not_running(reason: str) -> ErrorAnswer:
    """The one answer of an API server whose engine core is unreachable: a 503 with the reason."""
    return ErrorAnswer(503, f"The engine core is not running: {reason}", "ServiceUnavailableError")


@dataclass(eq=False)
class RemoteCall(Call):
    """A `Call` whose request runs in the engine core; `cid` names it there."""

    cid: int = -1


class EngineClient:
    """An API server's `EngineLink`: the engine core's engine, fault book, rate limiter, `/metrics` and request log
    over its Unix socket. `mirror` takes the engine core's state (`Mirror.apply`) as this process's own."""

    def __init__(self, path: str, rank: int, mirror: Mirror, faults: FaultBook, limiter: RateLimiter,
                 recording: bool) -> None:
        self.path = path
        self.rank = rank
        self.mirror = mirror
        self.faults = faults
        self.limiter = limiter
        self.log = RemoteRecording(self) if recording else None
        self.transport: asyncio.Transport | None = None
        self._closing = False
        self.calls: dict[int, RemoteCall] = {}
        self.rpcs: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count()
        self._out: list[Any] = []
        self._sending = False
        self._lazy: asyncio.TimerHandle | None = None
        self.started_wall = time.monotonic()
        """Where the engine core's virtual time 0 is on the (system-wide) monotonic clock (from its `Welcome`)."""
        self.speed = 1.0
        self.gone: str | None = None
        """Why the engine core is gone (None while it runs)."""
        self._welcome: asyncio.Future[None] | None = None

    async def connect(self) -> None:
        """Say hello and wait for the engine core's clock."""
        loop = asyncio.get_running_loop()
        self._welcome = loop.create_future()
        await loop.create_unix_connection(lambda: _Link(self), self.path)
        self._send(wire.Hello(self.rank))
        await asyncio.wait_for(self._welcome, 30)

    # -- the engine link -------------------------------------------------------------------------

    async def run(self) -> None:  # the engine core's clock runs the simulation
        return None

    def stop(self) -> None:
        """Send what is queued and close the connection (asyncio writes what the socket had no room for first)."""
        self._closing = True
        self._flush()
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        return None  # the engine core completes the request log

    async def closed(self) -> None:
        """Wait until what `stop` left to write is written (the process may end then)."""
        for _ in range(200):
            if self.transport is None or self.transport.get_write_buffer_size() == 0:
                return
            await asyncio.sleep(0.01)

    def now(self) -> int:
        return int((time.monotonic() - self.started_wall) * self.speed * 1e9)

    def submit(self, arrival: Arrival, live_tokens: bool = True, origin: tuple[str, float] | None = None) -> Call:
        """`origin`: the handler's endpoint and the instant its request began (the request log's, should this API
        server die before it logs the request). An engine core that is gone: an OpenAI route's 503 (raised), a
        KServe inference's failed call."""
        cid = next(self._ids)
        call = RemoteCall(arrival, live_tokens, submitted_wall=time.monotonic(), cid=cid)
        if self.gone is not None:
            if arrival.source != "kserve":
                raise not_running(self.gone)
            call.error = f"The engine core is not running: {self.gone}"
            asyncio.get_running_loop().call_soon(call, "failed", None, self.now())  # type: ignore[arg-type]
            return call
        self.calls[cid] = call
        endpoint, started = origin if origin is not None else ("", call.submitted_wall)
        self._send(wire.Submit(cid, live_tokens, arrival, endpoint, started))
        return call

    def abort(self, call: Call) -> None:
        if isinstance(call, RemoteCall) and call.cid in self.calls:
            self._send(wire.Abort(call.cid))

    async def act(self, action: Callable[[Callable[[T], None]], None]) -> T:
        """Actions run in the simulation, which is the engine core's: the handlers that act run there (`runs_in`)."""
        raise RuntimeError("an action on the simulation runs in the engine core, not in an API server")

    async def pick_fault(self, models: tuple[str, ...], endpoint: str, api_key: str | None,
                         override: str | None) -> ApiFault | None:
        value = await self._rpc(lambda rid: wire.Pick(rid, list(models), endpoint, api_key, override))
        if value == -1:
            return None
        if value == -2:
            return self.faults.forced(override or "")  # forced by the header: no counter read, made here alike
        fault: ApiFault = self.faults.states[value].fault
        return fault

    async def admit(self, api_key: str | None, tokens: int, model: str) -> dict[str, str]:
        if self.limiter.limits is None:
            return {}
        headers: dict[str, str] = await self._rpc(lambda rid: wire.Admit(rid, api_key, tokens, model))
        return headers

    def observe(self, call: Call, finish_reason: str, max_tokens: int | None, token_times: list[int],
                n: int | None) -> None:
        if isinstance(call, RemoteCall):
            self.send(wire.Observed(call.cid, finish_reason, max_tokens, n))

    # -- the engine core's state -------------------------------------------------------------------

    async def sync(self, everyone: bool = False) -> None:
        """Mirror the engine core's state now (after a route it served, which may have changed it); `everyone`:
        once every API server mirrors it."""
        self.mirror.apply(await self._rpc(lambda rid: wire.Sync(rid, everyone)))

    async def _rpc(self, make: Any) -> Any:
        if self.gone is not None:
            raise not_running(self.gone)
        rid = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.rpcs[rid] = future
        self._send(make(rid))
        return await future

    def send(self, message: Any) -> None:
        """Send `message` within `LAZY_S`, with the next message that is waited for if one comes first: an
        observation is not waited for, and going out with the next submission saves a message per request
        (what a message costs both processes is most of the split's overhead). A route handed on to the engine
        core syncs first, so `/metrics` always has them."""
        if self.gone is not None:
            return
        self._out.append(message)
        if not self._sending and self._lazy is None:
            self._lazy = asyncio.get_running_loop().call_later(LAZY_S, self._flush)

    # -- the socket ------------------------------------------------------------------------------

    def _send(self, message: Any) -> None:
        self._out.append(message)
        if not self._sending:
            self._sending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._sending = False
        if self._lazy is not None:
            self._lazy.cancel()
            self._lazy = None
        if self._out and self.transport is not None:
            out, self._out = self._out, []
            self.transport.write(wire.frame(out))

    def lost(self) -> None:
        """The engine core's end of the connection closed: it is gone, unless this side is stopping."""
        self.transport = None
        if not self._closing:
            self.engine_gone("it closed its connection")

    def _receive(self, message: Any) -> None:
        if isinstance(message, wire.Batch):
            calls = self.calls
            tokens = message.tokens
            for index in range(0, len(tokens), 2):
                call = calls.get(tokens[index])
                if call is not None:
                    call("token", None, tokens[index + 1])  # type: ignore[arg-type]  # no Request here
            for end in message.ends:
                call = calls.pop(end.cid, None)
                if call is None:
                    continue
                call.error = end.error
                call.kept_blocks = end.kept
                if end.times:
                    call.token_times.extend(end.times)
                    call.token_walls.extend([time.monotonic()] * len(end.times))
                call(end.event, None, end.time)  # type: ignore[arg-type]
        elif isinstance(message, wire.Reply):
            future = self.rpcs.pop(message.rid, None)
            if future is not None and not future.done():
                future.set_result(message.value)
        elif isinstance(message, wire.Failed):
            future = self.rpcs.pop(message.rid, None)
            status, text, kind, param, code, headers = message.error
            if future is not None and not future.done():
                future.set_exception(ErrorAnswer(status, text, kind, param, code, dict(headers)))
        elif isinstance(message, wire.Digest):
            self.mirror.apply(message.digest)
            if message.bid:
                self._send(wire.Ack(message.bid))
        elif isinstance(message, wire.Welcome):
            self.started_wall, self.speed = message.started_wall, message.speed
            self.mirror.apply(message.digest)
            if self._welcome is not None and not self._welcome.done():
                self._welcome.set_result(None)

    def engine_gone(self, reason: str) -> None:
        """The engine core died: every request still waiting for it fails now, with the reason (no client hangs).
        Called again (the supervisor's reason after the lost connection's), the reason becomes the later one."""
        if self.gone is not None:
            self.gone = reason
            return
        self.gone = reason
        now = self.now()
        for call in list(self.calls.values()):
            call.error = f"The engine core stopped: {reason}"
            call("failed", None, now)  # type: ignore[arg-type]
        self.calls.clear()
        for future in self.rpcs.values():
            if not future.done():
                future.set_exception(ErrorAnswer(503, f"The engine core stopped: {reason}", "ServiceUnavailableError"))
        self.rpcs.clear()


class _Link(asyncio.Protocol):
    """An API server's end of its connection to the engine core."""

    def __init__(self, client: EngineClient) -> None:
        self.client = client
        self.frames = wire.Frames(wire.to_front)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        receive = self.client._receive
        for messages in self.frames.feed(data):
            for message in messages:
                receive(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.lost()


class RemoteRecording:
    """The request log's lines, written by the engine core (one file for the whole server): a `RequestLog`."""

    def __init__(self, client: EngineClient) -> None:
        self.client = client

    def request(self, call: Call, end: str, endpoint: str, elapsed_s: float,
                started_wall: float | None = None) -> None:
        """Sent as the instant the request began on the (system-wide) monotonic clock, so that the engine core
        measures every timing field of the record on one clock: its own call's arrival, tokens and end."""
        if isinstance(call, RemoteCall):
            self.client.send(wire.Logged(call.cid, end, endpoint, time.monotonic() - elapsed_s))

    def infer(self, call: Call | None, model: str, version: str, batch: int, inputs: list[Any],
              outputs: list[tuple[Any, list[int], bytes]], elapsed_s: float, error: str = "",
              end: str = "finished", started_wall: float | None = None) -> None:
        cid = call.cid if isinstance(call, RemoteCall) else -1
        self.client.send(wire.LoggedInfer(cid, model, version, batch,
                                          [(t.name, t.datatype, list(t.shape)) for t in inputs],
                                          [(t.name, t.datatype, list(shape)) for t, shape, _ in outputs],
                                          time.monotonic() - elapsed_s, error, end))

    def load(self, model: str, version: str, elapsed_s: float, error: str = "") -> None:
        return None  # loads are served by the engine core, which logs them

    def close(self, sim: Simulation) -> None:
        return None


def api_server_state(scenario: Scenario, base_dir: Path, address: str, rank: int, *, seed: int | None = None,
                     network_delay: DurationDistribution | None = None, speed: float = 1.0, recording: bool = False,
                     pod: PodIdentity | None = None,
                     tokenizer_path: str | None = None) -> tuple[ServerState, EngineClient]:
    """An API server's state, its engine link the client of the engine core at `address` (connected by the caller:
    `EngineClient.connect`). The engine, faults, limits, metrics and request log are the engine core's. Rank 0
    draws the single process's sequence of request seeds, the others their own (two API servers must not give
    two requests the same seed)."""
    parts = Parts.build(scenario, base_dir, seed=seed, pod=pod, speed=speed, runs_engine=False)
    mirror = Mirror(parts.sim, parts.lora_adapters, parts.fleet, parts.kserve.shared_memory)
    client = EngineClient(address, rank, mirror, parts.faults, parts.limiter, recording)
    seeds = np.random.default_rng(np.random.SeedSequence([parts.sim.seed, 1, rank])) if rank else None
    state = parts.state(client, network_delay=network_delay, speed=speed, pod=pod, tokenizer_path=tokenizer_path,
                        seeds=seeds)
    return state, client
