"""The timeline: typed records of everything that happened, exported as JSONL and Chrome trace.

Request-level records are tuples `(time_ns, type, *fields)` whose field names come from
`RECORD_FIELDS`, the one place that defines each record type. Engine steps are kept in columns
(numpy arrays per run of steps), because a long run has hundreds of thousands of them; an engine adds
its runs by value and they become columns many runs at a time (`add_run`); they are expanded into one
record per step only when exported. Per-token records are off by default so
that memory stays bounded on long runs.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from itertools import accumulate, islice
from typing import IO, Any, NamedTuple

import numpy as np

RECORD_FIELDS: dict[str, tuple[str, ...]] = {
    "request_arrived": ("request", "model", "source", "prompt_tokens", "output_tokens", "priority"),
    "request_scheduled": ("request", "replica"),
    "request_first_token": ("request",),
    "request_preempted": ("request", "replica"),
    "request_finished": ("request", "outcome", "output_tokens"),
    "request_failed": ("request", "error"),
    "token": ("request", "index"),
    "model_state": ("model", "version", "state", "reason"),
    "fault": ("name", "kind", "target", "detail"),
    "log": ("model", "version", "level", "message"),
    "memory": ("gpu", "level", "usage", "used_bytes"),
    "oom": ("replica", "gpu", "message"),
    "kernel": ("gpu", "stream", "replica", "name", "start_ns", "work_ns"),
    "copy": ("gpu", "direction", "stream", "replica", "name", "start_ns"),
    "preemption": ("gpu", "preempted_streams", "stream", "context_switch_ns"),
    "gpu_sample": ("gpu", "fields"),
    "dcgm_inject": ("gpu", "field", "value", "until_ns", "source"),
    "dcgm_clear": ("gpu", "field", "reason"),
    "xid": ("gpu", "code", "message", "effect", "killed"),
}
PENDING_STEPS = 1 << 15
"""Steps added by value (`Timeline.add_run`) that are kept as Python ints before they are made into columns."""
STEP_FIELDS = ("end_ns", "replica", "gpus", "stream", "requests", "prefill_tokens", "decode_tokens", "kv_used_blocks", "kv_total_blocks")


class StepRun(NamedTuple):
    """Consecutive steps of one engine replica, in columns (a named tuple: a long run makes one per step
    run, and a frozen dataclass costs several times as much to build)."""

    replica: str
    gpus: tuple[str, ...]
    stream: str
    starts: np.ndarray
    ends: np.ndarray
    requests: np.ndarray
    prefill_tokens: np.ndarray
    decode_tokens: np.ndarray
    kv_used: np.ndarray
    kv_total: int

    def records(self) -> Iterator[tuple[int, str, dict[str, Any]]]:
        gpus = list(self.gpus)
        for i in range(len(self.starts)):
            yield int(self.starts[i]), "step", {
                "end_ns": int(self.ends[i]), "replica": self.replica, "gpus": gpus, "stream": self.stream,
                "requests": int(self.requests[i]), "prefill_tokens": int(self.prefill_tokens[i]),
                "decode_tokens": int(self.decode_tokens[i]), "kv_used_blocks": int(self.kv_used[i]),
                "kv_total_blocks": self.kv_total,
            }


class Timeline:
    """Collects records during a run.

    A long-running server keeps only the most recent `max_records` records of each kind (a rolling
    window that consumers such as the metrics feed read as it goes); `added_steps` counts every
    step run ever added, so a reader knows how many it has not seen.
    """

    def __init__(self, per_token: bool = False, max_records: int | None = None) -> None:
        self.per_token = per_token
        self.rolling = max_records is not None
        """Whether this is a long-running server's window: then nothing kept per request may grow without end."""
        self.events: deque[tuple[Any, ...]] | list[tuple[Any, ...]] = deque(maxlen=max_records) if max_records else []
        self._steps: deque[StepRun] | list[StepRun] = deque(maxlen=max_records) if max_records else []
        self._pending: list[tuple[str, tuple[str, ...], str, int, int, int, int, int, int]] = []
        """Runs added by value and not made into columns yet: (replica, gpus, stream, start, steps, requests,
        prefill, decode, KV total); their steps' ends and KV blocks in use wait in `_ends` and `_kv_used`."""
        self._ends: list[int] = []
        self._kv_used: list[int] = []
        self._pending_runs = min(max_records or PENDING_STEPS, PENDING_STEPS)
        """Pending runs made into columns at most (a rolling window keeps no more than it holds)."""
        self.added_steps = 0
        self.added_events = 0
        """Request-level records ever added (a reader of the rolling window counts what it has seen)."""

    @property
    def steps(self) -> deque[StepRun] | list[StepRun]:
        """Every run of engine steps (the window's, in a rolling timeline), in the order they were added."""
        if self._pending:
            self._columns()
        return self._steps

    def add_steps(self, run: StepRun) -> None:
        """Append a run of engine steps."""
        self.steps.append(run)
        self.added_steps += 1

    def add_run(self, replica: str, gpus: tuple[str, ...], stream: str, start: int, ends: list[int], requests: int,
                prefill: int, decode: int, kv_used: list[int], kv_total: int) -> None:
        """Append a run of engine steps by value: `len(ends)` steps, the first starting at `start` and each next
        one when the one before ends, each with these requests and tokens, and `kv_used` blocks in use after each.
        Runs are made into `StepRun` columns many at a time, when `steps` is read (one numpy pass per column
        for them all, where an array per run cost a few microseconds of fixed overhead)."""
        self._pending.append((replica, gpus, stream, start, len(ends), requests, prefill, decode, kv_total))
        self._ends += ends
        self._kv_used += kv_used
        self.added_steps += 1
        if len(self._ends) >= PENDING_STEPS or len(self._pending) >= self._pending_runs:
            self._columns()

    def _columns(self) -> None:
        """The pending runs as `StepRun`s: each column's slice of one array for them all."""
        pending, self._pending = self._pending, []
        ends = np.array(self._ends, dtype=np.int64)
        kv_used = np.array(self._kv_used, dtype=np.int64)
        self._ends, self._kv_used = [], []
        _, _, _, first, counts, requests, prefill, decode, _ = (list(column) for column in zip(*pending, strict=True))
        bounds = [0, *accumulate(counts)]
        starts = np.empty_like(ends)
        starts[1:] = ends[:-1]
        starts[bounds[:-1]] = first  # each run's first step starts at its own start, the others when the one before ends
        requests_, prefill_, decode_ = (np.repeat(np.array(values, dtype=np.int64), counts)
                                        for values in (requests, prefill, decode))
        steps = self._steps
        for (replica, gpus, stream, *_, kv_total), a, b in zip(pending, bounds, bounds[1:], strict=False):
            steps.append(StepRun(replica, gpus, stream, starts[a:b], ends[a:b], requests_[a:b], prefill_[a:b],
                                 decode_[a:b], kv_used[a:b], kv_total))

    def recent_steps(self, seen: int) -> list[StepRun]:
        """The step runs added after the first `seen` ones (those still in the window)."""
        fresh = min(self.added_steps - seen, len(self.steps))
        if fresh <= 0:
            return []
        if isinstance(self.steps, list):
            return self.steps[len(self.steps) - fresh:]
        return list(islice(reversed(self.steps), fresh))[::-1]

    def add(self, time_ns: int, kind: str, *fields: Any) -> None:
        """Append a request-level record; `fields` in the order `RECORD_FIELDS[kind]` names them."""
        self.events.append((time_ns, kind, *fields))
        self.added_events += 1

    def recent_events(self, seen: int) -> list[tuple[Any, ...]]:
        """The request-level records added after the first `seen` ones (those still in the window), oldest
        first; costs what it returns, not the window's length."""
        fresh = min(self.added_events - seen, len(self.events))
        if fresh <= 0:
            return []
        if isinstance(self.events, list):
            return self.events[len(self.events) - fresh:]
        return list(islice(reversed(self.events), fresh))[::-1]

    def records(self) -> list[dict[str, Any]]:
        """Every record as a dict, in time order; at one instant, request and model records come before
        the steps that start then, and otherwise keep the order they were made in."""
        rows: list[tuple[int, int, int, str, dict[str, Any]]] = []
        order = 0
        for run in self.steps:
            for time_ns, kind, fields in run.records():
                rows.append((time_ns, 1, order, kind, fields))
                order += 1
        for event in self.events:
            fields = dict(zip(RECORD_FIELDS[event[1]], event[2:]))
            rows.append((event[0], 0, order, event[1], fields))
            order += 1
        rows.sort(key=lambda row: (row[0], row[1], row[2]))
        return [{"t_ns": t, "type": kind, **fields} for t, _, _, kind, fields in rows]

    def write_jsonl(self, out: IO[str]) -> int:
        """One JSON object per line; returns the number of records."""
        records = self.records()
        for record in records:
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
        return len(records)

    def write_chrome_trace(self, out: IO[str]) -> None:
        """Chrome trace JSON (opens in Perfetto): one process per GPU set, one lane per stream and replica
        for steps and one per stream for the kernels and copies of the stream scheduler, requests as
        async spans."""
        trace: list[dict[str, Any]] = []
        processes: dict[str, int] = {}
        lanes: dict[tuple[str, str], int] = {}

        def lane_of(process: str, lane: str) -> tuple[int, int]:
            if process not in processes:
                processes[process] = len(processes) + 1
                trace.append({"ph": "M", "name": "process_name", "pid": processes[process],
                              "args": {"name": f"GPU {process}"}})
            if (process, lane) not in lanes:
                lanes[(process, lane)] = len(lanes) + 1
                trace.append({"ph": "M", "name": "thread_name", "pid": processes[process], "tid": lanes[(process, lane)],
                              "args": {"name": lane}})
            return processes[process], lanes[(process, lane)]

        for run in self.steps:
            pid, tid = lane_of(",".join(run.gpus), f"{run.stream} / {run.replica}")
            for start, end, requests, prefill, decode in zip(run.starts.tolist(), run.ends.tolist(), run.requests.tolist(),
                                                             run.prefill_tokens.tolist(), run.decode_tokens.tolist()):
                trace.append({"ph": "X", "name": "step", "pid": pid, "tid": tid, "ts": start / 1000,
                              "dur": (end - start) / 1000,
                              "args": {"requests": requests, "prefill_tokens": prefill, "decode_tokens": decode}})
        names = {"request_arrived": "b", "request_finished": "e", "request_failed": "e"}
        for event in self.events:
            kind = event[1]
            if kind in ("kernel", "copy"):
                fields = dict(zip(RECORD_FIELDS[kind], event[2:]))
                pid, tid = lane_of(fields["gpu"], f"stream {fields['stream']}")
                trace.append({"ph": "X", "name": fields["name"], "cat": kind, "pid": pid, "tid": tid,
                              "ts": fields["start_ns"] / 1000, "dur": (event[0] - fields["start_ns"]) / 1000,
                              "args": {"replica": fields["replica"]}})
                continue
            phase = names.get(kind)
            if phase:
                fields = dict(zip(RECORD_FIELDS[kind], event[2:]))
                trace.append({"ph": phase, "cat": "request", "name": "request", "id": fields["request"], "pid": 0,
                              "tid": 0, "ts": event[0] / 1000, "args": fields})
        json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, out, separators=(",", ":"))
