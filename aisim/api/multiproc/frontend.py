"""An API-server process: HTTP, parsing, tokens, content and SSE writes, with the engine in the engine core.

The handlers are the single process's, around a state whose engine link is an `EngineClient`: a submission
becomes a message, the engine core's events come back per step and reach each `Call` as the engine's own would,
fault picks and rate-limit admissions are asked over the socket, and `/metrics`' observations and the request
log's lines (`RemoteRecording`) go to the engine core. Routes whose handlers run in the engine core (metrics,
admin, model control, health, stored responses, ...: `runs_in`) are passed on to its private listener
(`Forward`, and `grpc_relay.GrpcForward` for gRPC), so their answers are the single process's, byte for byte.
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
import tornado.httpclient
import tornado.httputil
import tornado.web

from ...engine import ApiFault, Arrival, Call, FaultBook, Simulation
from ...scenario import Scenario
from ...scenario.distributions import DurationDistribution
from ..openai.errors import ErrorAnswer
from ..pod import PodIdentity
from ..ratelimit import RateLimiter
from ..server import Parts, Relay
from ..state import ServerState
from . import wire
from .mirror import Mirror

T = TypeVar("T")

HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
NO_CONTENT_TYPE = "X-Aisim-No-Content-Type"
"""Marks a forwarded request that came without a `Content-Type` (the engine core's listener removes both)."""
FORWARDED_AT_ONCE = 4096
LAZY_S = 0.002
"""How long an observation for the engine core may wait for a message to go out with (`EngineClient.send`)."""


@dataclass(eq=False)
class RemoteCall(Call):
    """A `Call` whose request runs in the engine core; `cid` names it there."""

    cid: int = -1


class ClientGone(Exception):
    """The client of a forwarded request went away."""


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

    def submit(self, arrival: Arrival, live_tokens: bool = True) -> Call:
        cid = next(self._ids)
        call = RemoteCall(arrival, live_tokens, submitted_wall=time.monotonic(), cid=cid)
        if self.gone is not None:
            call.error = self.gone
            asyncio.get_running_loop().call_soon(call, "failed", None, self.now())  # type: ignore[arg-type]
            return call
        self.calls[cid] = call
        self._send(wire.Submit(cid, live_tokens, arrival))
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
            raise ErrorAnswer(503, f"The engine core is not running: {self.gone}", "ServiceUnavailableError")
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
        """The engine core died: every request still waiting for it fails now, with the reason (no client hangs)."""
        if self.gone is not None:
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

    def request(self, call: Call, end: str, endpoint: str, elapsed_s: float) -> None:
        if isinstance(call, RemoteCall):
            self.client.send(wire.Logged(call.cid, end, endpoint, elapsed_s))

    def infer(self, call: Call | None, model: str, version: str, batch: int, inputs: list[Any],
              outputs: list[tuple[Any, list[int], bytes]], elapsed_s: float, error: str = "",
              end: str = "finished") -> None:
        cid = call.cid if isinstance(call, RemoteCall) else -1
        self.client.send(wire.LoggedInfer(cid, model, version, batch,
                                          [(t.name, t.datatype, list(t.shape)) for t in inputs],
                                          [(t.name, t.datatype, list(shape)) for t, shape, _ in outputs],
                                          elapsed_s, error, end))

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
    # forwarded requests in flight at once (Tornado's client queues beyond 10: ten `/admin/events` watchers
    # would hold every other forwarded route)
    tornado.httpclient.AsyncHTTPClient.configure(None, max_clients=FORWARDED_AT_ONCE)
    state = parts.state(client, network_delay=network_delay, speed=speed, pod=pod, tokenizer_path=tokenizer_path,
                        seeds=seeds)
    return state, client


def relay(target: str, client: EngineClient) -> Relay:
    """What an API server's application passes the engine core's routes on with (`server.make_app`)."""
    return Forward, {"target": target, "client": client}


class Forward(tornado.web.RequestHandler):
    """Hand a request on to the engine core's private listener and relay its answer as it comes (a stream
    too), status, headers and body unchanged."""

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS")

    def initialize(self, target: str, client: EngineClient, **_: Any) -> None:
        self.target = target
        self.client = client
        self.client_gone = False

    def on_connection_close(self) -> None:
        self.client_gone = True  # a forwarded stream (`/admin/events`) is closed at its next chunk

    def set_default_headers(self) -> None:
        self._headers = tornado.httputil.HTTPHeaders()

    async def forward(self, *_: Any) -> None:
        await forward(self, self.target, self.client)

    get = head = post = delete = patch = put = options = forward

    def compute_etag(self) -> None:
        return None


async def forward(handler: tornado.web.RequestHandler, target: str, client: EngineClient) -> None:
    """`handler`'s request, answered by the engine core at `target` (`http://127.0.0.1:PORT`)."""
    request = handler.request
    started: list[bool] = [False]
    status: list[int] = [200]
    reason: list[str] = [""]
    headers = tornado.httputil.HTTPHeaders()

    def on_header(line: str) -> None:
        if line.startswith("HTTP/"):
            start = tornado.httputil.parse_response_start_line(line.strip())
            status[0], reason[0] = start.code, start.reason
            headers.clear()
        elif line.strip():
            headers.parse_line(line)

    def begin() -> None:
        if started[0]:
            return
        started[0] = True
        handler.set_status(status[0], reason[0] or None)
        for name, value in headers.get_all():
            if name.lower() not in HOP_HEADERS:
                handler.add_header(name, value)

    def on_chunk(chunk: bytes) -> None:
        if getattr(handler, "client_gone", False):
            raise ClientGone  # ends the forwarded request: the engine core sees its connection close
        begin()
        if not handler.request.connection or handler._finished:
            return
        handler.write(chunk)
        if "Content-Length" not in headers:  # a stream (chunked): each piece goes on as it comes; an answer of
            handler.flush()  # known length goes out whole, with its Content-Length, as the engine core sent it

    body = request.body if request.method in ("POST", "PUT", "PATCH", "DELETE") else None
    sent_headers = request.headers
    if body is not None and "Content-Type" not in sent_headers:  # Tornado's client would add a form's type
        sent_headers = tornado.httputil.HTTPHeaders(sent_headers)
        sent_headers[NO_CONTENT_TYPE] = "1"
    sent = tornado.httpclient.HTTPRequest(
        target + request.uri, method=request.method, headers=sent_headers, body=body,
        allow_nonstandard_methods=True, follow_redirects=False, decompress_response=False,
        request_timeout=24 * 3600, connect_timeout=10, header_callback=on_header, streaming_callback=on_chunk)
    try:  # first what this API server sent before (a finished request's observations) reaches the engine core
        await client.sync()
    except ErrorAnswer:
        pass
    try:
        await tornado.httpclient.AsyncHTTPClient().fetch(sent, raise_error=False)
    except ClientGone:
        return
    except OSError as error:
        if not started[0]:
            handler.set_status(503)
            handler.finish(f'{{"error": "the engine core is not reachable: {error}"}}')
        return
    begin()
    if request.method != "GET" or "/ready" in request.uri or "/load" in request.uri:
        try:  # the engine's state may have changed (a model loaded): every API server mirrors it before the answer
            await client.sync(everyone=request.method != "GET")
        except ErrorAnswer:
            pass
    if not handler._finished:
        handler.finish()
