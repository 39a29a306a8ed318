"""Triton's Prometheus metrics (`GET /metrics` on the metrics port), written as Triton writes them.

Triton's (`docs/user_guide/metrics.md` of triton-inference-server/server; triton-inference-server/core
`src/metrics.cc`): per-model counters with `model` and `version` labels (and `gpu_uuid` when the model's instances are
on one GPU), failures by `reason` (all four series from the start), durations in microseconds, the pending-request
gauge, each loaded version's load time, per-GPU gauges with only `gpu_uuid`, and the host's pinned-memory pool and CPU
gauges (no labels). Counters carry no `_total` suffix and no `_created` series, integral values print without a decimal
point and label keys are sorted: prometheus_client renames and reformats all of that, so the text is written here by
hand (what prometheus-cpp's text serializer writes).
"""

from __future__ import annotations

from collections.abc import Iterator

import tornado.web

from ...engine import ServedModel, TritonEngine, load_time_ns
from ..state import ServerState

PER_MODEL = [
    ("nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes"),
    ("nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_exec_count", "counter", "Number of model executions performed (does not include cached requests)"),
    ("nv_inference_request_duration_us", "counter",
     "Cumulative inference request duration in microseconds (includes cached requests)"),
    ("nv_inference_queue_duration_us", "counter",
     "Cumulative inference queuing duration in microseconds (includes cached requests)"),
    ("nv_inference_compute_input_duration_us", "counter",
     "Cumulative compute input duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_infer_duration_us", "counter",
     "Cumulative compute inference duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_output_duration_us", "counter",
     "Cumulative inference compute output duration in microseconds (does not include cached requests)"),
    ("nv_inference_pending_request_count", "gauge", "Instantaneous number of pending requests awaiting execution per-model."),
]
PER_GPU = [
    ("nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)"),
    ("nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes"),
    ("nv_gpu_memory_used_bytes", "gauge", "GPU used memory, in bytes"),
    ("nv_gpu_power_usage", "gauge", "GPU power usage in watts"),
    ("nv_gpu_power_limit", "gauge", "GPU power management limit in watts"),
    ("nv_energy_consumption", "counter", "GPU energy consumption in joules since the Triton Server started"),
]
LOAD_DURATION = ("nv_model_load_duration_secs", "gauge", "Model load time in seconds")
"""Triton's help text for it is unverified."""
PINNED_POOL_BYTES = 268435456
"""Triton's default pinned memory pool (`--pinned-memory-pool-byte-size`, 256 MiB)."""
HOST_MEMORY_BYTES = 64 * 2**30
"""The host's RAM. aisim does not model the host, so this is a documented stand-in (a 64 GiB server)."""
HOST = [
    ("nv_pinned_memory_pool_total_bytes", "gauge", "Pinned memory pool total memory size, in bytes", PINNED_POOL_BYTES),
    ("nv_pinned_memory_pool_used_bytes", "gauge", "Pinned memory pool used memory size, in bytes", 0),
    ("nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]", 0),
    ("nv_cpu_memory_total_bytes", "gauge", "CPU total memory (RAM), in bytes", HOST_MEMORY_BYTES),
    ("nv_cpu_memory_used_bytes", "gauge", "CPU used memory (RAM), in bytes", 0),
]
"""Host gauges: the simulation has no host CPU or RAM, and stages no tensors in pinned memory between
scrapes, so these are constants: Triton's default pool size, the stand-in RAM size above, and 0
for what is used (the pool's use and the CPU's load are not modelled)."""
REASONS = ("OTHER", "BACKEND", "CANCELED", "REJECTED")


def number(value: float) -> str:
    """prometheus-cpp's text: integral values without a decimal point, others at full precision."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def labels(**pairs: str) -> str:
    return "{" + ",".join(f'{key}="{value}"' for key, value in sorted(pairs.items())) + "}"


def exposition(state: ServerState, gauges: dict[str, tuple[float, float, int]]) -> str:
    """The whole metrics text; `gauges` holds each GPU's (utilisation, power W, energy mJ) (`sample_gpus`)."""
    return "".join(_lines(state, gauges))


def _lines(state: ServerState, gauges: dict[str, tuple[float, float, int]]) -> Iterator[str]:
    engines = [(served.model.id, version, engines[0]) for served in state.sim.served_models
               for version, engines in served.versions.items() if engines and isinstance(engines[0], TritonEngine)]
    for name, kind, help_text in PER_MODEL:
        yield f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
        for model, version, engine in engines:
            devices = {i.device.uuid for i in engine.instances}
            key = {"model": model, "version": version, **({"gpu_uuid": next(iter(devices))} if len(devices) == 1 else {})}
            stats = engine.triton
            if name == "nv_inference_request_failure":
                for reason in REASONS:
                    count = stats.failures.get(reason, 0)
                    yield f"{name}{labels(**key, reason=reason)} {count}\n"
                continue
            value = {
                "nv_inference_request_success": stats.success.count,
                "nv_inference_count": stats.inference_count,
                "nv_inference_exec_count": stats.execution_count,
                "nv_inference_request_duration_us": (stats.success.ns + stats.fail.ns) // 1000,
                "nv_inference_queue_duration_us": stats.queue.ns // 1000,
                "nv_inference_compute_input_duration_us": stats.compute_input.ns // 1000,
                "nv_inference_compute_infer_duration_us": stats.compute_infer.ns // 1000,
                "nv_inference_compute_output_duration_us": stats.compute_output.ns // 1000,
                "nv_inference_pending_request_count": engine.pending,
            }[name]
            yield f"{name}{labels(**key)} {number(value)}\n"
    name, kind, help_text = LOAD_DURATION
    yield f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
    for served in state.sim.served_models:
        for version in served.versions:
            yield f"{name}{labels(model=served.model.id, version=version)} {number(load_seconds(state, served, version))}\n"
    for name, kind, help_text, host_value in HOST:
        yield f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n{name} {number(host_value)}\n"
    for name, kind, help_text in PER_GPU:
        yield f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
        for device_id, device in state.sim.gpus.items():
            pool = state.sim.pools[device_id]
            utilisation, power, energy = gauges[device_id]
            gauge: float = {
                "nv_gpu_utilization": utilisation,
                "nv_gpu_memory_total_bytes": pool.device.capacity,
                "nv_gpu_memory_used_bytes": pool.device.capacity - pool.device.free_bytes(),
                "nv_gpu_power_usage": power,
                "nv_gpu_power_limit": device.power.tdp_mw / 1000,
                "nv_energy_consumption": energy / 1000,
            }[name]
            yield f"{name}{labels(gpu_uuid=device.uuid)} {number(gauge)}\n"


def load_seconds(state: ServerState, served: ServedModel, version: str) -> float:
    """How long the version's simulated load took (LOADING lasts this long: `engine.lifecycle.load_time_ns`)."""
    placement = served.model.placement
    if served.mock or not served.plans or placement is None:
        return 0.0
    declared = next(v for v in served.model.versions if v.version == version)
    return load_time_ns(served.model, declared, state.sim.devices[placement.gpus[0]].resolved()) / 1e9


def sample_gpus(state: ServerState) -> dict[str, tuple[float, float, int]]:
    """Each GPU's utilisation and mean power since the previous scrape, and its energy since start,
    from the device's activity and the telemetry power model (`aisim/telemetry/power.py`)."""
    now = state.engine.now()
    gauges = {}
    for device_id, device in state.sim.gpus.items():
        busy = device.activity(now).busy_ns
        before_busy, before_time = state.kserve.scrapes.get(device_id, (0, 0))
        span = now - before_time
        utilisation = min(max((busy - before_busy) / span, 0.0), 1.0) if span > 0 else 0.0
        gauges[device_id] = (utilisation, device.power.power_w(utilisation), device.power.energy_mj(now, busy))
        state.kserve.scrapes[device_id] = (int(busy), now)
    return gauges


class MetricsHandler(tornado.web.RequestHandler):
    """`GET /metrics` in Triton's dialect: no OpenAI headers (request id, API version) on the answer."""

    state: ServerState
    runs_in = "engine_core"

    def initialize(self) -> None:
        self.state = self.settings["state"]

    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(exposition(self.state, sample_gpus(self.state)))

    head = get
    """`HEAD /metrics`: GET's status and headers (its Content-Length too), no body (Tornado drops it), as
    Prometheus' and probes' HEAD checks expect."""
