"""What a fleet of `aisim serve` pods offers the routers above them (`docs/fleet.md`): vLLM's KV-cache events,
data-parallel ranks, prefill/decode roles and the lifecycle that routers and autoscalers poll."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Spec
from .units import Bandwidth, Duration

HashAlgorithm = Literal["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"]
"""vLLM's `--prefix-caching-hash-algo` choices (`vllm/config/cache.py`)."""


class KvEvents(Spec):
    """vLLM's `--kv-events-config` with `publisher: zmq`: a PUB socket sending `[topic, seq, batch]` and an
    optional ROUTER socket replaying buffered batches from a sequence number."""

    enabled: bool = True
    """Publish (vLLM's `enable_kv_cache_events`)."""
    publisher: Literal["zmq", "null"] = "zmq"
    """`zmq` publishes; `null` publishes nothing (vLLM's two publishers)."""
    endpoint: str = Field("tcp://*:5557", pattern=r"^(tcp|ipc|inproc)://")
    """PUB address; a data-parallel rank r binds the port plus r, as vLLM does."""
    replay_endpoint: str | None = Field(None, pattern=r"^(tcp|ipc|inproc)://")
    """ROUTER address for replay requests (none: no replay)."""
    topic: str = ""
    """The ZMQ topic of every message (llm-d's indexer subscribes to `kv@<pod>@<model>`)."""
    buffer_steps: int = Field(10_000, ge=1)
    """Batches kept for replay."""
    hwm: int = Field(100_000, ge=1)
    """The PUB socket's high-water mark."""
    encoding: Literal["tagged", "positional"] = "tagged"
    """`tagged`: each event a map with a `type` key (vLLM 0.11 on, 0.32-0.34 today); `positional`: each event
    an array with its type first (earlier releases; llm-d's consumers read both)."""
    int_block_hashes: bool = True
    """Block hashes as the low 64 bits of vLLM's digest, big-endian (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`,
    on by default in vLLM), else the digest's bytes."""
    hash_algorithm: HashAlgorithm = "sha256"
    """vLLM's `--prefix-caching-hash-algo` (default sha256)."""
    hash_seed: str | None = None
    """The seed of the first block's parent hash (`NONE_HASH`); vLLM takes PYTHONHASHSEED, else its fixed
    default `vllm-none-hash`. None: as vLLM (PYTHONHASHSEED when set)."""


class KvTransfer(Spec):
    """Prefill/decode disaggregation as vLLM's NIXL connector and llm-d's routing sidecar do it: a prefill
    request with `kv_transfer_params.do_remote_decode` returns the parameters its decode request sends with
    `do_remote_prefill`; the decode side pays the KV blocks' bytes over `linkBandwidth` before it decodes."""

    role: Literal["prefill", "decode", "both"] = "both"
    """vLLM's `kv_role` (`kv_producer`, `kv_consumer`, `kv_both`), named after the pool the pod is in."""
    link_bandwidth: Bandwidth = 25 * 10**9
    """Bytes per second between prefill and decode pods (default 25 GB/s: one 200 Gb/s RDMA NIC)."""
    link_latency: Duration = 20_000
    """Fixed time per transfer (default 20us: the RDMA read's setup)."""
    engine_id: str | None = None
    """This engine's NIXL id, returned to decode pods as `remote_engine_id` (default: from the pod name)."""
    side_channel_port: int = Field(5600, ge=1, le=65535)
    """`remote_port` a prefill pod returns (vLLM's `VLLM_NIXL_SIDE_CHANNEL_PORT`)."""
    prefill_ranks: int = Field(0, ge=0, le=63)
    """P/D inside this server: its first N data-parallel ranks form a prefill pool and the others a decode pool;
    each request is prefilled on one, its KV sent over the link, and decoded on the other (llm-d's P/D behind
    one address). 0: every rank does both. Needs `role: both` and more ranks than N."""


class Startup(Spec):
    """The start-up routers and autoscalers see: `/health` answers 503 until it is over."""

    time: Duration = 0
    """How long after start the server turns healthy (vLLM's model load and CUDA-graph capture)."""
    sleep_mode: bool = False
    """Serve vLLM's `/sleep`, `/wake_up` and `/is_sleeping` (vLLM serves them only with `--enable-sleep-mode`
    and `VLLM_SERVER_DEV_MODE=1`; off by default here too)."""


class Fleet(Spec):
    """The wire contracts a fleet's routers consume."""

    kv_events: KvEvents | None = None
    """Publish vLLM's KV-cache events (none: no publisher)."""
    data_parallel_size: int = Field(1, ge=1, le=64)
    """Engine replicas (ranks) behind this server for each simulated vLLM model: each model's placement is
    repeated on copies of its GPUs (vLLM's `--data-parallel-size`)."""
    kv_transfer: KvTransfer | None = None
    """A KV connector for prefill/decode disaggregation (none: `kv_transfer_params` are refused)."""
    startup: Startup = Startup()
    """The simulated start-up and vLLM's sleep mode."""
