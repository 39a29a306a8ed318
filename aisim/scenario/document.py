"""The scenario document: `apiVersion: aisim/v1`, `kind: Scenario`, and its sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Spec
from .faults import Fault
from .hardware import Gpu
from .models import Model
from .plan import Plan
from .server import Server, Simulation, Telemetry
from .workload import PriorityClass, Workload

API_VERSION = "aisim/v1"
SCHEMA_ID = "https://aisim.dev/schema/scenario-v1.json"


class Metadata(Spec):
    """Name and description of the scenario."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """Short name, shown in reports."""
    description: str = ""
    """What the scenario shows."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Free-form labels."""


class Scenario(Spec):
    """An aisim scenario: GPUs, models, faults, a workload, server and telemetry settings."""

    api_version: Literal["aisim/v1"]
    """Language version; this aisim understands `aisim/v1`."""
    kind: Literal["Scenario"]
    """Document kind."""
    metadata: Metadata
    """Name and description."""
    seed: int = Field(0, ge=0, le=2**63 - 1)
    """Seed of every random draw; same seed, same run."""
    gpus: list[Gpu] = Field(default_factory=list)
    """Simulated GPUs."""
    models: list[Model] = Field(default_factory=list)
    """Served models (besides those of `server.modelRepository`); a scenario needs at least one."""
    priority_classes: list[PriorityClass] = Field(default_factory=list)
    """Request priority classes."""
    faults: list[Fault] = Field(default_factory=list)
    """Scheduled faults."""
    workload: Workload | None = None
    """Requests for headless runs (`aisim run`)."""
    server: Server = Server()
    """Server settings (`aisim serve`)."""
    telemetry: Telemetry = Telemetry()
    """GPU telemetry settings."""
    simulation: Simulation = Simulation()
    """Run settings: stop time, kernel detail, timeline options."""
    plan: Plan | None = None
    """Capacity planning (`aisim plan`): search space, SLOs, goal, prices."""

    def gpu_devices(self) -> dict[str, Gpu]:
        """Every device id (and every multi-device entry's id) mapped to its GPU entry."""
        devices: dict[str, Gpu] = {}
        for gpu in self.gpus:
            devices[gpu.id] = gpu
            devices.update({device: gpu for device in gpu.device_ids()})
        return devices

    def model_named(self, name: str) -> Model | None:
        """The model a client reaches with `name` (an id or an alias)."""
        return next((m for m in self.models if name in m.names), None)
