"""What API servers mirror of the engine core's state for the routes they serve themselves: each model's versions'
lifecycle states and serving version (KServe inference picks a READY one), the loaded LoRA adapters, each KServe
model's batching and instances (a repository load's config override changes them), the registered system
shared-memory regions (an API server maps them too, to read inputs from them and write outputs into them), and the
fleet's start-up instant, sleep level and engine id (`FleetRuntime.digest`).

The engine core takes a `digest` of its own; an API server `apply`s it to its copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...engine import Simulation, State
from ...fleet.runtime import FleetRuntime
from ...scenario.models import KServe
from ..kserve.shared_memory import SharedMemory
from ..kserve.tensors import KServeError


@dataclass
class Mirror:
    """The parts of one process's state that the engine core's digest describes."""

    sim: Simulation
    lora_adapters: dict[str, dict[str, str]]
    fleet: FleetRuntime
    shared_memory: SharedMemory

    def digest(self) -> dict[str, Any]:
        """This process's state, as the API servers mirror it."""
        served_models = self.sim.served_models
        models = {served.model.id: [served.lifecycle.active,
                                    {v: [life.state.value, life.reason] for v, life in served.lifecycle.lives.items()}]
                  for served in served_models}
        kserve = {served.model.id: served.model.kserve.model_dump(mode="json", by_alias=True)
                  for served in served_models if served.model.kserve is not None}
        return {"models": models, "lora": self.lora_adapters, "kserve": kserve, "shm": self.shared_memory.status(None),
                "fleet": self.fleet.digest()}

    def apply(self, digest: dict[str, Any]) -> None:
        """Take the engine core's `digest` as this process's own."""
        for model_id, (active, lives) in digest["models"].items():
            served = self.sim.models.get(model_id)
            if served is None:
                continue
            served.lifecycle.active = active
            for version, (value, reason) in lives.items():
                life = served.lifecycle.lives.get(version)
                if life is not None:
                    life.state, life.reason = State(value), reason
        self.lora_adapters.clear()
        self.lora_adapters.update(digest["lora"])
        for model_id, config in digest.get("kserve", {}).items():
            served = self.sim.models.get(model_id)
            if served is not None and (served.model.kserve is None or
                                       served.model.kserve.model_dump(mode="json", by_alias=True) != config):
                served.reconfigure(KServe.model_validate(config))
        self._map_regions(digest.get("shm", []))
        self.fleet.mirror(digest["fleet"])

    def _map_regions(self, regions: list[dict[str, Any]]) -> None:
        """Register (map) the engine core's shared-memory regions here too; unmap those it no longer has."""
        shared = self.shared_memory
        wanted = {r["name"]: r for r in regions}
        for name, held in list(shared.regions.items()):
            if wanted.get(name) != held.status():
                shared.unregister(name)
        for name, region in wanted.items():
            if name not in shared.regions:
                try:
                    shared.register(name, region["key"], region["offset"], region["byte_size"])
                except KServeError:  # gone meanwhile: an inference naming it gets the engine's 404 then
                    pass
