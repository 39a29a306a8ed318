"""An API server's passed-on routes: `Forward`, a request of this API server answered by the engine core.

A route whose handler runs in the engine core (`runs_in`: `/v1/responses`, `/tokenize`, admin, KServe control,
`/metrics`, `/health`, ...) is handed on to the engine core's private listener over HTTP/1.1 and its answer relayed
as it comes, status, headers and body unchanged. It is an in-flight request of this API server like a local one:
- the drain knows it (`ServerState.handlers`): on SIGTERM it finishes within the grace period, or is ended with the
  route's own answer (the engine core cuts its handler at the same deadline; if that answer does not come, the
  route's 503 JSON or its stream's terminal error event is written here);
- a client that goes away closes the connection to the engine core at once, so the engine core's handler aborts the
  request in the engine (its KV blocks return; it counts as `abort`);
- an engine core that dies or cannot be reached fails it with the route's JSON error, a 503 with the reason ("The
  engine core is not running: ..."), or, mid-stream, the route's terminal error event;
- `/health` and the other probes answer within `PROBE_S`: a 503 when the engine core does not answer (paused, hung).
No path lets an exception escape into Tornado's log: every failure is an answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import tornado.http1connection
import tornado.httputil
import tornado.iostream
import tornado.tcpclient
import tornado.web

from ...engine import Call
from ..openai.errors import ErrorAnswer
from ..openai.handlers import SHUTTING_DOWN
from ..server import Relay
from .frontend import NO_CONTENT_TYPE, EngineClient, not_running

HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
PROBE_S = 2.0
"""How long a probe (`/health`, `/ping`, `/v2/health/...`) waits for the engine core's answer before its 503."""
PROBES = ("/health", "/ping", "/v2/health/live", "/v2/health/ready")
CUT_WAIT_S = 0.25
"""After the grace period, how long a passed-on request waits for the engine core's own cut answer before this API
server ends it itself (the API server's drain waits 0.5 s for every cut request to finish)."""
GONE_WAIT_S = 0.2
"""How long a relay whose connection to the engine core broke waits to learn why (the engine core's Unix socket
closes in the same instant when it dies)."""


def relay(target: str, client: EngineClient) -> Relay:
    """What an API server's application passes the engine core's routes on with (`server.make_app`)."""
    return Forward, {"target": target, "client": client}


class Forward(tornado.web.RequestHandler):
    """Hand a request on to the engine core's private listener and relay its answer as it comes (a stream too);
    an in-flight request of this API server (`ServerState.handlers`) until its answer ends."""

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS")

    def initialize(self, target: str, client: EngineClient, route: Any = None, **_: Any) -> None:
        self.target = target
        self.client = client
        self.route = route
        self.calls: list[Call] = []  # none here: the engine core's handler holds the request's calls
        self.gone = False
        self.cut = False
        self.events = 0
        """SSE events relayed so far (a Responses stream's next `sequence_number`)."""
        self.upstream: tornado.http1connection.HTTP1Connection | None = None
        self.answered = False
        """The engine core's answer ended whole."""

    def set_default_headers(self) -> None:
        self._headers = tornado.httputil.HTTPHeaders()

    def compute_etag(self) -> None:
        return None

    def on_connection_close(self) -> None:
        """The client went away: close the connection to the engine core, whose handler then aborts the request."""
        self.gone = True
        self._close_upstream()

    def shut_down(self) -> None:
        """The grace period is over (`ServerState.drain`): the engine core cuts its handler at the same deadline;
        should its answer not come within `CUT_WAIT_S`, end the request here with the route's own answer."""
        self.cut = True
        asyncio.get_running_loop().call_later(CUT_WAIT_S, self._end_cut)

    def _end_cut(self) -> None:
        if self._finished or self.gone:
            return
        self._close_upstream()
        self.fail(self._ending())

    def _ending(self) -> ErrorAnswer:
        """Why this request ends before its answer: the engine core gone (with its reason), else the shutdown."""
        reason = self.client.gone
        if reason is None:
            return SHUTTING_DOWN
        if self._headers_written:
            return ErrorAnswer(503, f"The engine core stopped: {reason}", "ServiceUnavailableError")
        return not_running(reason)

    def _close_upstream(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None and not self.answered:
            upstream.close()

    # -- the relay -------------------------------------------------------------------------------

    async def forward(self, *_: Any) -> None:
        state = self.application.settings["state"]
        state.handlers.add(self)
        probe = self.request.method in ("GET", "HEAD") and self.request.path in PROBES
        try:
            if probe:
                await asyncio.wait_for(self._relay(), PROBE_S)
            else:
                await self._relay()
        except TimeoutError:
            self._close_upstream()
            self.fail(not_running(f"it did not answer within {PROBE_S:g}s"))
        except Exception as error:  # noqa: BLE001 - every failure is an answer, never Tornado's traceback
            if not self.gone and not self._finished:
                self.fail(not_running(f"the relay failed: {error!r}"))
        finally:
            state.handlers.discard(self)

    get = head = post = delete = patch = put = options = forward

    async def _relay(self) -> None:
        client = self.client
        if client.gone is not None:
            self.fail(not_running(client.gone))
            return
        try:  # first what this API server sent before (a finished request's observations) reaches the engine core
            await client.sync()
        except ErrorAnswer:
            pass
        if self.gone:
            return
        answered = await self._exchange()
        if self.gone or self._finished:
            return
        if not answered:
            await self._lost()
            return
        if self.request.method != "GET" or "/ready" in self.request.uri or "/load" in self.request.uri:
            try:  # the engine's state may have changed (a model loaded): every API server mirrors it first
                await client.sync(everyone=self.request.method != "GET")
            except ErrorAnswer:
                pass
        if not self._finished and not self.gone:
            self.finish()

    async def _exchange(self) -> bool:
        """Send the request to the engine core and relay its answer; True when the answer ended whole."""
        request = self.request
        host, port = self.target.removeprefix("http://").rsplit(":", 1)
        try:
            stream = await tornado.tcpclient.TCPClient().connect(host, int(port))
        except (OSError, tornado.iostream.StreamClosedError):
            return False
        if self.gone:
            stream.close()
            return False
        params = tornado.http1connection.HTTP1ConnectionParameters(no_keep_alive=True, decompress=False,
                                                                   max_body_size=2**62, chunk_size=65536)
        upstream = self.upstream = tornado.http1connection.HTTP1Connection(stream, True, params)
        headers = tornado.httputil.HTTPHeaders()
        for name, value in request.headers.get_all():
            if name.lower() not in HOP_HEADERS:
                headers.add(name, value)
        body = request.body if request.method in ("POST", "PUT", "PATCH", "DELETE") else b""
        if request.method in ("POST", "PUT", "PATCH", "DELETE"):
            headers["Content-Length"] = str(len(body))
            if "Content-Type" not in request.headers:
                headers[NO_CONTENT_TYPE] = "1"
        headers["Connection"] = "close"
        answer = _Answer(self)
        try:
            upstream.write_headers(tornado.httputil.RequestStartLine(request.method or "GET", request.uri or "/",
                                                                      "HTTP/1.1"), headers)
            if body:
                upstream.write(body)
            upstream.finish()
            await upstream.read_response(answer)
        except (OSError, tornado.iostream.StreamClosedError, tornado.httputil.HTTPInputError):
            pass
        finally:
            self.upstream = None
            stream.close()
        return answer.ended

    async def _lost(self) -> None:
        """The engine core's connection broke before its answer ended: the route's error, with the reason."""
        client = self.client
        for _ in range(int(GONE_WAIT_S / 0.01)):
            if client.gone is not None or self.cut:
                break
            await asyncio.sleep(0.01)
        if self.gone or self._finished:
            return
        if client.gone is None and not self.cut:
            reason = "it closed the connection"
            self.fail(not_running(reason) if not self._headers_written else
                      ErrorAnswer(503, f"The engine core stopped: {reason}", "ServiceUnavailableError"))
            return
        self.fail(self._ending())

    def fail(self, error: ErrorAnswer) -> None:
        """End this request with `error` in the route's shape: its JSON error (nothing sent yet), or its stream's
        terminal error event (a stream begun), then the end of the answer."""
        if self._finished or self.gone:
            return
        try:
            if not self._headers_written:
                self.clear()
                self._headers = tornado.httputil.HTTPHeaders({"Content-Type": "application/json"})
                self.set_status(error.status)
                self.finish(self._error_body(error))
                return
            ending = getattr(self.route, "stream_failure", None)
            if ending is not None and self.get_status() < 300:
                self.write(ending(error, self.events))
            self.finish()
        except (tornado.iostream.StreamClosedError, RuntimeError):
            pass  # the client went away meanwhile

    def _error_body(self, error: ErrorAnswer) -> bytes:
        if getattr(self.route, "__module__", "").startswith("aisim.api.kserve"):
            return json.dumps({"error": error.message}).encode()  # Triton's error shape
        return json.dumps(error.body()).encode()


class _Answer(tornado.httputil.HTTPMessageDelegate):
    """The engine core's answer, relayed to `Forward`'s client as it comes."""

    def __init__(self, forward: Forward) -> None:
        self.forward = forward
        self.known_length = False
        self.ended = False

    def headers_received(self, start_line: tornado.httputil.RequestStartLine | tornado.httputil.ResponseStartLine,
                         headers: tornado.httputil.HTTPHeaders) -> None:
        forward = self.forward
        if forward.gone or forward._finished:
            return
        assert isinstance(start_line, tornado.httputil.ResponseStartLine)
        forward.set_status(start_line.code, start_line.reason or None)
        for name, value in headers.get_all():
            if name.lower() not in HOP_HEADERS:
                forward.add_header(name, value)
        self.known_length = "Content-Length" in headers
        if not self.known_length:  # a stream: its headers go out now
            asyncio.ensure_future(_quiet(forward.flush()))

    def data_received(self, chunk: bytes) -> Any:
        forward = self.forward
        if forward.gone or forward._finished:
            return None
        forward.events += chunk.count(b"\n\n")
        forward.write(chunk)
        if self.known_length:  # an answer of known length goes out whole, with its Content-Length
            return None
        return _quiet(forward.flush())  # a stream: each piece as it comes (and no faster than the client reads)

    def finish(self) -> None:
        self.ended = True
        self.forward.answered = True

    def on_connection_close(self) -> None:
        return None  # `Forward._lost` answers


async def _quiet(flushed: Any) -> None:
    """Wait for a write to the client; a client that went away meanwhile is `on_connection_close`'s (no log)."""
    try:
        await flushed
    except (tornado.iostream.StreamClosedError, OSError):
        pass
