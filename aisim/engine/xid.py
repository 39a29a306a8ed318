"""What an XID error does to the work on its GPU (`aisim/telemetry/xid.py` says which effect each code has).

Engines that die go the way an out-of-memory crash takes them (`Replica.kill`): their requests fail
with vLLM's `EngineDeadError`, their memory is freed, their log shows the driver's XID line, and a
model whose serving engines are all dead is UNAVAILABLE (vLLM's `/health` answers 503). A model
that keeps some engines, or whose GPU only needs draining or a reset, goes DEGRADED: it still serves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..telemetry.sampler import GpuTelemetry
from ..telemetry.xid import Xid
from .deployment import ServedModel
from .gpu import GpuDevice
from .kernel import Kernel
from .lifecycle import State
from .timeline import Timeline


def _owners(models: Iterable[ServedModel]) -> dict[int, tuple[ServedModel, str]]:
    """Each engine (by identity) with its model and version."""
    return {id(engine): (served, version) for served in models
            for version, engines in served.versions.items() for engine in engines}


def _tensor_parallel(user: Any) -> bool:
    return len(getattr(user, "gpus", ())) > 1


def apply_xid(code: int, device: str, gpu: GpuDevice, models: Iterable[ServedModel], kernel: Kernel,
              timeline: Timeline, telemetry: GpuTelemetry | None) -> list[str]:
    """An XID `code` happens on `device` now; returns the names of the engines it killed."""
    xid = Xid(code)
    now = kernel.now
    served_models = list(models)
    owners = _owners(served_models)
    if telemetry is not None:
        telemetry.record_xid(device, code)
    bus = telemetry.bus_id(device) if telemetry is not None else "00000000:00:00.0"
    log = xid.kernel_log(bus)
    users = list(gpu.placed)
    if xid.effect in ("gpu_lost", "kill"):
        victims = users
    elif xid.effect == "nvlink":
        victims = [u for u in users if _tensor_parallel(u)]
    else:
        victims = []
    killed = []
    for user in victims:
        kill = getattr(user, "kill", None)
        if kill is not None:
            kill(log)
            killed.append(str(getattr(user, "name", "")))
    timeline.add(now, "xid", device, code, xid.message, xid.effect, ",".join(killed))
    if xid.effect == "none":
        return killed
    affected = {id(owners[id(u)][0]): owners[id(u)] for u in users if id(u) in owners}
    for served, version in affected.values():
        engines = served.versions.get(version, [])
        alive = [e for e in engines if not getattr(e, "dead", "")]
        life = served.lifecycle.lives[version]
        if alive and life.state is State.READY:
            lost = len(engines) - len(alive)
            why = f"{lost} of {len(engines)} engines died" if lost else f"its GPU {device} needs attention"
            action = f" ({xid.action})" if xid.action else ""
            served.lifecycle.move(version, State.DEGRADED, now, f"XID {code} on {device}: {xid.message}{action}; {why}")
    return killed
