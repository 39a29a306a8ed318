"""Feed records folded into what the views show: a `Board` that `apply`s records and hands out
immutable `Frame`s. Headless, so that it is tested without a terminal and shared by the local and
the attached TUI.

Requests are counted per virtual second (`BUCKET_NS`) over the last `WINDOW` seconds: arrivals,
completions, failures, mean time to first token and mean inter-token latency (per request: the
time from its first token to its end over its remaining tokens; the timeline keeps no per-token
records by default).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

NS = 1_000_000_000
BUCKET_NS = NS
WINDOW = 60
"""Virtual seconds of request history the sparklines span."""
LANE_KERNELS = 1024
"""Recent kernels (or steps) kept per stream lane: enough to fill the Streams view's two seconds with steps of
2 ms (24 covered 0.14 s of the default scenario's 6 ms decode steps, and the rest of the lane looked idle)."""
TRANSITIONS = 12
"""Recent state transitions kept per model version."""
LOG_LINES = 200


@dataclass(frozen=True)
class Kernel:
    """A kernel (or an engine step, when the stream scheduler does not run per kernel) on a lane."""

    start_ns: int
    end_ns: int
    name: str
    replica: str


@dataclass(frozen=True)
class Lane:
    gpu: str
    stream: str
    kernels: tuple[Kernel, ...]
    waiting: int
    running: int


@dataclass(frozen=True)
class EngineLoad:
    """The requests an engine replica runs and queues, and the GPUs it runs on (none for a mock)."""

    replica: str
    gpus: tuple[str, ...]
    running: int
    waiting: int


@dataclass(frozen=True)
class Transition:
    time_ns: int
    state: str
    reason: str


@dataclass(frozen=True)
class Machine:
    """One model version's state machine."""

    model: str
    version: str
    state: str
    active: bool
    transitions: tuple[Transition, ...]


@dataclass(frozen=True)
class Requests:
    """Per-second series (oldest first, the current second last) and totals."""

    arrivals: tuple[int, ...]
    completions: tuple[int, ...]
    failures: tuple[int, ...]
    ttft_ms: tuple[float, ...]
    itl_ms: tuple[float, ...]
    total_arrived: int
    total_completed: int
    total_failed: int
    total_aborted: int
    """Requests whose client went away (arrived = completed + failed + aborted + in flight)."""
    in_flight: int
    errors: tuple[tuple[str, int], ...]
    kv: tuple[tuple[str, int, int, bool], ...]
    """(replica, used blocks, total blocks, whether the engine died)."""


@dataclass(frozen=True)
class Frame:
    """Everything the views show at one instant (virtual time `now_ns`)."""

    now_ns: int
    scenario: str
    gpus: tuple[str, ...]
    faults: tuple[str, ...]
    pools: dict[str, dict[str, Any]]
    ooms: tuple[tuple[int, str, str], ...]
    """(time, gpu, message)."""
    crossings: tuple[tuple[int, str, str, float], ...]
    """(time, gpu, level entered, usage)."""
    lanes: tuple[Lane, ...]
    preemptions: tuple[tuple[int, str, str, str], ...]
    """(time, gpu, preempted streams, preempting stream)."""
    machines: tuple[Machine, ...]
    requests: Requests
    loads: tuple[EngineLoad, ...]
    log: tuple[str, ...]
    records: int
    """Records applied so far (a cheap change marker)."""


@dataclass
class _Second:
    arrivals: int = 0
    completions: int = 0
    failures: int = 0
    ttft_sum: float = 0.0
    ttft_n: int = 0
    itl_sum: float = 0.0
    itl_n: int = 0


@dataclass
class Board:
    """Folds feed records (see the module docstring)."""

    scenario: str = ""
    now_ns: int = 0
    gpus: list[str] = field(default_factory=list)
    streams: dict[str, list[str]] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)
    records: int = 0

    def __post_init__(self) -> None:
        self.ooms: deque[tuple[int, str, str]] = deque(maxlen=20)
        self.crossings: deque[tuple[int, str, str, float]] = deque(maxlen=20)
        self.lanes: dict[tuple[str, str], deque[Kernel]] = {}
        self.preemptions: deque[tuple[int, str, str, str]] = deque(maxlen=20)
        self.states: dict[tuple[str, str], dict[str, Any]] = {}
        self.transitions: dict[tuple[str, str], deque[Transition]] = {}
        self.seconds: dict[int, _Second] = {}
        self.arrived_at: dict[Any, int] = {}
        self.first_token_at: dict[Any, int] = {}
        self.totals = Counter[str]()
        self.errors = Counter[str]()
        self.log: deque[str] = deque(maxlen=LOG_LINES)

    # -- folding ---------------------------------------------------------------------------

    def apply(self, records: list[dict[str, Any]]) -> None:
        """Fold records in the order the feed gave them."""
        for record in records:
            self.records += 1
            self.now_ns = max(self.now_ns, int(record.get("t_ns", 0)))
            handler = getattr(self, "_on_" + record["type"], None)
            if handler is not None:
                handler(record)

    def _second(self, time_ns: int) -> _Second:
        key = time_ns // BUCKET_NS
        second = self.seconds.get(key)
        if second is None:
            second = self.seconds[key] = _Second()
            for old in [k for k in self.seconds if k <= key - WINDOW]:
                del self.seconds[old]
        return second

    def _say(self, time_ns: int, text: str) -> None:
        self.log.append(f"{time_ns / NS:9.3f}s  {text}")

    def _on_hello(self, r: dict[str, Any]) -> None:
        self.scenario, self.gpus, self.streams, self.faults = r["scenario"], r["gpus"], r["streams"], r["faults"]
        for model in r["models"]:
            for version in model["versions"]:
                self.states.setdefault((model["model"], version), {"state": "INIT", "active": False})

    def _on_sample(self, r: dict[str, Any]) -> None:
        self.pools, self.queues, self.engines = r["pools"], r["queues"], r["engines"]
        for state in r["models"]:
            self.states[(state["model"], state["version"])] = {"state": state["state"], "active": state["active"]}

    def _on_request_arrived(self, r: dict[str, Any]) -> None:
        self.arrived_at[r["request"]] = r["t_ns"]
        self.totals["arrived"] += 1
        self._second(r["t_ns"]).arrivals += 1

    def _on_request_first_token(self, r: dict[str, Any]) -> None:
        arrived = self.arrived_at.get(r["request"])
        self.first_token_at[r["request"]] = r["t_ns"]
        if arrived is not None:
            second = self._second(r["t_ns"])
            second.ttft_sum += (r["t_ns"] - arrived) / 1e6
            second.ttft_n += 1

    def _on_request_finished(self, r: dict[str, Any]) -> None:
        self.arrived_at.pop(r["request"], None)
        first = self.first_token_at.pop(r["request"], None)
        second = self._second(r["t_ns"])
        if r["outcome"] == "completed":
            self.totals["completed"] += 1
            second.completions += 1
        else:
            self.totals[r["outcome"]] += 1
        tokens = int(r.get("output_tokens") or 0)
        if first is not None and tokens > 1:
            second.itl_sum += (r["t_ns"] - first) / 1e6 / (tokens - 1)
            second.itl_n += 1

    def _on_request_failed(self, r: dict[str, Any]) -> None:
        self.arrived_at.pop(r["request"], None)
        self.first_token_at.pop(r["request"], None)
        self.totals["failed"] += 1
        self._second(r["t_ns"]).failures += 1
        self.errors[str(r["error"])] += 1

    def _on_model_state(self, r: dict[str, Any]) -> None:
        key = (r["model"], r["version"])
        self.transitions.setdefault(key, deque(maxlen=TRANSITIONS)).append(Transition(r["t_ns"], r["state"], r["reason"]))
        self.states.setdefault(key, {"active": False})["state"] = r["state"]
        self._say(r["t_ns"], f"{r['model']} v{r['version']} -> {r['state']}" + (f": {r['reason']}" if r["reason"] else ""))

    def _on_memory(self, r: dict[str, Any]) -> None:
        self.crossings.append((r["t_ns"], r["gpu"], r["level"], float(r["usage"])))
        self._say(r["t_ns"], f"{r['gpu']} memory {r['level']} ({float(r['usage']):.1%} used)")

    def _on_oom(self, r: dict[str, Any]) -> None:
        self.ooms.append((r["t_ns"], r["gpu"], r["message"]))
        self._say(r["t_ns"], f"OOM on {r['gpu']} ({r['replica']}): {r['message']}")

    def _on_fault(self, r: dict[str, Any]) -> None:
        self._say(r["t_ns"], f"fault {r['name']} ({r['kind']}) on {r['target']}" + (f": {r['detail']}" if r["detail"] else ""))

    def _on_log(self, r: dict[str, Any]) -> None:
        self._say(r["t_ns"], f"{r['level']} {r['model']} v{r['version']}: {r['message']}")

    def _on_xid(self, r: dict[str, Any]) -> None:
        self._say(r["t_ns"], f"XID {r['code']} on {r['gpu']}: {r['message']} ({r['effect']})")

    def _on_step(self, r: dict[str, Any]) -> None:
        name = f"step {r['prefill_tokens']}p+{r['decode_tokens']}d"
        for gpu in r["gpus"]:
            self._lane(gpu, r["stream"]).append(Kernel(r["t_ns"], r["end_ns"], name, r["replica"]))

    def _on_kernel(self, r: dict[str, Any]) -> None:
        self._lane(r["gpu"], r["stream"]).append(Kernel(r["start_ns"], r["t_ns"], r["name"], r["replica"]))

    def _on_preemption(self, r: dict[str, Any]) -> None:
        self.preemptions.append((r["t_ns"], r["gpu"], r["preempted_streams"], r["stream"]))

    def _lane(self, gpu: str, stream: str) -> deque[Kernel]:
        lane = self.lanes.get((gpu, stream))
        if lane is None:
            lane = self.lanes[(gpu, stream)] = deque(maxlen=LANE_KERNELS)
        return lane

    # -- frames ----------------------------------------------------------------------------

    def frame(self) -> Frame:
        """An immutable copy of what the views show now."""
        return Frame(
            now_ns=self.now_ns, scenario=self.scenario, gpus=tuple(self.gpus), faults=tuple(self.faults),
            pools=dict(self.pools), ooms=tuple(self.ooms), crossings=tuple(self.crossings), lanes=self._lanes(),
            preemptions=tuple(self.preemptions), machines=self._machines(), requests=self._requests(),
            loads=tuple(EngineLoad(name, tuple(e.get("gpus", ())), int(e["outstanding"]) - int(e["waiting"]),
                                   int(e["waiting"])) for name, e in sorted(self.engines.items())),
            log=tuple(self.log), records=self.records,
        )

    def _lanes(self) -> tuple[Lane, ...]:
        keys = {(gpu, stream) for gpu, streams in self.streams.items() for stream in streams} | set(self.lanes)
        lanes = []
        for gpu, stream in sorted(keys):
            queue = self.queues.get(gpu, {})
            lanes.append(Lane(gpu, stream, tuple(self.lanes.get((gpu, stream), ())),
                              int(queue.get("waiting", {}).get(stream, 0)), int(queue.get("running", {}).get(stream, 0))))
        return tuple(lanes)

    def _machines(self) -> tuple[Machine, ...]:
        return tuple(Machine(model, version, state.get("state", "INIT"), bool(state.get("active")),
                             tuple(self.transitions.get((model, version), ())))
                     for (model, version), state in self.states.items())

    def _requests(self) -> Requests:
        last = self.now_ns // BUCKET_NS
        seconds = [self.seconds.get(k, _Second()) for k in range(last - WINDOW + 1, last + 1)]
        return Requests(
            arrivals=tuple(s.arrivals for s in seconds), completions=tuple(s.completions for s in seconds),
            failures=tuple(s.failures for s in seconds),
            ttft_ms=tuple(s.ttft_sum / s.ttft_n if s.ttft_n else 0.0 for s in seconds),
            itl_ms=tuple(s.itl_sum / s.itl_n if s.itl_n else 0.0 for s in seconds),
            total_arrived=self.totals["arrived"], total_completed=self.totals["completed"],
            total_failed=self.totals["failed"], total_aborted=self.totals["aborted"], in_flight=len(self.arrived_at),
            errors=tuple(self.errors.most_common(5)),
            kv=tuple((name, int(e["kv_used"]), int(e["kv_total"]), bool(e["dead"]))
               for name, e in sorted(self.engines.items())),
        )
