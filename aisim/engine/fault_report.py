"""The report's `faults` section: for every fault of the scenario, whether it fired, when, on what, and with what
effect, read from the timeline's records of the run.

Each entry: `kind`; `fired` (how many times it acted: per request for an API fault, per start for the others);
`first_s` / `last_s`; `on` (the models, GPUs or engine replicas it hit); `effects` (what it did, counted by
description: what the client saw, the memory the other process took, the XID's effect, the injected value).
A device fault also gives `requests_failed`, the requests of the models on its GPUs that failed from its first
start on (an OOM or an XID kills what the engine held); a slowdown `requests_slowed`, the requests of its
replicas' models in flight while it lasted. An API fault no simulated client can meet carries `unreachable`,
the reason (`client_faults.unreachable`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..scenario.faults import OutOfMemory, SlowDown, Xid
from .api_faults import API_FAULTS
from .client_faults import unreachable
from .request import Request
from .simulation import Simulation

NS = 1e9


def faults_section(sim: Simulation) -> dict[str, dict[str, Any]]:
    """One entry per fault of the scenario, by name, in document order (see the module docstring)."""
    fired: dict[str, list[tuple[int, str, str]]] = {}
    ends: dict[str, int] = {}
    xid_effects = {(event[0], event[2]): f"{event[5]}; killed {event[6] or 'nothing'}" for event in sim.timeline.events
                   if event[1] == "xid"}
    for event in sim.timeline.events:
        if event[1] == "fault":
            time_ns, _, name, kind, target, detail = event
            if kind.endswith("_end"):
                ends[name] = time_ns
                continue
            if kind == "xid":
                detail = f"{detail}: {xid_effects.get((time_ns, target), '')}"
            for one in str(target).split(",") if kind in ("slowdown", "oom") else [target]:
                fired.setdefault(name, []).append((time_ns, one, detail))
        elif event[1] == "dcgm_inject":
            time_ns, _, gpu, field, value, until_ns, source = event
            span = f" until {until_ns / NS:g} s" if until_ns is not None else ""
            fired.setdefault(source, []).append((time_ns, gpu, f"{field} = {value:g}{span}"))
    out_of_reach = unreachable(sim)
    section: dict[str, dict[str, Any]] = {}
    for index, fault in enumerate(sim.scenario.faults):
        name = fault.name or f"fault-{index}"
        hits = fired.get(name, [])
        entry: dict[str, Any] = {
            "kind": fault.kind,
            "fired": _firings(fault, hits),
            "first_s": round(hits[0][0] / NS, 6) if hits else None,
            "last_s": round(hits[-1][0] / NS, 6) if hits else None,
            "on": sorted({target for _, target, _ in hits}),
            "effects": dict(sorted(Counter(detail for _, _, detail in hits).items())),
        }
        if isinstance(fault, API_FAULTS):
            if name in out_of_reach:
                entry["unreachable"] = out_of_reach[name]
        elif isinstance(fault, SlowDown):
            entry["requests_slowed"] = _slowed(sim, hits, ends.get(name))
        elif isinstance(fault, (OutOfMemory, Xid)) and hits:
            entry["requests_failed"] = _failed_after(sim, {target for _, target, _ in hits}, hits[0][0])
        section[name] = entry
    return section


def _firings(fault: object, hits: list[tuple[int, str, str]]) -> int:
    """How many times a fault acted: once per request for an API fault, once per start (on every GPU at once)
    for a device fault."""
    if isinstance(fault, API_FAULTS):
        return len(hits)
    return len({time_ns for time_ns, _, _ in hits})


def _requests_on(sim: Simulation, devices: set[str]) -> list[Request]:
    """The requests of the models with an engine on one of `devices` (GPU device ids)."""
    return [r for served in sim.served_models
            if any(devices & set(getattr(engine, "gpus", ())) for engine in served.engines) for r in served.requests]


def _failed_after(sim: Simulation, devices: set[str], start_ns: int) -> int:
    return sum(r.outcome == "failed" and r.finished_at >= start_ns for r in _requests_on(sim, devices))


def _slowed(sim: Simulation, hits: list[tuple[int, str, str]], end_ns: int | None) -> int:
    """Requests of the slowed replicas' models that were in flight between the first start and the end."""
    if not hits:
        return 0
    replicas = {target for _, target, _ in hits}
    start, end = hits[0][0], sim.kernel.now if end_ns is None else end_ns
    requests = [r for served in sim.served_models if any(getattr(e, "name", "") in replicas for e in served.engines)
                for r in served.requests]
    return sum(r.arrival < end and (r.finished_at < 0 or r.finished_at > start) for r in requests)

