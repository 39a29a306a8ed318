"""The engine: a scenario compiled onto a discrete-event kernel (GPUs, model replicas and their schedulers, KV caches,
workloads, faults), run on the virtual clock (`aisim run`, `aisim plan`) or paced against the wall clock for a
server (`Live`).

This is its front door: the names below are what the other packages (`api`, `fleet`, `tui`, `plan`, `replay`, the
command line) may use, and they import nothing else from the engine; its modules are its own to rearrange. Each
name loads its module on first use (PEP 562), so `import aisim.engine` costs nothing and `from aisim.engine import
Arrival` loads the workload module, not the whole engine.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own constant, without importing typing (the front door costs nothing)
if TYPE_CHECKING:
    from .api_faults import ApiFault, FaultBook
    from .api_faults import Context as FaultContext
    from .batcher import QUEUE_FULL, TritonEngine
    from .client_faults import unreachable as unreachable_faults
    from .client_report import write_inference_perf
    from .costmodel import Efficiency
    from .costmodel.calibration import efficiency as calibrated_efficiency
    from .deployment import ServedModel, load_failure
    from .feed import Feed
    from .kernel import URGENT, RealTimeClock, VirtualClock
    from .kv import SAMPLED_TOKEN, KvCache
    from .lifecycle import EDGES, State, load_time_ns
    from .live import END_EVENTS, Call, Live
    from .memory import plan as memory_plan
    from .pd_router import PdRouter
    from .pool import format_size
    from .pool.replay import ALLOCATORS, replay_all
    from .pool.snapshot import load_snapshot
    from .replica import ENGINE_DEAD, Replica, StepReport
    from .report import build_report
    from .request import Request
    from .sampling import Draws, sample
    from .schedule_trace import Limits as ScheduleLimits
    from .schedule_trace import read_trace as read_schedule
    from .schedule_trace import replay as replay_schedule
    from .served import Engine
    from .simulation import EndlessWorkload, Simulation
    from .steady import Rules as SteadyRules
    from .steady import run_steady
    from .workload import Arrival, SourceFeed, timestamp_ns

_EXPORTS: dict[str, tuple[str, str]] = {
    # a scenario run on the virtual clock, and its reports
    "Simulation": ("simulation", "Simulation"),
    "EndlessWorkload": ("simulation", "EndlessWorkload"),
    "build_report": ("report", "build_report"),
    "SteadyRules": ("steady", "Rules"),
    "run_steady": ("steady", "run_steady"),
    "write_inference_perf": ("client_report", "write_inference_perf"),
    "unreachable_faults": ("client_faults", "unreachable"),
    "VirtualClock": ("kernel", "VirtualClock"),
    "URGENT": ("kernel", "URGENT"),
    # requests: arrivals, the workload's sources, the engine's own record of one
    "Arrival": ("workload", "Arrival"),
    "SourceFeed": ("workload", "SourceFeed"),
    "timestamp_ns": ("workload", "timestamp_ns"),
    "Request": ("request", "Request"),
    "Draws": ("sampling", "Draws"),
    "sample": ("sampling", "sample"),
    # API faults: the fault book servers and simulated clients pick from
    "FaultBook": ("api_faults", "FaultBook"),
    "FaultContext": ("api_faults", "Context"),
    "ApiFault": ("api_faults", "ApiFault"),
    # the simulation on the wall clock, for servers and the TUI
    "Live": ("live", "Live"),
    "Call": ("live", "Call"),
    "END_EVENTS": ("live", "END_EVENTS"),
    "RealTimeClock": ("kernel", "RealTimeClock"),
    "Feed": ("feed", "Feed"),
    # served models as the servers read them: lifecycles, engines, replicas, KV caches
    "ServedModel": ("deployment", "ServedModel"),
    "load_failure": ("deployment", "load_failure"),
    "State": ("lifecycle", "State"),
    "EDGES": ("lifecycle", "EDGES"),
    "load_time_ns": ("lifecycle", "load_time_ns"),
    "Engine": ("served", "Engine"),
    "Replica": ("replica", "Replica"),
    "StepReport": ("replica", "StepReport"),
    "ENGINE_DEAD": ("replica", "ENGINE_DEAD"),
    "TritonEngine": ("batcher", "TritonEngine"),
    "QUEUE_FULL": ("batcher", "QUEUE_FULL"),
    "KvCache": ("kv", "KvCache"),
    "SAMPLED_TOKEN": ("kv", "SAMPLED_TOKEN"),
    "PdRouter": ("pd_router", "PdRouter"),
    # memory: a model's plan on a GPU, allocator models replayed on a PyTorch snapshot
    "memory_plan": ("memory", "plan"),
    "format_size": ("pool", "format_size"),
    "ALLOCATORS": ("pool.replay", "ALLOCATORS"),
    "replay_all": ("pool.replay", "replay_all"),
    "load_snapshot": ("pool.snapshot", "load_snapshot"),
    # the scheduler alone on a token trace (`aisim schedule`)
    "ScheduleLimits": ("schedule_trace", "Limits"),
    "read_schedule": ("schedule_trace", "read_trace"),
    "replay_schedule": ("schedule_trace", "replay"),
    # the cost model's constants (`aisim calibrate`)
    "Efficiency": ("costmodel", "Efficiency"),
    "calibrated_efficiency": ("costmodel.calibration", "efficiency"),
}

__all__ = [
    "ALLOCATORS",
    "EDGES",
    "END_EVENTS",
    "ENGINE_DEAD",
    "QUEUE_FULL",
    "SAMPLED_TOKEN",
    "URGENT",
    "ApiFault",
    "Arrival",
    "Call",
    "Draws",
    "Efficiency",
    "EndlessWorkload",
    "Engine",
    "FaultBook",
    "FaultContext",
    "Feed",
    "KvCache",
    "Live",
    "PdRouter",
    "RealTimeClock",
    "Replica",
    "Request",
    "ScheduleLimits",
    "ServedModel",
    "Simulation",
    "SourceFeed",
    "State",
    "SteadyRules",
    "StepReport",
    "TritonEngine",
    "VirtualClock",
    "build_report",
    "calibrated_efficiency",
    "format_size",
    "load_failure",
    "load_snapshot",
    "load_time_ns",
    "memory_plan",
    "read_schedule",
    "replay_all",
    "replay_schedule",
    "run_steady",
    "sample",
    "timestamp_ns",
    "unreachable_faults",
    "write_inference_perf",
]


def __getattr__(name: str) -> object:
    """A front-door name, its module loaded on first use."""
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(__import__(f"{__name__}.{module}", fromlist=[attribute]), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
