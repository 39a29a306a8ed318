"""Records out of a running simulation, for the TUI and for `/admin/events`: plain JSON-ready dicts.

A `Feed` reads a simulation incrementally (`Timeline.recent_events` / `recent_steps`) and, on each
`poll`, returns what happened since the previous one plus one `sample` of the state that is not on
the timeline (pool maps, queue depths, model states). The TUI of a local simulation and a TUI
attached to `aisim serve` fold the same records, so the two cannot drift apart.

Record types: the timeline's own (`RECORD_FIELDS`, less `token` and `gpu_sample`), `step` (one per
engine step, at most `MAX_STEPS` per poll and replica: a view shows only the latest), `hello` (first
poll: scenario, GPUs, streams, fault catalogue) and `sample`.
"""

from __future__ import annotations

from typing import Any

from .pool import Allocator
from .pool.state import PoolState
from .simulation import Simulation
from .timeline import RECORD_FIELDS

MAP_CELLS = 512
"""Resolution of a pool's memory map in a sample (cells over the device's capacity)."""
MAX_STEPS = 64
"""Steps of one replica carried per poll (a lane shows fewer)."""
BACKLOG = 2000
"""Timeline records a feed that starts late (an attached TUI) carries from before it started."""
SKIPPED = frozenset({"token", "gpu_sample"})
"""Record types the views do not use (per-token records, telemetry samples)."""
MAP_STATES = {"allocated": "A", "awaiting_free": "A", "cached": "C", "slack": "C"}


def memory_map(state: PoolState, cells: int = MAP_CELLS) -> str:
    """The device's memory as `cells` characters, each the state holding most of its bytes: `A`
    allocated, `C` cached in the pool, `O` held outside the pool (other processes, non-PyTorch),
    `.` free. The pool's segments come first in address order, then the memory outside, then free."""
    runs: list[tuple[str, int]] = [(MAP_STATES[b.state], b.size) for s in state.segments for b in s.blocks]
    runs.append(("O", state.held_outside))
    runs.append((".", max(state.capacity - state.reserved - state.held_outside, 0)))
    total = sum(size for _, size in runs) or 1
    per_cell = total / cells
    out: list[str] = []
    weights: dict[str, float] = {}
    room = per_cell
    for kind, size in runs:
        left = float(size)
        while left > 0:
            take = min(left, room)
            weights[kind] = weights.get(kind, 0.0) + take
            left -= take
            room -= take
            if room <= 1e-9:
                out.append(max(weights, key=lambda k: weights[k]))
                weights, room = {}, per_cell
                if len(out) == cells:
                    return "".join(out)
    if weights and len(out) < cells:
        out.append(max(weights, key=lambda k: weights[k]))
    return "".join(out).ljust(cells, ".")


def pool_sample(pool: Allocator) -> dict[str, Any]:
    """What the memory view shows of a pool: the figures, the size-class bins and the map."""
    state = pool.state()
    watch = pool.watch
    return {
        "allocator": state.allocator, "capacity": state.capacity, "reserved": state.reserved,
        "allocated": state.allocated, "cached": state.cached, "free": state.free, "outside": state.held_outside,
        "usage": state.usage, "level": state.level, "warning": watch.warning, "critical": watch.critical,
        "fragmentation": state.fragmentation, "external_fragmentation": state.external_fragmentation,
        "inactive_split": state.inactive_split, "largest_free_block": state.largest_free_block,
        "segments": len(state.segments), "blocks": sum(len(s.blocks) for s in state.segments),
        "bins": [[b.log2, b.allocated, b.cached] for b in state.bins],
        "map": memory_map(state), "ooms": pool.stats.num_ooms,
    }


class Feed:
    """Incremental reader of one simulation (see the module docstring)."""

    def __init__(self, sim: Simulation, backlog: int = BACKLOG) -> None:
        self.sim = sim
        timeline = sim.timeline
        self._seen_events = max(timeline.added_events - backlog, 0)
        self._seen_steps = max(timeline.added_steps - backlog, 0)
        self._hello = False

    def hello(self) -> dict[str, Any]:
        """What does not change during a run: names of the scenario, GPUs, streams, faults, models."""
        sim = self.sim
        streams = {device: sorted({"default", *(s.name for s in sim.devices[device].streams)}) for device in sim.gpus}
        models = [{"model": served.model.id, "versions": list(served.lifecycle.lives)} for served in sim.served_models]
        return {"type": "hello", "t_ns": sim.kernel.now, "scenario": sim.scenario.metadata.name,
                "gpus": list(sim.pools), "streams": streams, "faults": sorted(sim.fault_actions), "models": models}

    def poll(self, now: int | None = None, sample: bool = True) -> list[dict[str, Any]]:
        """The records since the previous poll, oldest first, then a `sample` (when asked) at `now`."""
        sim = self.sim
        timeline = sim.timeline
        out: list[dict[str, Any]] = []
        if not self._hello:
            out.append(self.hello())
            self._hello = True
        for event in timeline.recent_events(self._seen_events):
            kind = event[1]
            if kind not in SKIPPED:
                out.append({"t_ns": event[0], "type": kind, **dict(zip(RECORD_FIELDS[kind], event[2:]))})
        self._seen_events = timeline.added_events
        out.extend(self._steps())
        if sample:
            out.append(self.sample(sim.kernel.now if now is None else now))
        return out

    def _steps(self) -> list[dict[str, Any]]:
        timeline = self.sim.timeline
        runs = timeline.recent_steps(self._seen_steps)
        self._seen_steps = timeline.added_steps
        latest: dict[str, list[dict[str, Any]]] = {}
        for run in runs:
            kept = latest.setdefault(run.replica, [])
            first = max(len(run.starts) - MAX_STEPS, 0)
            for i in range(first, len(run.starts)):
                kept.append({"t_ns": int(run.starts[i]), "type": "step", "end_ns": int(run.ends[i]),
                             "replica": run.replica, "gpus": list(run.gpus), "stream": run.stream,
                             "requests": int(run.requests[i]), "prefill_tokens": int(run.prefill_tokens[i]),
                             "decode_tokens": int(run.decode_tokens[i]), "kv_used_blocks": int(run.kv_used[i]),
                             "kv_total_blocks": run.kv_total})
            del kept[:-MAX_STEPS]
        return sorted((s for steps in latest.values() for s in steps), key=lambda s: s["t_ns"])

    def sample(self, now: int) -> dict[str, Any]:
        """The state the timeline does not carry, at `now`."""
        sim = self.sim
        queues: dict[str, dict[str, Any]] = {}
        for device, gpu in sim.gpus.items():
            compute = gpu.compute
            waiting: dict[str, int] = {}
            for _, _, job in compute.waiting:
                waiting[job.stream] = waiting.get(job.stream, 0) + 1
            running: dict[str, int] = {}
            for job in compute.active:
                running[job.stream] = running.get(job.stream, 0) + 1
            queues[device] = {"waiting": waiting, "running": running, "preemptions": compute.preempted}
        engines: dict[str, dict[str, Any]] = {}
        states: list[dict[str, Any]] = []
        for served in sim.served_models:
            lifecycle = served.lifecycle
            for version, life in lifecycle.lives.items():
                states.append({"model": served.model.id, "version": version, "state": life.state.value,
                               "since_ns": life.since, "active": version == lifecycle.active})
            for engine in served.engines:
                kv = getattr(engine, "kv", None)
                engines[str(getattr(engine, "name", id(engine)))] = {
                    "waiting": int(getattr(engine, "waiting", 0)), "outstanding": int(engine.outstanding),
                    "gpus": list(getattr(engine, "gpus", ())),
                    "kv_used": int(kv.used) if kv is not None else 0, "kv_total": int(kv.total) if kv is not None else 0,
                    "dead": getattr(engine, "dead", "") or "",
                }
        return {"type": "sample", "t_ns": now, "pools": {d: pool_sample(p) for d, p in sim.pools.items()},
                "queues": queues, "engines": engines, "models": states}
