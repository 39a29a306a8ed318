"""What an API server and the engine core exchange: msgspec structs, several per message, on a Unix socket.

msgspec (what vLLM's engine core client uses) encodes these array-like tagged structs in about a microsecond;
every message is a list of them, so one engine step reaches an API server as one message carrying every token
and end event of that server's requests (`Batch`), and a loop turn's submissions reach the engine core as one.
The transport is a plain Unix stream socket under asyncio, not ZeroMQ (vLLM's): measured on this machine
(`bench/transport_roundtrip.py`), a round trip of a small message between two processes on one core costs
6 us of CPU on each side and 20-24 us of wall time over a Unix socket, 24-34 us and 60-115 us over a ZeroMQ
DEALER/ROUTER pair (its I/O thread hands every message over once more); what a message costs both processes
was most of the split's overhead per request.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...engine import Arrival


class Hello(msgspec.Struct, tag=True, array_like=True):
    """An API server (re)started as `rank`: the engine core aborts what an earlier one of that rank left."""

    rank: int


class Welcome(msgspec.Struct, tag=True, array_like=True):
    """The engine core's answer to `Hello`: where virtual time 0 is on the (system-wide) monotonic clock."""

    started_wall: float
    speed: float
    digest: Any


class Submit(msgspec.Struct, tag=True, array_like=True):
    """A request for the engine: its arrival as the handler made it (`engine.Arrival`, encoded by its own field list),
    `cid` being the API server's id for it and `live` whether its tokens are streamed."""

    cid: int
    live: bool
    arrival: Arrival
    endpoint: str = ""
    """The handler's endpoint, and below the instant its request began (`time.monotonic`, system-wide): the
    request log's record of a request whose API server dies before it logs it."""
    started: float = 0.0


class Abort(msgspec.Struct, tag=True, array_like=True):
    cid: int


class Pick(msgspec.Struct, tag=True, array_like=True):
    """Which fault a request meets (the fault book's counters are the engine core's)."""

    rid: int
    models: list[str]
    endpoint: str
    api_key: str | None
    override: str | None


class Admit(msgspec.Struct, tag=True, array_like=True):
    """Take a request and its tokens from the rate limiter's buckets."""

    rid: int
    api_key: str | None
    tokens: int
    model: str


class Observed(msgspec.Struct, tag=True, array_like=True):
    """A handler's request ended: feed `/metrics` (`MetricsFeed.finished`) with the engine core's own call."""

    cid: int
    reason: str
    max_tokens: int | None
    n: int | None


class Logged(msgspec.Struct, tag=True, array_like=True):
    """A generating request for the request log (`Recording.request`); `started`: the instant Tornado began to read
    it, on the (system-wide) monotonic clock, so that every timing field is measured on the engine core's."""

    cid: int
    end: str
    endpoint: str
    started: float


class LoggedInfer(msgspec.Struct, tag=True, array_like=True):
    """A KServe inference for the request log (`Recording.infer`); tensors as (name, datatype, shape)."""

    cid: int
    model: str
    version: str
    batch: int
    inputs: list[tuple[str, str, list[int]]]
    outputs: list[tuple[str, str, list[int]]]
    started: float
    error: str
    end: str


class Sync(msgspec.Struct, tag=True, array_like=True):
    """Ask for the engine's current `digest` (after a route the engine core served, which may have changed it);
    with `everyone`, the reply comes once every other API server has taken it too (`Digest`, `Ack`)."""

    rid: int
    everyone: bool = False


class Digest(msgspec.Struct, tag=True, array_like=True):
    """The engine's state to mirror, pushed; `bid` > 0: answer with `Ack(bid)` once taken."""

    bid: int
    digest: Any


class Ack(msgspec.Struct, tag=True, array_like=True):
    bid: int


class End(msgspec.Struct, array_like=True):
    """A request's end: its event, time, error, (not streamed) every token's time, and the KV blocks it last held
    when its arrival asked to keep them (`Call.kept_blocks`)."""

    cid: int
    event: str
    time: int
    error: str
    times: list[int] | None
    kept: list[int] | None = None


class Batch(msgspec.Struct, tag=True, array_like=True):
    """One engine step's events for one API server: tokens as [cid, time, cid, time, ...], then ends."""

    tokens: list[int]
    ends: list[End]


class Reply(msgspec.Struct, tag=True, array_like=True):
    rid: int
    value: Any


class Failed(msgspec.Struct, tag=True, array_like=True):
    """An error for an API server's rpc `rid`: (status, message, type, param, code, headers) of an `ErrorAnswer`."""

    rid: int
    error: tuple[int, str, str, str | None, str | None, dict[str, str]]


ToCore = Hello | Submit | Abort | Pick | Admit | Observed | Logged | LoggedInfer | Sync | Ack
ToFront = Welcome | Batch | Reply | Failed | Digest

encoder = msgspec.msgpack.Encoder()
to_core = msgspec.msgpack.Decoder(list[ToCore])
to_front = msgspec.msgpack.Decoder(list[ToFront])

HEADER = 4
"""Each message on the Unix socket: its length (4 bytes, big-endian), then the msgpack of a list of structs."""


def frame(messages: list[Any]) -> bytes:
    payload = encoder.encode(messages)
    return len(payload).to_bytes(HEADER, "big") + payload


class Frames:
    """The messages in a byte stream, as they complete (`feed` what the socket gave, get the decoded lists)."""

    def __init__(self, decoder: msgspec.msgpack.Decoder[Any]) -> None:
        self.decoder = decoder
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[list[Any]]:
        buffer = self.buffer
        buffer += data
        found = []
        start = 0
        while len(buffer) - start >= HEADER:
            size = int.from_bytes(buffer[start:start + HEADER], "big")
            end = start + HEADER + size
            if end > len(buffer):
                break
            found.append(self.decoder.decode(memoryview(buffer)[start + HEADER:end]))
            start = end
        if start:
            del buffer[:start]
        return found
