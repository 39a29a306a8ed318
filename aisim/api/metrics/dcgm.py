"""The `dcgm-metrics` personality: dcgm-exporter's `/metrics` for the simulated GPUs.

dcgm-exporter serves on its own port (`:9400` by default) and answers from DCGM's cache, which it
fills every collect interval; here the cache is the telemetry sampler's last sample
(`telemetry.interval`) with the injections active now. The text is `aisim.telemetry.exposition`.
"""

from __future__ import annotations

from typing import Any

from ...telemetry.exposition import CONTENT_TYPE
from ..openai.handlers import BaseHandler


class MetricsHandler(BaseHandler):
    """`GET /metrics`: the DCGM series of every NVIDIA GPU of the scenario (open, as dcgm-exporter's)."""

    access = "public"

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE)

    def get(self) -> None:
        telemetry, pod = self.state.sim.telemetry, self.state.pod
        self.finish(telemetry.exposition(pod.dcgm_labels() if pod else ()) if telemetry is not None else "")

    head = get
    """`HEAD /metrics`: GET's status and headers (its Content-Length too), no body (Tornado drops it), as
    Prometheus' and probes' HEAD checks expect."""


def routes(metrics_path: str) -> list[Any]:
    return [(metrics_path, MetricsHandler)]
