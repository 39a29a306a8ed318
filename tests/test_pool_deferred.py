"""Deferred round trips (`aisim/engine/pool/deferred.py`) change nothing: the same run with them and without
them gives the same allocator counters, memory maps and timeline, also to code that looks at the pools
while steps are in flight (which makes a deferred step's tensors real first), and with two replicas on one
GPU (`priorities-off`: one replica's step ending must not end the other's deferred step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aisim.engine import gpu_memory
from aisim.engine.pool import deferred
from aisim.engine.pool.caching import CachingAllocator
from aisim.engine.simulation import Simulation
from aisim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


def pools(sim: Simulation) -> list[CachingAllocator]:
    found = {id(pool): pool for served in sim.served_models for engine in served.engines
             if getattr(engine, "memory", None) is not None for _, pool in engine.memory.pools}
    return [pool for pool in found.values() if isinstance(pool, CachingAllocator)]


def run(name: str, probe_every_ns: int | None) -> tuple[list[Any], list[Any], list[dict[str, Any]]]:
    """The run's final counters and memory maps, what probes saw mid-run, and its timeline."""
    sim = Simulation(load_scenario(SCENARIOS / f"{name}.yaml"), SCENARIOS)
    seen: list[Any] = []
    if probe_every_ns:
        def probe() -> None:  # reads in the middle of steps: a deferred step must look allocated
            for pool in pools(sim):
                seen.append((sim.kernel.now, pool.memory_allocated(), pool.memory_stats(), pool.state()))
            if sim.kernel.now < 30_000_000_000:
                sim.kernel.after(probe_every_ns, probe)
        sim.kernel.after(probe_every_ns, probe)
    sim.run()
    final = [(pool.memory_stats(), pool.state(), pool.ops) for pool in pools(sim)]
    return final, seen, sim.timeline.records()


@pytest.mark.parametrize(("name", "probe_every_ns"), [("default", None), ("default", 7_777_777), ("priorities-off", None)],
                         ids=["unobserved", "observed", "shared-gpu"])
def test_deferred_round_trips_give_the_same_pools_and_timeline(monkeypatch: pytest.MonkeyPatch, name: str,
                                                              probe_every_ns: int | None) -> None:
    applied, settled = [], []
    apply, materialize = deferred.Trip.apply, gpu_memory.ReplicaMemory.materialize
    monkeypatch.setattr(deferred.Trip, "apply", lambda trip, pool: (applied.append(1), apply(trip, pool)))
    monkeypatch.setattr(gpu_memory.ReplicaMemory, "materialize",
                        lambda memory, pool, eager: (settled.append(1), materialize(memory, pool, eager)))
    with_trips = run(name, probe_every_ns)
    assert applied, "no round trip was deferred: the test checks nothing"
    # probes mid-step, and the other replica's allocations on a shared GPU, make deferred steps real
    assert bool(settled) == (bool(probe_every_ns) or name == "priorities-off")
    monkeypatch.setattr(CachingAllocator, "can_defer", lambda self: False)
    without = run(name, probe_every_ns)
    assert with_trips[0] == without[0]
    assert with_trips[1] == without[1]
    assert with_trips[2] == without[2]
