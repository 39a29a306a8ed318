"""The shipped Grafana dashboard loads, and every query in it names series a running simulator exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx

from aisim.testing import running_server

from .conftest import ROOT, TEST_SCENARIOS

DASHBOARD = ROOT / "grafana" / "aisim-dashboard.json"
METRIC = re.compile(r"\b(?:vllm:[a-z0-9_:]+|DCGM_[A-Z0-9_]+)")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", re.MULTILINE)


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def test_every_query_of_the_dashboard_names_an_exported_series() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = list(_panels(dashboard["panels"]))
    assert len({p["id"] for p in panels}) == len(panels)
    queries = [t["expr"] for p in panels if p["type"] != "row" for t in p["targets"]]
    assert all(p["targets"] for p in panels if p["type"] != "row")
    queries += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    with running_server(TEST_SCENARIOS / "serve" / "dcgm.yaml") as base:
        exported = set()
        for url in base.listeners:  # vLLM's /metrics, then dcgm-exporter's
            exported |= set(SAMPLE.findall(httpx.get(f"{url}/metrics").text))
    assert any(n.startswith("vllm:") for n in exported) and any(n.startswith("DCGM_") for n in exported)
    named = set()
    for query in queries:
        names = METRIC.findall(query)
        assert names, f"no metric in {query!r}"
        named |= set(names)
    assert named <= exported, sorted(named - exported)
    assert {"vllm:num_requests_running", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS"} <= named
