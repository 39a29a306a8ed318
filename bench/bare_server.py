"""The baseline of the server benchmarks: a bare Tornado handler that returns a fixed body at one POST path.

    python bench/bare_server.py PORT BODY_FILE PATH
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import tornado.web


def make_app(body: bytes, path: str) -> tornado.web.Application:
    class Handler(tornado.web.RequestHandler):
        def post(self) -> None:
            self.set_header("Content-Type", "application/json")
            self.finish(body)

    return tornado.web.Application([(path, Handler)])


async def main(port: int, body: bytes, path: str) -> None:
    make_app(body, path).listen(port, "127.0.0.1")
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), Path(sys.argv[2]).read_bytes(), sys.argv[3]))
