"""The engine core process: the simulation on the real-time clock and everything that is one per server.

It holds a whole single-process `ServerState` (its engine link a `LocalEngine`) and serves it twice: to the API
servers' hot path over a Unix stream socket (submissions, aborts, fault picks, rate-limit admissions, the
observations for `/metrics` and the request log), and, for every other route (metrics, admin, model control, health,
tokenize, ...), on a private loopback listener per public listener that the API servers hand those requests on to.
Events a loop turn produces for one API server leave as one message: one engine step, one message per API server.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import sys
from collections.abc import Awaitable
from functools import partial
from types import SimpleNamespace
from typing import Any, cast

import tornado.httputil
import tornado.netutil
import tornado.web

from ...engine import END_EVENTS, Call, FaultContext
from ..openai.errors import ErrorAnswer
from ..server import make_app, open_listener, start_grpc
from ..state import ServerState
from . import wire
from .frontend import NO_CONTENT_TYPE
from .mirror import Mirror

ENDED_KEPT = 8192
"""Ended calls kept for the observations that follow their end (bounded, should an API server never send them)."""

BARRIER_S = 2.0
"""How long a change's answer waits for the API servers to acknowledge it at most (one may hang)."""
DIGEST_S = 0.1
"""How often the engine core looks whether the state API servers mirror changed by itself."""
FLUSH_S = 0.001
"""Events leave for the API servers at most this often (a reply waited for leaves at once). A mock model's 500
streams make tokens at 25,000 distinct instants a second; a message each costs both processes more than the
tokens themselves (measured: 59 % of the asked tokens/s delivered); gathered over a millisecond, each token
is at most that late and the message rate per API server is bounded."""

class Link(asyncio.Protocol):
    """The engine core's end of one API server's connection."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.frames = wire.Frames(wire.to_core)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        for messages in self.frames.feed(data):
            for message in messages:
                try:
                    self.core._handle(self, message)
                except Exception as error:  # noqa: BLE001 - one bad message must not stop the engine
                    sys.stderr.write(f"aisim engine core: {type(message).__name__}: {error!r}\n")
        self.core._schedule()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.core.abandon(self)  # its API server is gone: its requests are aborted (their KV blocks freed)

    def send(self, messages: list[Any]) -> None:
        if self.transport is not None:
            self.transport.write(wire.frame(messages))


Key = tuple[Link, int]


class EngineCore:
    """The engine core's side of the API servers' connections, on the engine's event loop."""

    def __init__(self, state: ServerState, path: str) -> None:
        self.state = state
        self.path = path
        self.mirrored = Mirror(state.sim, state.lora_adapters, state.fleet, state.kserve.shared_memory)
        """What the API servers mirror of this process's state (its `digest`)."""
        self.server: asyncio.AbstractServer | None = None
        self.calls: dict[Key, Call] = {}
        self.ended: collections.OrderedDict[Key, Call] = collections.OrderedDict()
        """Ended calls whose request log line has not come yet (bounded: `ENDED_KEPT`); one that is logged leaves,
        so that `close` logs exactly the others, once."""
        self.origins: dict[Key, tuple[str, float]] = {}
        """Each request's endpoint and the instant it began in its API server (`wire.Submit`), until it is logged."""
        self.abandoned: set[Key] = set()
        """Requests of API servers that are gone: the engine core observes and logs their end itself."""
        self.ranks: dict[int, Link] = {}
        self._tokens: dict[Link, list[int]] = {}
        self._ends: dict[Link, list[wire.End]] = {}
        self._replies: dict[Link, list[Any]] = {}
        self._flushing = False
        self._loop = asyncio.get_running_loop()
        self._flushed = 0.0
        self._later: asyncio.TimerHandle | None = None
        self._last_digest: dict[str, Any] = {}
        self._barrier_ids = itertools.count(1)
        self._barriers: dict[int, tuple[Link, int, dict[str, Any], set[Link], float]] = {}

    async def start(self) -> None:
        """Listen for the API servers."""
        self.server = await self._loop.create_unix_server(lambda: Link(self), self.path)
        self._last_digest = self.mirrored.digest()
        self._loop.call_later(DIGEST_S, self.watch_digest)

    # -- in --------------------------------------------------------------------------------------

    def _handle(self, ident: Link, message: Any) -> None:
        state = self.state
        engine = state.engine
        if isinstance(message, wire.Submit):
            call = engine.submit(message.arrival, message.live)
            key = (ident, message.cid)
            self.calls[key] = call
            if engine.log is not None:
                self.origins[key] = (message.endpoint, message.started or call.submitted_wall)
            state.requests_in_flight += 1
            call.listen(partial(self._event, ident, message.cid, call))
        elif isinstance(message, wire.Abort):
            running = self.calls.get((ident, message.cid))
            if running is not None:
                engine.abort(running)
        elif isinstance(message, wire.Pick):
            fault = state.faults.pick(FaultContext(tuple(message.models), message.endpoint, message.api_key,
                                              engine.now()), message.override)
            faults = [s.fault for s in state.faults.states]
            value = -1 if fault is None else next((i for i, f in enumerate(faults) if f is fault), -2)
            self._reply(ident, wire.Reply(message.rid, value))  # -2: forced by the header, rebuilt there alike
        elif isinstance(message, wire.Admit):
            try:
                headers = state.limiter.admit(message.api_key, message.tokens, message.model, engine.now())
            except ErrorAnswer as error:
                self._reply(ident, wire.Failed(message.rid, (error.status, error.message, error.type, error.param,
                                                             error.code, error.headers)))
                return
            self._reply(ident, wire.Reply(message.rid, headers))
        elif isinstance(message, wire.Observed):
            found = self._find((ident, message.cid), pop=engine.log is None)
            if found is not None:
                engine.observe(found, message.reason, message.max_tokens, found.token_times, message.n)
        elif isinstance(message, wire.Logged):
            key = (ident, message.cid)
            done = self._find(key, pop=True)
            self.origins.pop(key, None)
            if done is not None and engine.log is not None:
                engine.log.request(done, message.end, message.endpoint, 0.0, message.started)
        elif isinstance(message, wire.LoggedInfer):
            self._log_infer(ident, message)
        elif isinstance(message, wire.Sync):
            self._sync(ident, message)
        elif isinstance(message, wire.Ack):
            self._acked(message.bid, ident)
        elif isinstance(message, wire.Hello):
            self._hello(ident, message.rank)

    def _sync(self, ident: Link, message: wire.Sync) -> None:
        """The digest for `ident`; with `everyone`, once every other API server has it (a model a client just
        loaded through one API server is then served by all of them)."""
        current = self.mirrored.digest()
        self._last_digest = current
        others = [link for link in self.ranks.values() if link is not ident]
        if not message.everyone or not others:
            self._reply(ident, wire.Reply(message.rid, current))
            return
        bid = next(self._barrier_ids)
        self._barriers[bid] = (ident, message.rid, current, set(others), self._loop.time())
        for link in others:
            self._reply(link, wire.Digest(bid, current))

    def _acked(self, bid: int, ident: Link | None) -> None:
        barrier = self._barriers.get(bid)
        if barrier is None:
            return
        asker, rid, current, waiting, since = barrier
        if ident is not None:
            waiting.discard(ident)
        waiting.intersection_update(self.ranks.values())  # an API server that went away acks nothing
        if not waiting or self._loop.time() - since > BARRIER_S:  # nor does a hung one: not waited for long
            del self._barriers[bid]
            self._reply(asker, wire.Reply(rid, current))

    def watch_digest(self) -> None:
        """Push the digest to every API server when it changed by itself (a model's load finished in simulated
        time, say); every `DIGEST_S`."""
        current = self.mirrored.digest()
        if current != self._last_digest:
            self._last_digest = current
            for link in self.ranks.values():
                self._reply(link, wire.Digest(0, current))
            self._schedule()
        for bid in list(self._barriers):
            self._acked(bid, None)
        self._loop.call_later(DIGEST_S, self.watch_digest)

    def _find(self, key: Key, pop: bool) -> Call | None:
        call = self.calls.get(key) or self.ended.get(key)
        if pop:
            self.ended.pop(key, None)
        return call

    def _log_infer(self, ident: Link, message: wire.LoggedInfer) -> None:
        recording = self.state.engine.log
        call = self._find((ident, message.cid), pop=True) if message.cid >= 0 else None
        self.origins.pop((ident, message.cid), None)
        if recording is None:
            return
        inputs = [SimpleNamespace(name=n, datatype=d, shape=s) for n, d, s in message.inputs]
        outputs = [(SimpleNamespace(name=n, datatype=d), s, b"") for n, d, s in message.outputs]
        recording.infer(call, message.model, message.version, message.batch, inputs, outputs, 0.0,
                        message.error, message.end, message.started)

    def _hello(self, ident: Link, rank: int) -> None:
        """An API server (re)started: what an earlier one of its rank left running is aborted (its client's
        connection died with it), and the new one learns the clock."""
        old = self.ranks.get(rank)
        if old is not None and old is not ident:
            self.abandon(old)
        self.ranks[rank] = ident
        engine = self.state.engine
        self._reply(ident, wire.Welcome(engine.started_wall, engine.speed, self.mirrored.digest()))

    def abandon(self, ident: Link) -> None:
        """Abort every request of an API server that is gone (its KV blocks return at once)."""
        for rank, link in list(self.ranks.items()):
            if link is ident:
                del self.ranks[rank]
        for key, call in list(self.calls.items()):
            if key[0] is ident:
                self.abandoned.add(key)
                self.state.engine.abort(call)

    # -- out -------------------------------------------------------------------------------------

    def _event(self, ident: Link, cid: int, call: Call, event: str, time_ns: int) -> None:
        if event == "token":
            self._tokens.setdefault(ident, []).extend((cid, time_ns))
        elif event in END_EVENTS:
            key = (ident, cid)
            self.calls.pop(key, None)
            self.ended[key] = call
            if len(self.ended) > ENDED_KEPT:
                evicted, _ = self.ended.popitem(last=False)
                self.origins.pop(evicted, None)
            self.state.requests_in_flight -= 1
            if key in self.abandoned:
                self._orphan_ended(key, call, event)
                return
            error = call.request.error if event == "failed" and call.request is not None else ""
            self._ends.setdefault(ident, []).append(
                wire.End(cid, event, time_ns, error, None if call.live_tokens else call.token_times,
                         None if call.kept_blocks is None else list(call.kept_blocks)))
        self._schedule()

    def _orphan_ended(self, key: Key, call: Call, event: str) -> None:
        """A request whose API server died ended (aborted): in `/metrics` and the request log, as its handler would
        have written it (its endpoint and start as its `Submit` gave them)."""
        self.abandoned.discard(key)
        self.ended.pop(key, None)
        endpoint, started = self.origins.pop(key, ("", call.submitted_wall))
        reason = {"finished": "stop", "aborted": "abort"}.get(event, "error")
        engine = self.state.engine
        engine.observe(call, reason, None, call.token_times, 1)
        if engine.log is not None and call.arrival.source == "api":
            engine.log.request(call, event, endpoint, 0.0, started)

    def _reply(self, ident: Link, reply: Any) -> None:
        self._replies.setdefault(ident, []).append(reply)

    def _schedule(self) -> None:
        """Flush at the end of this loop turn; events only (no reply waited for) at most every `FLUSH_S`."""
        if self._flushing or not (self._tokens or self._ends or self._replies):
            return
        self._flushing = True
        wait = self._flushed + FLUSH_S - self._loop.time()
        if self._replies or wait <= 0:
            self._loop.call_soon(self.flush)
        else:
            self._later = self._loop.call_later(wait, self.flush)

    def flush(self) -> None:
        """Send what this loop turn produced: per API server one message (its replies, then one `Batch`)."""
        self._flushing = False
        self._flushed = self._loop.time()
        if self._later is not None:
            self._later.cancel()
            self._later = None
        tokens, ends, replies = self._tokens, self._ends, self._replies
        self._tokens, self._ends, self._replies = {}, {}, {}
        for ident in set(tokens) | set(ends) | set(replies):
            messages = replies.get(ident, [])
            if ident in tokens or ident in ends:
                messages.append(wire.Batch(tokens.get(ident, []), ends.get(ident, [])))
            ident.send(messages)

    # -- shutdown --------------------------------------------------------------------------------

    async def close(self) -> None:
        """Abort what is still running (its API servers are gone), log what no API server logged, stop."""
        for call in list(self.calls.values()):
            self.state.engine.abort(call)
        for _ in range(50):
            if not self.calls:
                break
            await asyncio.sleep(0.01)
        recording = self.state.engine.log
        if recording is not None:  # what is still here no API server logged (it left first): logged once, here
            for key, call in list(self.ended.items()):
                if call.arrival.source == "api":
                    endpoint, started = self.origins.get(key, ("", call.submitted_wall))
                    recording.request(call, call.ending[0] if call.ending else "aborted", endpoint, 0.0, started)
            self.ended.clear()
            self.origins.clear()
        self.flush()
        if self.server is not None:
            self.server.close()


class Unmarked(tornado.httputil.HTTPServerConnectionDelegate):
    """An application behind the API servers' `Forward`: a request marked as sent without a `Content-Type`
    loses the one Tornado's client gave it, so that the application sees it as the client sent it."""

    def __init__(self, app: tornado.web.Application) -> None:
        self.app = app

    def start_request(self, server_conn: object,
                      request_conn: tornado.httputil.HTTPConnection) -> tornado.httputil.HTTPMessageDelegate:
        return _UnmarkedMessage(self.app.start_request(server_conn, request_conn))

    def on_close(self, server_conn: object) -> None:
        self.app.on_close(server_conn)


class _UnmarkedMessage(tornado.httputil.HTTPMessageDelegate):
    def __init__(self, inner: tornado.httputil.HTTPMessageDelegate) -> None:
        self.inner = inner

    def headers_received(self, start_line: tornado.httputil.RequestStartLine | tornado.httputil.ResponseStartLine,
                         headers: tornado.httputil.HTTPHeaders) -> Awaitable[None] | None:
        if NO_CONTENT_TYPE in headers:
            del headers[NO_CONTENT_TYPE]
            headers.pop("Content-Type", None)
        return self.inner.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        return self.inner.data_received(chunk)

    def finish(self) -> None:
        self.inner.finish()

    def on_connection_close(self) -> None:
        self.inner.on_connection_close()


async def serve_private(state: ServerState, host: str) -> list[int]:
    """The engine core's listeners, per public listener its application (HTTP or gRPC) on a free loopback port:
    what the API servers hand on to. `host` is the public listeners' (the requests handed on keep their `Host`).
    Returns each listener's port, in the scenario's order."""
    state.start()
    ports: list[int] = []
    for listener in state.scenario.server.listeners:
        personalities = tuple(listener.personalities)
        if "kserve-grpc" in personalities:
            ports.append(await start_grpc(state, "127.0.0.1", 0))
            continue
        app = Unmarked(make_app(state, personalities, listener.metrics_path, access_log=False))
        http = open_listener(state, app, personalities, host)
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1", backlog=2048)
        http.add_sockets(sockets)
        ports.append(sockets[0].getsockname()[1])
    return ports
