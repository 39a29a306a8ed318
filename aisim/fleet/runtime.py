"""A server's fleet machinery at run time: the KV-event publishers attached to its engine replicas (the side
that owns the simulation, so in a split server they live in the engine core), its data-parallel ranks, its
prefill/decode role and its simulated start-up and sleep."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from typing import Any

from ..engine import Replica, ServedModel, Simulation
from ..scenario import Scenario
from ..scenario.fleet import Fleet
from .data_parallel import simulated_vllm
from .errors import FleetError


def replicas_of(served: ServedModel) -> list[Replica]:
    """The vLLM engine replicas (ranks, in order) of a served model's serving version."""
    return [e for e in served.versions.get(served.lifecycle.active, []) if isinstance(e, Replica)]


class FleetRuntime:
    """What `ServerState` holds for the fleet: publishers, ranks, the KV-transfer role, start-up and sleep.

    `engine`: whether this process runs the engine (the single process, or a split server's engine core). An
    API-server process's runtime starts no publishers and no prefill/decode router (the engine core's do that
    work) and mirrors the engine core's start-up instant, sleep level and engine id (`digest`, `mirror`)."""

    def __init__(self, scenario: Scenario, sim: Simulation, pod_name: str | None = None, speed: float = 1.0,
                 engine: bool = True) -> None:
        self.config: Fleet = scenario.server.fleet
        self.sim = sim
        self.speed = speed
        self.started = time.monotonic()
        self.sleeping = 0
        """The sleep level (0: awake)."""
        self._awake: asyncio.Event | None = None
        self.publishers: list[Any] = []
        self.sources: list[Any] = []
        simulated = [sim.models[m.id] for m in scenario.models if simulated_vllm(m)]
        self.simulated = list(dict.fromkeys(simulated))
        transfer = self.config.kv_transfer
        if transfer and transfer.engine_id:
            self.engine_id = transfer.engine_id
        elif pod_name:  # a pod keeps its id across restarts, and no two pods share one
            self.engine_id = str(uuid.UUID(hashlib.sha256(pod_name.encode()).hexdigest()[:32]))
        else:
            self.engine_id = str(uuid.uuid4())
        """vLLM's engine id (a UUID there, fresh per engine): what a prefill pod returns as `remote_engine_id`. Not
        part of the simulation (like response ids), so not from the seed."""
        events = self.config.kv_events
        self.publishing = events is not None and events.enabled and events.publisher == "zmq"
        """Whether the engine's KV-cache events go out (ZeroMQ publishers, one per rank)."""
        if engine and self.publishing:
            self._publish(events)
        if engine and transfer is not None and transfer.prefill_ranks:
            self._split(transfer)

    def _split(self, transfer: Any) -> None:
        """Route the simulated model's requests through a prefill pool and a decode pool of its ranks."""
        from ..engine import PdRouter

        if transfer.role != "both":
            raise FleetError(f"server.fleet.kvTransfer.prefillRanks needs role both, not {transfer.role}")
        sim = self.sim
        for served in self.simulated:
            replicas = replicas_of(served)
            if not 0 < transfer.prefill_ranks < len(replicas):
                raise FleetError(f"server.fleet.kvTransfer.prefillRanks {transfer.prefill_ranks} leaves no decode "
                                 f"rank: model {served.model.id!r} has {len(replicas)} (server.fleet.dataParallelSize)")
            plan = served.plans[0]
            block_ns = plan.block_size * plan.kv_bytes_per_token * 10**9 // transfer.link_bandwidth

            def next_id() -> int:
                sim.submitted += 1
                return sim.submitted - 1

            served.routers[served.lifecycle.active] = PdRouter(replicas, transfer.prefill_ranks, block_ns,
                                                               transfer.link_latency, next_id)

    def _publish(self, events: Any) -> None:
        from .kv_events import (  # imported here: pyzmq and msgspec only when events are on
            Publisher,
            Source,
        )

        if len(self.simulated) != 1:
            raise FleetError(f"server.fleet.kvEvents needs exactly one simulated vLLM model (a vLLM server serves "
                             f"one), this scenario has {len(self.simulated)}")
        for rank, replica in enumerate(replicas_of(self.simulated[0])):
            publisher = Publisher(events, rank)
            source = Source(replica.kv, publisher, events)
            source.attach(replica)
            self.publishers.append(publisher)
            self.sources.append(source)

    # -- state -----------------------------------------------------------------------------

    def ready(self) -> bool:
        """Whether the simulated start-up is over (in simulated seconds: `--speed` shortens it too)."""
        return (time.monotonic() - self.started) * self.speed >= self.config.startup.time / 1e9

    def sleep(self, level: int) -> None:
        self.sleeping = level
        if self._awake is not None:
            self._awake.clear()

    def wake(self) -> None:
        self.sleeping = 0
        if self._awake is not None:
            self._awake.set()

    async def awake(self) -> None:
        """Return once the engines are awake (at once when they are)."""
        if not self.sleeping:
            return
        if self._awake is None:
            self._awake = asyncio.Event()
        await self._awake.wait()

    def digest(self) -> dict[str, Any]:
        """What an API-server process mirrors (`mirror`): start-up instant (the monotonic clock is the system's),
        sleep level and engine id."""
        return {"started": self.started, "sleeping": self.sleeping, "engine_id": self.engine_id}

    def mirror(self, digest: dict[str, Any]) -> None:
        """Take the engine core's `digest` as this process's own (a request waiting for the wake-up goes on)."""
        self.started, self.engine_id = digest["started"], digest["engine_id"]
        if digest["sleeping"] != self.sleeping:
            if digest["sleeping"]:
                self.sleep(digest["sleeping"])
            else:
                self.wake()

    def ranks(self, served: ServedModel) -> int:
        return len(replicas_of(served)) or 1

    @property
    def wants_token_ids(self) -> bool:
        """Whether requests carry their prompt's token ids (the KV events and the KV transfer hash them)."""
        return self.publishing or self.config.kv_transfer is not None

    def flush(self) -> None:
        """Publish what the caches did outside a step (a reset, received blocks)."""
        for source in self.sources:
            source.flush()

    def close(self) -> None:
        for source in self.sources:
            source.flush()
        for publisher in self.publishers:
            publisher.close()
        self.publishers.clear()
        self.sources.clear()
