"""Model version lifecycles: load, check, serve, switch, degrade and roll back.

Each version moves only along the edges of its state machine; any other move is refused (and
recorded). LOADING lasts the simulated load time, then a sandbox inference checks the declared
inputs and outputs before READY. A hot switch sends new requests to the new version while
requests in flight finish on the old one, so none is lost; the switch is refused when the new
version's inputs are incompatible with the active one's (additional outputs are allowed by
default). With rollback on, a switched-to version whose P99 latency (time to first token for
generating models, end-to-end otherwise) stays above the threshold for the whole window goes
DEGRADED and traffic returns to the previous version.

Load time, unless the version gives one: weight bytes per GPU over the slower of the storage
bandwidth and the host link (PCIe), plus a fixed start-up cost per runtime (CUDA context and
library initialisation; users of NVIDIA/TensorRT report several seconds for a first load).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from ..scenario.models import Compatibility, Model, Version
from ..scenario.presets import GpuProfile

NS = 1_000_000_000
STARTUP_NS = {"vllm": 5 * NS, "tensorrt": 3 * NS, "onnxruntime": 1 * NS, "python": NS // 2}
"""Fixed start-up cost of a load per runtime (context, libraries; vLLM also profiles and captures graphs)."""


class State(StrEnum):
    INIT = "INIT"
    LOADING = "LOADING"
    READY = "READY"
    DEGRADED = "DEGRADED"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


EDGES: dict[State, frozenset[State]] = {
    State.INIT: frozenset({State.LOADING}),
    State.LOADING: frozenset({State.READY, State.UNAVAILABLE}),
    State.READY: frozenset({State.DEGRADED, State.UNLOADING, State.UNAVAILABLE}),
    State.DEGRADED: frozenset({State.READY, State.UNLOADING, State.UNAVAILABLE}),
    State.UNLOADING: frozenset({State.UNAVAILABLE}),
    State.UNAVAILABLE: frozenset({State.LOADING}),
}


class IllegalTransition(ValueError):
    """A move that is not an edge of the state machine."""


def load_time_ns(model: Model, version: Version, gpu: GpuProfile) -> int:
    """How long loading `version` takes (see the module docstring)."""
    if version.load.time is not None:
        return version.load.time
    tp = model.placement.tensor_parallel if model.placement else 1
    bandwidth = min(version.load.storage_bandwidth, gpu.host_link_bandwidth)
    return STARTUP_NS[model.resolved_runtime()] + model.weight_bytes() // tp * NS // bandwidth


def sandbox_problem(version: Version) -> str | None:
    """What the sandbox inference finds wrong with a version before READY, or None."""
    if version.load.fail:
        return version.load.fail
    for kind, tensors in (("input", version.inputs), ("output", version.outputs)):
        names = [t.name for t in tensors]
        if len(set(names)) != len(names):
            return f"sandbox inference failed: duplicate {kind} names {names}"
    return None


def incompatibility(new: Version, active: Version, rules: Compatibility) -> str | None:
    """Why traffic cannot switch from `active` to `new`, or None when it can."""
    old_inputs = {t.name: t for t in active.inputs}
    new_inputs = {t.name: t for t in new.inputs}
    if set(old_inputs) != set(new_inputs):
        return f"inputs differ: {sorted(old_inputs)} vs {sorted(new_inputs)}"
    for name, old in old_inputs.items():
        candidate = new_inputs[name]
        if candidate.datatype != old.datatype:
            return f"input {name!r} changes datatype {old.datatype} -> {candidate.datatype}"
        if not _shapes_fit(old.shape, candidate.shape, exact=rules.inputs == "exact"):
            return f"input {name!r} changes shape {old.shape} -> {candidate.shape}"
    old_outputs = {t.name: t for t in active.outputs}
    new_outputs = {t.name: t for t in new.outputs}
    missing = set(old_outputs) - set(new_outputs)
    if missing:
        return f"outputs {sorted(missing)} disappear"
    if rules.outputs == "exact" and set(new_outputs) != set(old_outputs):
        return f"outputs {sorted(set(new_outputs) - set(old_outputs))} are added"
    for name, old in old_outputs.items():
        if new_outputs[name].datatype != old.datatype:
            return f"output {name!r} changes datatype {old.datatype} -> {new_outputs[name].datatype}"
    return None


def _shapes_fit(old: list[int], new: list[int], exact: bool) -> bool:
    if len(old) != len(new):
        return False
    return all(a == b or (not exact and -1 in (a, b)) for a, b in zip(old, new))


@dataclass
class VersionLife:
    """One version's current state."""

    version: Version
    state: State = State.INIT
    reason: str = ""
    since: int = 0


@dataclass
class Lifecycle:
    """The states of one model's versions and which one serves new requests."""

    model: Model
    record: Callable[[int, str, str, str], None]
    """Called with (time, version, state, reason) on every change (the timeline)."""
    lives: dict[str, VersionLife] = field(init=False)
    active: str = field(init=False)
    previous: list[str] = field(default_factory=list)
    """Versions traffic switched away from, most recent last (the rollback targets)."""
    rollbacks: int = 0
    refused: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lives = {v.version: VersionLife(v) for v in self.model.versions}
        lifecycle = self.model.lifecycle
        self.active = (lifecycle.initial_version if lifecycle and lifecycle.initial_version
                       else self.model.versions[0].version)

    def move(self, version: str, to: State, time_ns: int, reason: str = "") -> None:
        """Change a version's state along an edge; raises `IllegalTransition` otherwise."""
        life = self.lives[version]
        if to not in EDGES[life.state]:
            raise IllegalTransition(f"version {version!r} of {self.model.id!r} cannot go from {life.state} to {to}")
        life.state, life.reason, life.since = to, reason, time_ns
        self.record(time_ns, version, to.value, reason)

    def refuse(self, time_ns: int, version: str, why: str) -> None:
        """Record an action that could not be carried out."""
        self.refused.append(why)
        self.record(time_ns, version, self.lives[version].state.value, f"refused: {why}")


@dataclass
class TailWatch:
    """P99 of a latency over a sliding window, and how long it has stayed above a threshold."""

    threshold_ns: int
    window_ns: int
    finished: deque[tuple[int, int]] = field(default_factory=deque)
    breach_since: int | None = None

    def add(self, finished_at: int, latency_ns: int) -> None:
        self.finished.append((finished_at, latency_ns))

    def breached_for_window(self, now: int) -> bool:
        """Whether the P99 has been above the threshold for the whole window up to `now`."""
        while self.finished and self.finished[0][0] < now - self.window_ns:
            self.finished.popleft()
        if not self.finished:
            self.breach_since = None
            return False
        p99 = float(np.percentile([e for _, e in self.finished], 99))
        if p99 <= self.threshold_ns:
            self.breach_since = None
            return False
        if self.breach_since is None:
            self.breach_since = now
        return now - self.breach_since >= self.window_ns
