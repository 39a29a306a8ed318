"""How `aisim serve` listens and limits (server), what the GPUs export (telemetry), and run settings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from .base import Spec
from .distributions import DurationDistribution
from .fleet import Fleet
from .hardware import Identifier
from .units import ByteSize, Duration, PositiveRate

Personality = Literal["openai", "vllm", "anthropic", "kserve", "kserve-grpc", "vllm-metrics", "triton-metrics",
                      "dcgm-metrics", "admin"]
PLANNED_PERSONALITIES: dict[str, str] = {}
"""Personalities accepted ahead of their implementation, with the issue that builds each (none now)."""


class Listener(Spec):
    """One listening port and the personalities it speaks."""

    port: int = Field(ge=0, le=65535)
    """TCP port (0 picks a free one)."""
    personalities: list[Personality] = Field(min_length=1)
    """Wire dialects served on this port."""
    metrics_path: Annotated[str, Field(pattern=r"^/")] = "/metrics"
    """Path of the metrics dialects on this port."""

    def planned_values(self) -> list[tuple[str, str, str]]:
        return [("personalities", f"personality {p!r}", PLANNED_PERSONALITIES[p])
                for p in self.personalities if p in PLANNED_PERSONALITIES]

    @field_validator("personalities")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("personalities must not repeat")
        if "kserve-grpc" in value and len(value) > 1:
            raise ValueError("kserve-grpc speaks gRPC (HTTP/2) on a port of its own: give it a listener alone")
        return value


def _default_listeners() -> list[Listener]:
    return [Listener(port=8080, personalities=["openai", "vllm", "vllm-metrics"])]


class ApiKey(Spec):
    """An accepted API key; with any key configured, requests without a valid one get 401."""

    name: Identifier
    """Name that fault scopes and rate limits refer to."""
    key: str = Field(min_length=1)
    """The bearer token clients send."""


class RateLimits(Spec):
    """Request and token rate limits (RPM / TPM), answered with 429 and `x-ratelimit-*` headers."""

    requests: PositiveRate | None = None
    """Requests allowed (`600/min`)."""
    tokens: PositiveRate | None = None
    """Prompt plus completion tokens allowed (`90000/min`)."""
    per: Literal["key", "global"] = "key"
    """Count per API key or for the whole server."""


class Admin(Spec):
    """Admin endpoints (`/admin/...`: DCGM field injection and XID errors) on listeners with the `admin` personality."""

    enabled: bool = False
    """Serve the admin endpoints (off unless enabled)."""
    token: str | None = Field(None, min_length=1)
    """Bearer token the admin endpoints require. Without one the server refuses to start, unless `insecure` is
    true and it is bound to a loopback address."""
    insecure: bool = False
    """Serve the admin endpoints without a token (only on a loopback address: 127.0.0.1, ::1, localhost)."""


class Connections(Spec):
    """Connection hygiene: how long a client may take and how many connections it may hold, so that slow,
    stalled or idle clients cannot hold the server."""

    header_timeout: Duration = 10_000_000_000
    """Time a new connection has to send its first request's headers; past it the connection is closed
    (default 10s)."""
    idle_timeout: Duration = 30_000_000_000
    """Time a keep-alive connection may wait, from the end of one response to the end of the next request's
    headers, before it is closed (default 30s)."""
    body_timeout: Duration = 60_000_000_000
    """Time to receive a whole request body once its headers are in; past it the connection is closed
    (default 60s)."""
    max_open: int | None = Field(None, ge=1)
    """Most connections open at once. At the limit a new connection closes the one that has waited longest for a
    request (idle keep-alive or headers not yet complete); when every connection is busy, the new one is
    answered 503 and closed. Default: the process's file-descriptor limit less 64."""
    max_header_size: ByteSize = Field(32 * 2**10, ge=1024)
    """Largest request line plus headers; larger ones are answered 431 (default 32KiB)."""


class RequestLimits(Spec):
    """Caps on the work one request may ask for, as the real APIs have them, so no request stalls the others (the
    2,048 inputs per embeddings request are OpenAI's fixed limit, `aisim.api.openai.protocol.MAX_EMBEDDING_INPUTS`)."""

    embedding_tokens: int = Field(300_000, ge=1)
    """Tokens summed over one `/v1/embeddings` request's inputs (OpenAI's limit: 300,000)."""
    prompts: int = Field(2048, ge=1)
    """Prompts per `/v1/completions` request, times `n` (aisim's cap, the embeddings one: OpenAI documents
    none)."""


class Server(Spec):
    """How `aisim serve` listens, authenticates and limits."""

    host: str = "127.0.0.1"
    """Interface to bind."""
    listeners: list[Listener] = Field(default_factory=_default_listeners, min_length=1)
    """Ports and personalities (default 8080: openai, vllm, vllm-metrics)."""
    api_keys: list[ApiKey] = Field(default_factory=list)
    """Accepted API keys; none means no authentication."""
    rate_limits: RateLimits | None = None
    """RPM / TPM limits."""
    network_delay: DurationDistribution | None = None
    """Artificial network delay added to every response (`120-350ms`)."""
    max_body_size: ByteSize = 32 * 2**20
    """Largest request body accepted (default 32MiB)."""
    admin: Admin = Admin()
    """Admin endpoints."""
    connections: Connections = Connections()
    """Timeouts and connection limits."""
    request_limits: RequestLimits = RequestLimits()
    """Caps on prompts, inputs and tokens per request."""
    allowed_hosts: list[Annotated[str, Field(min_length=1)]] | None = None
    """Host names (without port) a request's `Host` header may name; others get 400. `*` allows any. Default:
    the loopback names (localhost, 127.0.0.1, ::1) when bound to a loopback address, any host otherwise."""
    cors_origins: list[Annotated[str, Field(pattern=r"^(\*|https?://[^/]+)$")]] = Field(default_factory=list)
    """Origins (`https://app.example.com`, or `*`) that browsers may call from (CORS); none by default, and a
    state-changing request from any other origin is refused with 403."""
    lora_runtime_updates: bool = False
    """Serve `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` (vLLM serves them only with
    `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, which turns them on here too)."""
    shutdown_grace: Duration = 30_000_000_000
    """On SIGTERM, time the requests in flight have to finish before the remaining streams are ended with an
    error event (default 30s, Kubernetes' terminationGracePeriodSeconds)."""
    api_server_count: int = Field(0, ge=0, le=64)
    """API-server processes in front of one engine-core process (vLLM's `--api-server-count`; `aisim serve
    --api-server-count` overrides it). 0: one process serves everything (docs/split-server.md)."""
    model_repository: str | None = None
    """A Triton model repository folder whose models are served besides `models`."""
    fleet: Fleet = Fleet()
    """What the routers of a fleet consume: KV-cache events, data-parallel ranks, prefill/decode roles and the
    simulated start-up (`docs/fleet.md`)."""


DcgmLabelStyle = Literal["Hostname", "hostname", "none"]


class Dcgm(Spec):
    """dcgm-exporter options."""

    hostname_label: DcgmLabelStyle = "Hostname"
    """`Hostname` (older exporters), `hostname` (newer) or `none` (`--no-hostname`)."""
    hostname: str = "aisim"
    """Value of the hostname label."""
    driver_version: str = Field("550.54.15", min_length=1)
    """Value of the `DCGM_FI_DRIVER_VERSION` label."""
    fields: list[Annotated[str, Field(pattern=r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")]] | None = None
    """Exported fields; dcgm-exporter's default counters when absent (`DCGM_EXP_XID_ERRORS_COUNT` is off by default)."""
    xid_count_window: Duration = 300_000_000_000
    """Window of `DCGM_EXP_XID_ERRORS_COUNT` (default 5m)."""


class Telemetry(Spec):
    """GPU telemetry sampled into the timeline and exported as metrics (on when this section is given, when a
    listener speaks `dcgm-metrics` or `admin`, when a fault is an XID or a DCGM field, or with `aisim run --metrics`)."""

    interval: Duration = 1_000_000_000
    """Sampling interval (default 1s)."""
    dcgm: Dcgm = Dcgm()
    """Options of the dcgm-exporter personality (labels, fields)."""


class Timeline(Spec):
    """What the timeline records."""

    per_token: bool = False
    """Record every token (memory grows with output length)."""


class Simulation(Spec):
    """Run settings."""

    until: Duration | None = None
    """Stop the simulation at this simulated time (default: when the workload drains)."""
    detail: Literal["step", "layer"] = "step"
    """Kernel detail: one kernel per step (fast) or per layer (small scenarios, the TUI)."""
    timeline: Timeline = Timeline()
    """Timeline recording options."""
