"""Connection hygiene: timeouts, a cap on open connections, descriptor exhaustion, and the checks every request
passes before any handler (or any byte of its body) is reached.

Connections are `http1.Connection`s (httptools on asyncio transports) serving Tornado applications;
`Listener` accepts them and adds, per connection:

- a header timeout for the first request, an idle timeout between keep-alive requests, a body timeout;
- at most `max_open` connections: at the limit a new connection closes the one that has waited longest for a
  request, or, when all are busy, gets a 503 and is closed;
- `accept()` failing for want of descriptors pauses accepting with a backoff (10 ms doubling to 1 s) and logs
  at most one line per `LOG_INTERVAL_S`; the connection that could not be accepted is answered 503 through a
  descriptor kept in reserve for that;
- `Gate`, the first delegate of each request: 503 while draining, 431 for headers over the limit, 400 for a
  `Host` not allowed, 403 for a cross-origin state-changing request, 413 for a declared `Content-Length` over
  the limit (before the body is read) or a chunked body once it passes it, and CORS preflights when configured.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import resource
import socket
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tornado.web
from tornado import httputil

from ...scenario.server import Server
from .http1 import Connection, Exchange, Timeouts, nodelay

log = logging.getLogger("aisim.serve")

DESCRIPTORS_KEPT = 64
"""Descriptors left for everything but client connections (files, the request log, listeners) when the
connection cap comes from the process's limit."""
LOG_INTERVAL_S = 10.0
"""At most one log line per this many seconds for each kind of connection trouble."""
BACKOFF_S = (0.01, 1.0)
"""First and longest pause of the accept loop once the process runs out of descriptors."""
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
STATE_CHANGING = ("POST", "PUT", "PATCH", "DELETE")
LINGER_S = 2.0
"""How long the body of a refused request is read (and dropped) so that its client reads the refusal."""


def json_media_type(content_type: str | None, extra: tuple[str, ...] = ()) -> bool:
    """Whether a `Content-Type` names JSON (`application/json; charset=utf-8`, `application/merge-patch+json`) or
    one of `extra`."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media in extra or media.endswith("+json")


def default_max_open() -> int:
    """The process's soft descriptor limit less `DESCRIPTORS_KEPT` (at least 16)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, soft - DESCRIPTORS_KEPT)


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


class Throttled:
    """A log line at most once per interval, counting what it did not say."""

    def __init__(self, interval: float = LOG_INTERVAL_S) -> None:
        self.interval = interval
        self._last = -float("inf")
        self.quiet = 0

    def warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            self.quiet += 1
            return
        extra = f" ({self.quiet} more since the last message)" if self.quiet else ""
        self._last, self.quiet = now, 0
        log.warning("%s%s", message, extra)


ErrorBody = Callable[[int, str], bytes]


def openai_error(status: int, message: str) -> bytes:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    code = "request_too_large" if status == 413 else None
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


def kserve_error(status: int, message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def raw_response(status: int, body: bytes, extra: dict[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, for answers given outside any request."""
    reason = httputil.responses.get(status, "Error")
    head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json", f"Content-Length: {len(body)}",
            "Connection: close", "X-Content-Type-Options: nosniff", *(f"{k}: {v}" for k, v in (extra or {}).items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@dataclass
class Policy:
    """What `Gate` checks, from the scenario's `server:` section and the address bound."""

    max_body: int
    max_header: int
    hosts: frozenset[str] | None
    """Host names allowed (None: any)."""
    cors: tuple[str, ...]
    error_body: ErrorBody
    draining: Callable[[], bool]

    @classmethod
    def of(cls, server: Server, host: str, error_body: ErrorBody, draining: Callable[[], bool]) -> Policy:
        hosts: frozenset[str] | None
        if server.allowed_hosts is not None:
            hosts = None if "*" in server.allowed_hosts else frozenset(h.lower() for h in server.allowed_hosts)
        else:
            hosts = frozenset(LOOPBACK_HOSTS) if is_loopback(host) else None
        return cls(server.max_body_size, server.connections.max_header_size, hosts, tuple(server.cors_origins),
                   error_body, draining)

    def origin_allowed(self, origin: str, host: str) -> bool:
        """An `Origin` is allowed when configured for CORS or when it is the server itself (same origin)."""
        if "*" in self.cors or origin in self.cors:
            return True
        return urllib.parse.urlsplit(origin).netloc.lower() == host.lower()

    def screen(self, start: httputil.RequestStartLine, headers: httputil.HTTPHeaders) -> tuple[int, str] | None:
        """The refusal a request meets before its handler, or None."""
        if self.draining():
            return 503, "The server is shutting down."
        size = len(start.method) + len(start.path) + len(start.version) + 4 + sum(
            len(k) + len(v) + 4 for k, v in headers.get_all())
        if size > self.max_header:
            return 431, f"Request header fields too large: {size} bytes, the limit is {self.max_header}."
        host = headers.get("Host", "")
        if self.hosts is not None and host and _hostname(host) not in self.hosts:  # browsers always send a Host
            return 400, "Invalid host header."
        origin = headers.get("Origin")
        if origin is not None and start.method in STATE_CHANGING and not self.origin_allowed(origin, host):
            return 403, "Cross-origin request refused."
        length = headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > self.max_body:
            return 413, f"Request too large: the body is {int(length)} bytes, the limit is {self.max_body}."
        return None

    def preflight(self, start: httputil.RequestStartLine, headers: httputil.HTTPHeaders) -> dict[str, str] | None:
        """The answer headers of a CORS preflight from a configured origin, or None."""
        origin = headers.get("Origin")
        if start.method != "OPTIONS" or origin is None or not self.cors or not self.origin_allowed(origin, ""):
            return None
        return {"Access-Control-Allow-Origin": origin, "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
                "Access-Control-Allow-Headers": headers.get("Access-Control-Request-Headers", "authorization, content-type"),
                "Access-Control-Max-Age": "600", "Vary": "Origin"}


def _hostname(host: str) -> str:
    """The name of a `Host` header, without its port (`[::1]:8080` is `::1`)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Gate(httputil.HTTPMessageDelegate):
    """The first delegate of every request: refuses what `Policy.screen` refuses, counts the body as it comes,
    and hands everything else to the application's delegate."""

    def __init__(self, policy: Policy, inner: httputil.HTTPMessageDelegate, exchange: Exchange) -> None:
        self.policy, self.inner, self.exchange = policy, inner, exchange
        self.refused = False
        self.ended = False
        self.received = 0

    def headers_received(self, start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
                         headers: httputil.HTTPHeaders) -> Any:
        assert isinstance(start_line, httputil.RequestStartLine)
        allowed = self.policy.preflight(start_line, headers)
        if allowed is not None:
            self._answer(204, b"", allowed)
            return None
        refusal = self.policy.screen(start_line, headers)
        if refusal is not None:
            self._answer(refusal[0], self.policy.error_body(*refusal))
            return None
        return self.inner.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Any:
        if self.refused:
            return None  # read and dropped until the answer is out and the connection closes
        self.received += len(chunk)
        if self.received > self.policy.max_body:
            self.inner.on_connection_close()
            message = f"Request too large: the body is over {self.policy.max_body} bytes, the limit."
            self._answer(413, self.policy.error_body(413, message))
            return None
        return self.inner.data_received(chunk)

    def finish(self) -> None:
        if not self.refused:
            self.inner.finish()
        else:
            self._end()  # the refused request's body is all in: the answer is complete

    def on_connection_close(self) -> None:
        if not self.refused:
            self.inner.on_connection_close()

    def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        """Answer now, before the body is read. A client still sending its body would see its connection reset
        if it closed at once (and lose this answer), so the rest of the body is read and dropped for up to
        `LINGER_S` before the connection closes (at once for a client that waits for `100 Continue`)."""
        self.refused = True
        fields = httputil.HTTPHeaders({"Content-Length": str(len(body)), "X-Content-Type-Options": "nosniff"})
        if body:
            fields["Content-Type"] = "application/json"
        for name, value in (headers or {}).items():
            fields[name] = value
        exchange = self.exchange
        if status >= 400:
            exchange.disconnect_on_finish = True
        exchange.write_headers(httputil.ResponseStartLine("HTTP/1.1", status, httputil.responses[status]), fields, body)
        if status < 400 or exchange.headers.get("Expect") == "100-continue":
            self._end()
        else:
            asyncio.get_running_loop().call_later(LINGER_S, self._end)

    def _end(self) -> None:
        if not self.ended:
            self.ended = True
            self.exchange.finish()


@dataclass
class Registry:
    """The open connections of every listener of one server (the cap counts them all), and those of them
    waiting for a request in the order they began to wait, so that the longest-waiting one is found at once."""

    max_open: int
    open: set[Connection] = field(default_factory=set)
    waiting: OrderedDict[Connection, None] = field(default_factory=OrderedDict)
    full: Throttled = field(default_factory=Throttled)

    def wait(self, conn: Connection) -> None:
        conn.waiting_since = time.monotonic()
        self.waiting[conn] = None
        self.waiting.move_to_end(conn)

    def busy(self, conn: Connection) -> None:
        conn.waiting_since = None
        self.waiting.pop(conn, None)

    def closed(self, conn: Connection) -> None:
        self.busy(conn)
        self.open.discard(conn)

    def make_room(self) -> bool:
        """At the cap: close the connection that has waited longest for a request; False if none waits."""
        if len(self.open) < self.max_open:
            return True
        if not self.waiting:
            self.full.warn(f"aisim serve: {len(self.open)} connections open, all busy: answering new ones 503")
            return False
        oldest, _ = self.waiting.popitem(last=False)
        self.closed(oldest)
        oldest.drop()
        return True


class Listener:
    """One listener of the server: accepts connections (`http1.Connection`s) for a Tornado application, with
    the hygiene of this module: timeouts, the connection cap, `Gate`, and an accept loop that survives EMFILE.

    Tornado's `HTTPServer` accepts with `add_accept_handler`, which logs a traceback per loop turn while
    descriptors run out; here accepting pauses with a backoff and answers the waiting client 503 through a
    descriptor kept in reserve."""

    def __init__(self, app: httputil.HTTPServerConnectionDelegate, server: Server, policy: Policy,
                 registry: Registry) -> None:
        limits = server.connections
        self.app = app
        self.max_header_bytes = max(2 * limits.max_header_size, limits.max_header_size + 65536)
        """Past this many bytes of headers a connection closes without an answer (Tornado's hard limit); `Gate`
        answers 431 above `maxHeaderSize`."""
        self.first = Timeouts(limits.header_timeout / 1e9, limits.body_timeout / 1e9)
        self.later = Timeouts(limits.idle_timeout / 1e9, limits.body_timeout / 1e9)
        self.policy = policy
        self.registry = registry
        self.connections: set[Connection] = set()
        self.exhausted = Throttled()
        self._spare: int | None = _reserve()
        self._sockets: list[socket.socket] = []
        self._removers: list[Callable[[], None]] = []

    def draining(self) -> bool:
        return self.policy.draining()

    # -- connections -------------------------------------------------------------------------

    def start_request(self, conn: Connection, exchange: Exchange) -> httputil.HTTPMessageDelegate:
        return Gate(self.policy, self.app.start_request(conn, exchange), exchange)

    def opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        self.registry.open.add(conn)

    def closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.registry.closed(conn)

    def busy(self) -> int:
        """Connections reading or answering a request."""
        return sum(1 for c in self.connections if c.waiting_since is None)

    def close_idle(self) -> None:
        """Close the connections waiting for a request (draining: they will get none)."""
        for conn in list(self.connections):
            if conn.waiting_since is not None:
                conn.drop()

    def stop(self) -> None:
        """Stop accepting: the listening sockets close (connections stay open)."""
        for remove in self._removers:
            remove()
        self._removers.clear()
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()

    async def close_all_connections(self) -> None:
        """Close every connection, as a client that goes away closes its own, and wait for their ends."""
        for conn in list(self.connections):
            conn.drop()
        for _ in range(100):
            if not self.connections:
                return
            await asyncio.sleep(0)

    # -- accepting ---------------------------------------------------------------------------

    def add_sockets(self, sockets: Any) -> None:
        for sock in sockets:
            sock.setblocking(False)
            self._sockets.append(sock)
            self._removers.append(self._accept_handler(sock))

    def _connect(self, sock: socket.socket, address: Any) -> None:
        if not self.registry.make_room():
            refusal = raw_response(503, self.policy.error_body(503, "Too many open connections."), {"Retry-After": "1"})
            _adopt(sock, lambda: Refusal(refusal))
            return
        nodelay(sock)
        _adopt(sock, lambda: Connection(self, address))

    def _accept_handler(self, sock: socket.socket) -> Callable[[], None]:
        """An accept loop on `sock`, pausing with a backoff when descriptors run out; returns its remover."""
        loop = asyncio.get_running_loop()
        state: dict[str, Any] = {"removed": False, "pause": BACKOFF_S[0], "timer": None}

        def accept() -> None:
            for _ in range(128):
                if state["removed"]:
                    return
                try:
                    connection, address = sock.accept()
                except BlockingIOError:
                    return
                except ConnectionAbortedError:
                    continue
                except OSError as error:
                    if error.errno not in OUT_OF_DESCRIPTORS:
                        raise
                    pause(error)
                    return
                state["pause"] = BACKOFF_S[0]
                connection.setblocking(False)
                self._connect(connection, address)

        def pause(error: OSError) -> None:
            self._answer_one(sock)
            wait = state["pause"]
            self.exhausted.warn(f"aisim serve: cannot accept connections ({os.strerror(error.errno or 0)}): "
                                f"pausing {wait * 1000:.0f} ms; {len(self.registry.open)} connections open")
            state["pause"] = min(wait * 2, BACKOFF_S[1])
            loop.remove_reader(sock.fileno())
            state["timer"] = loop.call_later(wait, resume)

        def resume() -> None:
            state["timer"] = None
            if not state["removed"]:
                loop.add_reader(sock.fileno(), accept)

        def remove() -> None:
            if state["timer"] is not None:
                state["timer"].cancel()
            else:
                loop.remove_reader(sock.fileno())
            state["removed"] = True

        loop.add_reader(sock.fileno(), accept)
        return remove

    def _answer_one(self, sock: socket.socket) -> None:
        """Out of descriptors: free the reserved one, accept the waiting client, tell it 503, close, reserve again."""
        if self._spare is None:
            return
        os.close(self._spare)
        try:
            connection, _ = sock.accept()
        except OSError:
            self._spare = _reserve()
            return
        try:
            connection.setblocking(False)
            connection.send(raw_response(503, self.policy.error_body(503, "The server is out of file descriptors."),
                                         {"Retry-After": "1"}))
        except OSError:
            pass
        finally:
            connection.close()
            self._spare = _reserve()


def _adopt(sock: socket.socket, protocol: Callable[[], asyncio.Protocol]) -> None:
    """Give an accepted socket a transport and its protocol (a client that is gone already is closed quietly)."""
    def adopted(task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            sock.close()

    loop = asyncio.get_running_loop()
    loop.create_task(loop.connect_accepted_socket(protocol, sock)).add_done_callback(adopted)


def _reserve() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None


class Refusal(asyncio.Protocol):
    """A connection over the cap: a whole response, then a close once the client has had a moment to read it
    (reading a little first, so that the close does not reset the connection before the client reads it)."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.response)
        asyncio.get_running_loop().call_later(0.2, transport.close)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.close()


class SecurityHeaders(tornado.web.OutputTransform):
    """`X-Content-Type-Options: nosniff` on every answer; `Access-Control-Allow-Origin` for configured origins."""

    cors: tuple[str, ...] = ()

    def __init__(self, request: httputil.HTTPServerRequest) -> None:
        self.origin = request.headers.get("Origin")

    def transform_first_chunk(self, status_code: int, headers: httputil.HTTPHeaders, chunk: bytes,
                              finishing: bool) -> tuple[int, httputil.HTTPHeaders, bytes]:
        headers["X-Content-Type-Options"] = "nosniff"
        if self.origin is not None and ("*" in self.cors or self.origin in self.cors):
            headers["Access-Control-Allow-Origin"] = self.origin
            headers["Vary"] = "Origin"
        return status_code, headers, chunk


def security_headers(cors: tuple[str, ...]) -> type[SecurityHeaders]:
    return type("ConfiguredSecurityHeaders", (SecurityHeaders,), {"cors": cors})
