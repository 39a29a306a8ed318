"""The baseline of bench/serve_throughput.py: a bare Tornado handler that returns a fixed chat completion body."""

from __future__ import annotations

import asyncio
import sys

import tornado.web


def make_app(body: bytes) -> tornado.web.Application:
    class Handler(tornado.web.RequestHandler):
        def post(self) -> None:
            self.set_header("Content-Type", "application/json")
            self.finish(body)

    return tornado.web.Application([(r"/v1/chat/completions", Handler)])


async def main(port: int, body_file: str) -> None:
    with open(body_file, "rb") as handle:
        body = handle.read()
    make_app(body).listen(port, "127.0.0.1")
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
