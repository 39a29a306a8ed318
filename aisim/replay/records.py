"""A request log in memory: what a recorder, a trace or a replay saw, one record per request.

Every log format reads into these records and every replay driver produces them, so that a
recorded log and its replay compare record by record. Arrivals are exact integer nanoseconds
(a trace's timestamps, or a server's clock); latencies are measured seconds and may be absent
(a trace has none, a non-streamed answer has no TTFT a client could see). All times are in the
served system's own seconds: a log recorded from `aisim serve --speed X` is scaled back by X
when it is read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

COMPLETED = "completed"
STATUSES = ("completed", "failed", "aborted")


@dataclass(frozen=True, slots=True)
class TensorShape:
    """A KServe v2 tensor as the wire shows it: name, datatype and shape (no data)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorShape:
        return cls(str(data["name"]), str(data["datatype"]), tuple(int(d) for d in data["shape"]))


@dataclass(slots=True)
class LoggedRequest:
    """One request: when it came, what it asked, and (when measured) how long it took."""

    arrival_ns: int
    """When the request reached the engine, from the log's origin (server start, or the first trace row)."""
    model: str | None
    """The model it named; None for traces that name none."""
    prompt_tokens: int
    output_tokens: int
    endpoint: str = ""
    """`/v1/chat/completions`, `/v1/completions`, `/v2/models/{m}/infer`...; '' when unknown."""
    stream: bool = True
    status: str = COMPLETED
    ttft: float | None = None
    """Seconds from arrival to the first token (engine side: `frontend` comes before it)."""
    itl: list[float] | None = None
    """Seconds between consecutive tokens."""
    e2e: float | None = None
    """Seconds from arrival to the end of the answer."""
    version: str | None = None
    """The model version a KServe request named."""
    batch: int | None = None
    """KServe requests: the batch size of the inputs."""
    inputs: tuple[TensorShape, ...] | None = None
    outputs: tuple[TensorShape, ...] | None = None
    error: str = ""
    priority: int = 0
    """The request's scheduling priority (vLLM's `priority`; KServe's `priority` parameter)."""
    frontend: float | None = None
    """Seconds from the server starting to read the request to handing it to the engine (parsing,
    tokenizing, network delay): what a client sees on top of `ttft` and `e2e`."""

    @property
    def is_kserve(self) -> bool:
        return self.inputs is not None or "/infer" in self.endpoint

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED


@dataclass(slots=True)
class LoggedLoad:
    """A model load the log saw (a KServe repository load call): when it started and how long it took."""

    arrival_ns: int
    model: str
    version: str | None
    seconds: float | None
    status: str = "ok"
    error: str = ""


@dataclass
class RequestLog:
    """A whole log: requests in arrival order, loads, and the GPUs' memory at the end."""

    requests: list[LoggedRequest]
    loads: list[LoggedLoad] = field(default_factory=list)
    memory_mib: dict[str, float] = field(default_factory=dict)
    """Framebuffer memory used per GPU at the end (MiB, as DCGM's FB_USED and nvidia-smi count it)."""
    source: str = ""
    """Where the records came from: `aisim`, `azure-csv`, `jsonl`, `simulation` or `live`."""
    meta: dict[str, Any] = field(default_factory=dict)
    """The header of an aisim log (scenario, speed, seed) or what a replay adds about itself."""

    def __len__(self) -> int:
        return len(self.requests)

    def statuses(self) -> dict[str, int]:
        """How many requests ended in each status."""
        counts = Counter(r.status for r in self.requests)
        return {s: counts.get(s, 0) for s in STATUSES} | {k: v for k, v in counts.items() if k not in STATUSES}

    def head(self, count: int | None) -> RequestLog:
        """The first `count` requests (all when None), with the loads that fall before the last of them."""
        if count is None or count >= len(self.requests):
            return self
        kept = self.requests[:count]
        last = kept[-1].arrival_ns if kept else 0
        return RequestLog(kept, [load for load in self.loads if load.arrival_ns <= last], dict(self.memory_mib),
                          self.source, dict(self.meta))
