"""A closed-loop gRPC load: `connections` concurrent ModelInfer calls, each sent again as soon as it is answered.

    python bench/grpc_load.py HOST:PORT REQUEST.bin SECONDS CONNECTIONS

REQUEST.bin is a serialized `inference.ModelInferRequest`; it goes out as bytes through a bare grpc.aio
channel (no client library, no protobuf work per call), so the client costs as little as Python allows.
Prints one JSON line: {"requests": N, "seconds": S, "errors": E}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import grpc

METHOD = "/inference.GRPCInferenceService/ModelInfer"


async def main(target: str, request: bytes, seconds: float, connections: int) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(METHOD)  # no serializers: bytes in, bytes out
        await call(request)  # warm up the connection
        done, errors = 0, 0
        end = time.monotonic() + seconds

        async def loop() -> None:
            nonlocal done, errors
            while time.monotonic() < end:
                try:
                    await call(request)
                    done += 1
                except grpc.aio.AioRpcError:
                    errors += 1

        started = time.monotonic()
        await asyncio.gather(*(loop() for _ in range(connections)))
        print(json.dumps({"requests": done, "seconds": time.monotonic() - started, "errors": errors}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]).read_bytes(), float(sys.argv[3]), int(sys.argv[4])))
