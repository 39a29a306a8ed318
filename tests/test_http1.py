"""`aisim.api.http.http1` (httptools on asyncio transports) against Tornado's own `HTTPServer`: one Tornado application
behind both, the same bytes sent to each over a real socket, the same bytes back (the `Date` header masked).

Each case is sent whole and followed by a request with `Connection: close`, so that a connection kept alive
answers it and closes (which checks keep-alive and pipelining too), and one the server closes ignores it."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import Iterator

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web

from aisim.api.http.connections import Listener, Policy, Registry, openai_error
from aisim.api.http.loop import new_event_loop
from aisim.scenario.server import Server

CLOSING = b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


class Hello(tornado.web.RequestHandler):
    def get(self) -> None:
        self.write("hello")

    def head(self) -> None:
        self.set_header("Content-Length", "5")


class Echo(tornado.web.RequestHandler):
    def post(self) -> None:
        self.write(f"{len(self.request.body)} bytes: {self.request.body[:24]!r}")


class Stream(tornado.web.RequestHandler):
    async def get(self) -> None:
        for part in range(3):
            self.write(f"part {part}\n")
            await self.flush()


class Late(tornado.web.RequestHandler):
    async def get(self) -> None:
        await asyncio.sleep(0.05)
        self.write("late")


class NoContent(tornado.web.RequestHandler):
    def get(self) -> None:
        self.set_status(204)


def application() -> tornado.web.Application:
    return tornado.web.Application([("/hello", Hello), ("/echo", Echo), ("/stream", Stream), ("/late", Late),
                                    ("/nothing", NoContent)])


@pytest.fixture(scope="module")
def ports() -> Iterator[tuple[int, int]]:
    """(Tornado's HTTPServer's port, aisim's Listener's port), one application, on a loop of its own."""
    loop = new_event_loop()
    bound: list[int] = []
    ready = threading.Event()

    async def start() -> None:
        app = application()
        tornado_sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        tornado.httpserver.HTTPServer(app).add_sockets(tornado_sockets)
        server = Server()
        listener = Listener(app, server, Policy.of(server, "127.0.0.1", openai_error, lambda: False), Registry(1000))
        aisim_sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        listener.add_sockets(aisim_sockets)
        bound.extend([tornado_sockets[0].getsockname()[1], aisim_sockets[0].getsockname()[1]])
        ready.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield bound[0], bound[1]
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def exchange(port: int, data: bytes) -> bytes:
    """What the server answers `data` (then `CLOSING`) until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data + CLOSING)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return re.sub(rb"Date: [^\r]*\r\n", b"", answer)


CASES = {
    "keep-alive": b"GET /hello HTTP/1.1\r\n\r\n",
    "pipelined, the first answered late": b"GET /late HTTP/1.1\r\n\r\nGET /hello HTTP/1.1\r\n\r\n",
    "HTTP/1.0 closes": b"GET /hello HTTP/1.0\r\n\r\n",
    "HTTP/1.0 keep-alive": b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    "HTTP/1.0 POST without a length": b"POST /echo HTTP/1.0\r\n\r\n",
    "HEAD": b"HEAD /hello HTTP/1.1\r\n\r\n",
    "Content-Length body": b"POST /echo HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world",
    "chunked body": b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "100-continue": b"POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
    "streamed answer": b"GET /stream HTTP/1.1\r\n\r\n",
    "streamed answer to HTTP/1.0": b"GET /stream HTTP/1.0\r\n\r\n",
    "Connection: close": b"GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n",
    "204": b"GET /nothing HTTP/1.1\r\n\r\n",
    "404": b"GET /nowhere?x=1 HTTP/1.1\r\n\r\n",
    "405": b"DELETE /hello HTTP/1.1\r\n\r\n",
    "no request line": b"GARBAGE\r\n\r\n",
    "HTTP/2.0 request line": b"GET /hello HTTP/2.0\r\n\r\n",
    "header without a colon": b"GET /hello HTTP/1.1\r\nNoColon\r\n\r\n",
    "unequal lengths": b"POST /echo HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "bad chunk size": b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
}
"""Requests as sent, each with `Host` added after its request line (`with_host`), but for the cases below."""
WITHOUT_HOST = {"HTTP/1.1 without Host": b"GET /hello HTTP/1.1\r\n\r\n", "HTTP/1.0 without Host": b"GET /hello HTTP/1.0\r\n\r\n"}


def with_host(data: bytes) -> bytes:
    """Every request of `data` with a `Host` header (HTTP/1.1 needs one: Tornado answers 400 without)."""
    return re.sub(rb"(HTTP/\d\.\d\r\n)", rb"\1Host: 127.0.0.1\r\n", data)


@pytest.mark.parametrize("case", [*CASES, *WITHOUT_HOST])
def test_the_same_bytes_as_tornados_own_server(ports: tuple[int, int], case: str) -> None:
    sent = with_host(CASES[case]) if case in CASES else WITHOUT_HOST[case]
    tornado_port, aisim_port = ports
    expected = exchange(tornado_port, sent)
    assert expected  # Tornado answers every case with something
    assert exchange(aisim_port, sent) == expected
