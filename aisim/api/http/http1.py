"""HTTP/1.1 connections on asyncio transports, parsed by httptools, for Tornado applications.

Tornado's `HTTPServer` reads each request through `IOStream` futures and parses it in Python
(`HTTP1Connection`, `HTTPHeaders.parse`). A py-spy profile of an API server under wrk found Tornado's
connection layer at about half of a chat request's CPU. Here a client connection is an `asyncio.Protocol`
(uvloop's transports are in C), and its bytes go to httptools, which wraps llhttp, Node's parser, also in C.
uvicorn, which vLLM's API server runs on, uses the same pair.

The application stays Tornado's: routing, `RequestHandler`s and output transforms. A request reaches it
through Tornado's own interfaces:
- `HTTPServerConnectionDelegate.start_request`;
- `HTTPMessageDelegate` for what is read;
- `HTTPConnection` (`Exchange`) for what is written.

Tornado's framing rules are kept: keep-alive as `HTTP1Connection._can_keep_alive` decides it, chunked
answers to HTTP/1.1 without a `Content-Length`, no body for HEAD, 204 and 304, `100 (Continue)`, a bare
`400 Bad Request` and a close for a request that cannot be parsed, one request answered at a time (pipelined
requests wait their turn), and the connection closed after an answer given before its request was fully read.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httptools
from tornado import httputil
from tornado.iostream import StreamClosedError

app_log = logging.getLogger("tornado.application")
gen_log = logging.getLogger("tornado.general")
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 (Continue)\r\n\r\n"
NO_BODY = (204, 304)
TIMER_SLACK_S = 0.001
"""Added to every timeout: uvloop's timers count whole milliseconds from the loop's time, which libuv truncates
to the millisecond, so a bare timeout could fire up to a millisecond before it is due."""


def _done() -> asyncio.Future[None]:
    future = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def _closed() -> asyncio.Future[None]:
    """A write's future on a closed connection: failed as Tornado's are, its exception already retrieved."""
    future = asyncio.get_running_loop().create_future()
    future.set_exception(StreamClosedError())
    future.exception()
    return future


class Peer:
    """What Tornado's `HTTPServerRequest` reads of a connection's `context`: the client's address and scheme."""

    __slots__ = ("address", "protocol", "remote_ip")

    def __init__(self, address: Any) -> None:
        self.address = address
        self.remote_ip = address[0] if isinstance(address, tuple) and address else "0.0.0.0"
        self.protocol = "http"

    def __str__(self) -> str:
        return self.remote_ip


class Exchange(httputil.HTTPConnection):
    """One request on a `Connection` and the writing of its answer (what one `HTTP1Connection` is to Tornado)."""

    def __init__(self, owner: Connection, start: httputil.RequestStartLine, headers: httputil.HTTPHeaders) -> None:
        self.owner = owner
        self.context = owner.peer
        self.start = start
        self.headers = headers
        self.disconnect_on_finish = not _can_keep_alive(start, headers)
        self.read_finished = False
        self.write_finished = False
        self.chunking = False
        self.remaining: int | None = None
        """Bytes of the answer still owed to its `Content-Length` (None: no length)."""
        self.close_callback: Callable[[], None] | None = None

    # -- Tornado's HTTPConnection ----------------------------------------------------------------

    def write_headers(self, start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
                      headers: httputil.HTTPHeaders, chunk: bytes | None = None) -> asyncio.Future[None]:
        assert isinstance(start_line, httputil.ResponseStartLine)
        code, request = start_line.code, self.start
        head = request.method == "HEAD"
        self.chunking = (request.version == "HTTP/1.1" and not head and code not in NO_BODY
                         and not 100 <= code < 200 and "Content-Length" not in headers)
        if request.version == "HTTP/1.1" and self.disconnect_on_finish:
            headers["Connection"] = "close"
        if request.version == "HTTP/1.0" and self.headers.get("Connection", "").lower() == "keep-alive":
            headers["Connection"] = "Keep-Alive"
        if self.chunking:
            headers["Transfer-Encoding"] = "chunked"
        if head or code == 304:
            self.remaining = 0
        elif "Content-Length" in headers:
            self.remaining = int(headers["Content-Length"])
        lines = [f"HTTP/1.1 {code} {start_line.reason}"]
        lines.extend(f"{name}: {value}" for name, value in headers.get_all())
        for line in lines:
            if "\r" in line or "\n" in line:
                raise ValueError(f"Illegal characters (CR or LF) in header: {line!r}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin1")
        if chunk:
            data += self._frame(chunk)
        return self.owner.write(data)

    def write(self, chunk: bytes) -> asyncio.Future[None]:
        return self.owner.write(self._frame(chunk))

    def finish(self) -> None:
        if self.remaining and not self.owner.closed:
            self.owner.drop()
            raise httputil.HTTPOutputError(f"Tried to write {self.remaining} bytes less than Content-Length")
        if self.chunking:
            self.owner.write(b"0\r\n\r\n")
        self.write_finished = True
        if not self.read_finished:  # answered before the body was in: only a close ends reading it
            self.disconnect_on_finish = True
        self.close_callback = None
        self.owner.answered(self)

    def set_close_callback(self, callback: Callable[[], None] | None) -> None:
        self.close_callback = callback

    # -- aisim's own ---------------------------------------------------------------------------------

    def send(self, chunk: bytes) -> None:
        """Write one piece of a streamed answer now (its framing included), without a future."""
        if not self.owner.closed:
            self.owner.transport.write(self._frame(chunk))  # type: ignore[union-attr]

    def close(self) -> None:
        """Drop the connection now (as a crashed or hung server would)."""
        self.owner.drop()

    def _frame(self, chunk: bytes) -> bytes:
        if self.remaining is not None:
            self.remaining -= len(chunk)
            if self.remaining < 0:
                self.owner.drop()  # stop further framing errors
                raise httputil.HTTPOutputError("Tried to write more data than Content-Length")
        if self.chunking and chunk:
            return b"%x\r\n%b\r\n" % (len(chunk), chunk)
        return chunk


def _can_keep_alive(start: httputil.RequestStartLine, headers: httputil.HTTPHeaders) -> bool:
    """Tornado's rule (`HTTP1Connection._can_keep_alive`; llhttp refuses a `Transfer-Encoding` other than chunked)."""
    connection = headers.get("Connection")
    connection = connection.lower() if connection is not None else None
    if start.version == "HTTP/1.1":
        return connection != "close"
    if "Content-Length" in headers or "Transfer-Encoding" in headers or start.method in ("HEAD", "GET"):
        return connection == "keep-alive"
    return False


@dataclass(frozen=True)
class Timeouts:
    """A connection's timeouts in seconds (`Connection` applies them)."""

    header: float
    """For the request's headers, from the start of the wait for them (the idle timeout after a first request)."""
    body: float


class Waiting(Protocol):
    """Where a connection says whether it waits for a request (`connections.Registry`)."""

    def wait(self, conn: Connection) -> None: ...

    def busy(self, conn: Connection) -> None: ...


class Host(Protocol):
    """What a connection needs of the listener that accepted it (`connections.Listener`)."""

    first: Timeouts
    later: Timeouts
    max_header_bytes: int

    @property
    def registry(self) -> Waiting: ...

    def opened(self, conn: Connection) -> None: ...

    def closed(self, conn: Connection) -> None: ...

    def start_request(self, conn: Connection, exchange: Exchange) -> httputil.HTTPMessageDelegate: ...

    def draining(self) -> bool: ...


class Connection(asyncio.Protocol):
    """One client connection: parses requests as their bytes come and hands each, in turn, to its listener's
    application. It keeps the timeouts of `Listener`: the header timeout for the first request, the idle timeout
    between requests, and the body timeout from a request's headers until its body is in. It also knows whether
    it is waiting for a request, and since when (`waiting_since`, for the connection cap and draining)."""

    def __init__(self, listener: Host, address: Any) -> None:
        self.listener = listener
        self.peer = Peer(address)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.parser = httptools.HttpRequestParser(self)
        self.waiting_since: float | None = None
        """When it began to wait for a request's headers; None while a request is being read or answered."""
        self.deadline: asyncio.TimerHandle | None = None
        self.exchange: Exchange | None = None
        """The request being read or answered (None between requests)."""
        self.delegate: httputil.HTTPMessageDelegate | None = None
        self.queued: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        """Events of requests that came before the one being answered was done (pipelined), in order."""
        self.paused = False
        """The transport's buffer is over its high-water mark (the client reads slowly)."""
        self.drained: list[asyncio.Future[None]] = []
        self.next_due = False
        """An answer finished while the client read slowly: the next request waits until it has caught up."""
        self._url = b""
        self._fields: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._reading_headers = False
        self.broken = False

    # -- asyncio's Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.listener.opened(self)
        self._wait(self.listener.first.header)

    def data_received(self, data: bytes) -> None:
        if self.closed or self.broken:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.broken = True  # the rest is another protocol, which is not spoken here
            self._event(self._end_after_answer, ())
        except httptools.HttpParserError as error:
            if isinstance(error.__context__, Exception) and not isinstance(error.__context__, httptools.HttpParserError):
                app_log.error("Uncaught exception in a request's delegate", exc_info=error.__context__)
                self.drop()
                return
            self.broken = True  # llhttp stays in its error state: nothing more is read
            self._event(self._malformed, ())
            return
        if self._reading_headers:  # the headers are not all in yet: their bytes so far, against the hard limit
            self._header_bytes += len(data)
            if self._header_bytes > self.listener.max_header_bytes:
                self.drop()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._disarm()
        exchange, delegate = self.exchange, self.delegate
        self.exchange = self.delegate = None
        self.queued.clear()
        self._settle_drained(StreamClosedError())
        if exchange is not None and not exchange.write_finished:
            if not exchange.read_finished and delegate is not None:
                self._call(delegate.on_connection_close)
            elif exchange.close_callback is not None:
                callback, exchange.close_callback = exchange.close_callback, None
                self._call(callback)
        self.listener.closed(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._settle_drained(None)
        if self.next_due:
            self.next_due = False
            self._next()

    def _settle_drained(self, error: Exception | None) -> None:
        """End the waits of the writes made while the client read slowly: done, or failed with `error`."""
        for future in self.drained:
            if future.done():
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
                future.exception()  # retrieved: a write nobody awaits logs nothing
        self.drained.clear()

    # -- httptools' callbacks --------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._fields = []
        self._header_bytes = 0
        self._reading_headers = True

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        self._reading_headers = False
        parser = self.parser
        start = (parser.get_method().decode("latin1"), self._url.decode("latin1"), "HTTP/" + parser.get_http_version())
        self._event(self._headers, (start, self._fields))

    def on_body(self, body: bytes) -> None:
        self._event(self._body, (body,))

    def on_message_complete(self) -> None:
        self._event(self._complete, ())

    # -- a request's events, in turn ---------------------------------------------------------------------

    def _event(self, handle: Callable[..., None], args: tuple[Any, ...]) -> None:
        """Handle an event now, or queue it while an earlier request is answered (or earlier events wait)."""
        if self.closed:
            return
        exchange = self.exchange
        if self.queued or (exchange is not None and exchange.read_finished):
            self.queued.append((handle, args))
            if self.transport is not None and len(self.queued) == 1:
                self.transport.pause_reading()
            return
        handle(*args)

    def _headers(self, start: tuple[str, str, str], fields: list[tuple[bytes, bytes]]) -> None:
        listener = self.listener
        size = sum(len(name) + len(value) + 4 for name, value in fields) + len(start[1]) + 16
        if size > listener.max_header_bytes:
            self.drop()  # as Tornado does past its hard limit: no answer
            return
        if start[2] not in ("HTTP/1.0", "HTTP/1.1"):
            self._malformed()
            return
        headers = httputil.HTTPHeaders()
        for name, value in fields:
            headers.add(name.decode("latin1"), value.decode("latin1"))
        start_line = httputil.RequestStartLine(*start)
        exchange = self.exchange = Exchange(self, start_line, headers)
        listener.registry.busy(self)
        self._arm(listener.first.body)
        delegate = self.delegate = listener.start_request(self, exchange)
        if not self._call(delegate.headers_received, start_line, headers):
            return
        if headers.get("Expect") == "100-continue" and not exchange.write_finished and not self.closed:
            self.transport.write(CONTINUE)  # type: ignore[union-attr]

    def _body(self, body: bytes) -> None:
        exchange, delegate = self.exchange, self.delegate
        if exchange is not None and delegate is not None and not exchange.write_finished:
            self._call(delegate.data_received, body)

    def _complete(self) -> None:
        exchange, delegate = self.exchange, self.delegate
        if exchange is None or delegate is None:
            return
        self._disarm()  # the body is in
        exchange.read_finished = True
        if not exchange.write_finished:  # (an answer written before the body was in closes the connection)
            self._call(delegate.finish)

    def _malformed(self) -> None:
        if not self.closed:
            self.transport.write(BAD_REQUEST)  # type: ignore[union-attr]
            self.close()

    def _end_after_answer(self) -> None:
        if self.exchange is None:
            self.drop()
        else:
            self.exchange.disconnect_on_finish = True

    def _call(self, method: Callable[..., Any], *args: Any) -> bool:
        """Call a delegate's method as Tornado does: an `HTTPInputError` (a request it cannot take, such as an
        HTTP/1.1 one without `Host`) is a bare 400 and a close, any other exception is logged and closes the
        connection. False if it raised."""
        try:
            method(*args)
        except httputil.HTTPInputError as error:
            gen_log.info("Malformed HTTP message from %s: %s", self.peer, error)
            self._malformed()
            return False
        except Exception:  # noqa: BLE001 - any delegate's mistake ends its connection, never the server
            app_log.error("Uncaught exception", exc_info=True)
            self.drop()
            return False
        return True

    # -- the answer --------------------------------------------------------------------------------------

    def write(self, data: bytes) -> asyncio.Future[None]:
        """Write to the client; the future is done once the transport's buffer is under its high-water mark."""
        if self.closed:
            return _closed()
        self.transport.write(data)  # type: ignore[union-attr]
        if not self.paused:
            return _done()
        future = asyncio.get_running_loop().create_future()
        self.drained.append(future)
        return future

    def answered(self, exchange: Exchange) -> None:
        """`exchange`'s answer is all written: close (once it is out), or go on to the next request once this one
        is read."""
        if exchange.disconnect_on_finish:
            self.close()
        elif exchange.read_finished:
            self._after(exchange)

    def _after(self, exchange: Exchange) -> None:
        if exchange is not self.exchange:
            return
        self.exchange = self.delegate = None
        if self.listener.draining():
            self.close()
            return
        if self.paused:
            self.next_due = True
        else:
            self._next()

    def _next(self) -> None:
        """Wait for the next request, handling what of it (and of later ones) has already come."""
        self._wait(self.listener.later.header)
        queued = self.queued
        while queued and not self.closed:
            exchange = self.exchange
            if exchange is not None and exchange.read_finished:
                return  # that one is being answered: the rest waits again
            handle, args = queued.popleft()
            handle(*args)
        if not self.closed and self.transport is not None:
            self.transport.resume_reading()

    # -- timeouts and closing ------------------------------------------------------------------------------

    def _wait(self, seconds: float) -> None:
        self.listener.registry.wait(self)
        self._arm(seconds)

    def _arm(self, seconds: float) -> None:
        """Close the connection in `seconds` unless `_disarm` comes first."""
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = asyncio.get_running_loop().call_later(seconds + TIMER_SLACK_S, self.drop)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def drop(self) -> None:
        """Close now, dropping what is not written yet (Tornado's `IOStream.close`)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()
        self.closed = True

    def close(self) -> None:
        """Close once what is written has gone out."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.closed = True


def nodelay(sock: socket.socket) -> None:
    """Each write leaves at once: answers are written whole, stream tokens one by one (no Nagle wait)."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
