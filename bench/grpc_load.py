"""A closed-loop gRPC load: `connections` concurrent ModelInfer calls, each sent again as soon as it is answered.

    python bench/grpc_load.py HOST:PORT REQUEST.bin SECONDS CONNECTIONS [CHANNELS]

REQUEST.bin is a serialized `inference.ModelInferRequest`; it goes out as bytes through bare grpc.aio
channels (no client library, no protobuf work per call), so the client costs as little as Python allows.
CHANNELS (default 1) TCP connections carry the calls between them: a server whose processes share a port
(`aisim serve --api-server-count N`) gets each connection in one process, so it needs several.
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


async def main(target: str, request: bytes, seconds: float, connections: int, channels: int = 1) -> None:
    # a subchannel pool of each channel's own: otherwise grpc shares one TCP connection between them
    opened = [grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(channels)]
    calls = [channel.unary_unary(METHOD) for channel in opened]  # no serializers: bytes in, bytes out
    for call in calls:
        await call(request)  # warm up the connections
    done, errors = 0, 0
    end = time.monotonic() + seconds

    async def loop(call: grpc.aio.UnaryUnaryMultiCallable) -> None:
        nonlocal done, errors
        while time.monotonic() < end:
            try:
                await call(request)
                done += 1
            except grpc.aio.AioRpcError:
                errors += 1

    started = time.monotonic()
    await asyncio.gather(*(loop(calls[index % channels]) for index in range(connections)))
    print(json.dumps({"requests": done, "seconds": time.monotonic() - started, "errors": errors}), flush=True)
    for channel in opened:
        await channel.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]).read_bytes(), float(sys.argv[3]), int(sys.argv[4]),
                     int(sys.argv[5]) if len(sys.argv) > 5 else 1))
