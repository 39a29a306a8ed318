"""vLLM's KV-cache events on ZMQ (`vllm/distributed/kv_events.py`), published from the engine's prefix cache.

Wire: a PUB socket sends multipart `[topic, seq, payload]`, `seq` a counter from 0 as 8 bytes big-endian, the
payload an msgpack `EventBatch`: an array `[ts, events, data_parallel_rank]`. An event is, in the `tagged`
encoding (vLLM today), a map whose first key `type` names it (`BlockStored`, `BlockRemoved`,
`AllBlocksCleared`), fields with default values left out; in the `positional` encoding (vLLM before its events
became tagged maps) an array, its type first, then the fields in order. A ROUTER socket answers a request
`[identity, b"", start_seq]` with every buffered batch from `start_seq` on, each as `[identity, b"", topic,
seq, payload]`, then an end marker `[identity, b"", b"", seq -1, b""]`. Where vLLM's marker payload is empty,
aisim's carries a JSON error when it could not replay everything asked (`start_seq` older than the buffer) or
could not read the request; vLLM's clients ignore that payload.

Batches follow the engine: one per step that changed the cache, as vLLM publishes after each step's output. A
data-parallel rank r publishes on the endpoint's port plus r and stamps its batches with r.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import deque
from typing import Any

import msgspec
import zmq

from ..engine import KvCache, Replica, StepReport
from ..scenario.fleet import KvEvents
from .block_hash import BlockHasher
from .errors import FleetError

MEDIUM_GPU = "GPU"
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class _Tagged(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """An event as a map tagged `type` (vLLM 0.11 on)."""


class BlockStored(_Tagged):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(_Tagged):
    block_hashes: list[bytes | int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(_Tagged):
    pass


class _Positional(msgspec.Struct, array_like=True, gc=False, tag=True):
    """An event as an array, its type first (the encoding before the tagged maps)."""


class PositionalBlockStored(_Positional, tag="BlockStored"):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class PositionalBlockRemoved(_Positional, tag="BlockRemoved"):
    block_hashes: list[bytes | int]
    medium: str | None


class PositionalAllBlocksCleared(_Positional, tag="AllBlocksCleared"):
    pass


def offset_endpoint(endpoint: str, rank: int) -> str:
    """vLLM's `offset_endpoint_port`: rank r's endpoint (tcp: the port plus r, port 0 kept; inproc/ipc: a
    `_dp<r>` suffix)."""
    if rank == 0:
        return endpoint
    if endpoint.startswith("tcp://"):
        base, _, port = endpoint.rpartition(":")
        return endpoint if int(port) == 0 else f"{base}:{int(port) + rank}"
    return f"{endpoint}_dp{rank}"


class Publisher:
    """One rank's PUB and ROUTER sockets, served by a thread (as vLLM's `ZmqEventPublisher`): the engine hands
    batches over a queue and never waits on a socket."""

    def __init__(self, config: KvEvents, rank: int, context: zmq.Context[Any] | None = None) -> None:
        self.config = config
        self.rank = rank
        self.topic = config.topic.encode()
        self._context = context or zmq.Context.instance()
        self._queue: queue.Queue[EventBatch | None] = queue.Queue()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._lock = threading.Lock()
        self.sent = 0
        self.pub = self._context.socket(zmq.PUB)
        self.pub.set_hwm(config.hwm)
        self.endpoint = self._attach(self.pub, offset_endpoint(config.endpoint, rank))
        self.replay: zmq.Socket[Any] | None = None
        self.replay_endpoint: str | None = None
        if config.replay_endpoint is not None:
            self.replay = self._context.socket(zmq.ROUTER)
            self.replay.setsockopt(zmq.SNDHWM, 2 * (config.buffer_steps + 1))
            self.replay_endpoint = self._attach(self.replay, offset_endpoint(config.replay_endpoint, rank), bind=True)
        self._encoder = msgspec.msgpack.Encoder()
        self._thread = threading.Thread(target=self._run, name=f"aisim-kv-events-{rank}", daemon=True)
        self._thread.start()

    @staticmethod
    def _attach(sock: zmq.Socket[Any], endpoint: str, bind: bool = False) -> str:
        """Bind a wildcard, ipc, inproc or port-0 endpoint (or any, for the ROUTER), connect to others (vLLM's rule);
        returns the endpoint bound (a tcp port 0 resolved)."""
        try:
            if (bind or "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))
                    or endpoint.endswith(":0")):  # port 0 (a free one) can only be bound
                sock.bind(endpoint)
                return str(sock.getsockopt_string(zmq.LAST_ENDPOINT))
            sock.connect(endpoint)
        except zmq.ZMQError as error:
            sock.close(linger=0)
            raise FleetError(f"KV events: cannot {'bind' if bind or '*' in endpoint else 'use'} {endpoint}: {error}") from None
        return endpoint

    def publish(self, batch: EventBatch) -> None:
        self._queue.put(batch)

    def close(self) -> None:
        """Send what is queued, then close the sockets."""
        self._queue.put(None)
        self._thread.join(timeout=5)
        self.pub.close(linger=0)
        if self.replay is not None:
            self.replay.close(linger=0)

    def _run(self) -> None:
        seq = 0
        while True:
            if self.replay is not None and self.replay.poll(0):
                self._serve_replay()
            try:
                batch = self._queue.get(timeout=0.02)
            except queue.Empty:
                continue
            if batch is None:
                return
            payload = self._encoder.encode(batch)
            self.pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload))
            with self._lock:
                self._buffer.append((seq, payload))
            seq += 1
            self.sent = seq

    def _serve_replay(self) -> None:
        """Answer one replay request: the batches from the asked sequence number, then the end marker (with a
        JSON error as its payload when the request was unreadable or asked for batches no longer kept)."""
        assert self.replay is not None
        frames = self.replay.recv_multipart()
        if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
            message = ("a replay request is [empty frame, start sequence number as 8 bytes big-endian]; got "
                       f"{len(frames) - 1} frame(s) after the identity")
            self.replay.send_multipart((frames[0], b"", b"", END_SEQ, json.dumps({"error": message}).encode()))
            return
        identity, _, raw = frames
        start = int.from_bytes(raw, "big")
        with self._lock:
            kept = list(self._buffer)
        for seq, payload in kept:
            if seq >= start:
                self.replay.send_multipart((identity, b"", self.topic, seq.to_bytes(8, "big"), payload))
        error: bytes = b""
        oldest = kept[0][0] if kept else self.sent
        if start < oldest:
            error = json.dumps({"error": f"sequence number {start} is gone: the replay buffer holds "
                                         f"{oldest}..{self.sent - 1} (bufferSteps {self.config.buffer_steps}); "
                                         f"batches {start}..{oldest - 1} cannot be replayed",
                                "oldest": oldest}).encode()
        self.replay.send_multipart((identity, b"", b"", END_SEQ, error))


class Source:
    """One engine replica's prefix cache as vLLM events: listens to the cache (`KvCache.events`) and, after
    every step that changed it, publishes one batch on its rank's `Publisher`."""

    def __init__(self, kv: KvCache, publisher: Publisher, config: KvEvents) -> None:
        self.kv = kv
        self.publisher = publisher
        self.hasher = BlockHasher(config.hash_algorithm, config.hash_seed, config.int_block_hashes)
        self.positional = config.encoding == "positional"
        self._digests: dict[int, bytes] = {}
        """Chain id (the cache's key of a token block) -> vLLM's digest of that block."""
        kv.events = []

    def attach(self, replica: Replica) -> None:
        """Publish after each of `replica`'s steps (after whatever else listens to them)."""
        before = replica.on_step

        def on_step(engine: Replica, report: StepReport) -> None:
            if before is not None:
                before(engine, report)
            self.flush()

        replica.on_step = on_step

    def _digest(self, request: Any, index: int) -> bytes:
        chain = request.block_hashes[index]
        digest = self._digests.get(chain)
        if digest is None:
            parent = self._digest(request, index - 1) if index > 0 else None
            digest = self._digests[chain] = self.hasher.block(parent, self.kv.block_tokens(request, index))
        return digest

    def flush(self) -> None:
        """Publish what the cache did since the last flush, if anything."""
        records = self.kv.events
        if not records:
            return
        self.kv.events = []
        events: list[Any] = []
        external = self.hasher.external
        for record in records:
            kind = record[0]
            if kind == "stored":
                _, request, first, end = record
                hashes = [external(self._digest(request, i)) for i in range(first, end)]
                parent = external(self._digest(request, first - 1)) if first > 0 else None
                tokens = [t for i in range(first, end) for t in self.kv.block_tokens(request, i)]
                events.append(PositionalBlockStored(hashes, parent, tokens, self.kv.block_size, None, MEDIUM_GPU, None)
                              if self.positional else
                              BlockStored(hashes, parent, tokens, self.kv.block_size, None, MEDIUM_GPU, None, group_idx=0))
            elif kind == "removed":
                digest = self._digests.get(record[1])
                if digest is None:
                    continue
                events.append(PositionalBlockRemoved([external(digest)], MEDIUM_GPU) if self.positional
                              else BlockRemoved([external(digest)], MEDIUM_GPU, group_idx=0))
            else:
                events.append(PositionalAllBlocksCleared() if self.positional else AllBlocksCleared())
        self.publisher.publish(EventBatch(time.time(), events, self.publisher.rank))
