"""deploy/kubernetes/llm-d-fleet as a cluster and aisim would take it: rendered by `kubectl kustomize`, checked
against Kubernetes' schemas, each pool's container arguments parsed by `aisim serve`'s own parser (with
$(POD_IP) expanded as the kubelet does), and each pool's scenario served: its roles, ranks, KV-event ports and
simulated start-up are what the manifests declare."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate

from aisim.cli import build_parser, split_foreign_flags
from aisim.fleet import options
from aisim.fleet.kv_events import offset_endpoint
from aisim.scenario import load_scenario
from aisim.testing import running_server

from .conftest import on_free_ports
from .test_kubernetes import KUBERNETES_VERSION, render

POD_IP = "10.1.2.3"


def pools() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """role -> (its Deployment, its ConfigMap)."""
    objects = render("llm-d-fleet")
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    found = {}
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        role = deployment["spec"]["template"]["metadata"]["labels"]["llm-d.ai/role"]
        volume = deployment["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
        config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == volume)
        found[role] = (deployment, config)
    return found


def served_scenario(deployment: dict[str, Any], config: dict[str, Any], tmp_path: Path) -> Any:
    """The scenario `aisim serve` runs in the pod: the ConfigMap's, with the container's flags applied."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = [a.replace("$(POD_IP)", POD_IP) for a in container["args"]]
    kept, foreign = split_foreign_flags(args)
    assert foreign == []
    parsed = build_parser().parse_args(["serve", *kept])
    file = tmp_path / f"{deployment['metadata']['name']}.yaml"
    file.write_text(config["data"]["scenario.yaml"], encoding="utf-8")
    assert parsed.config == "/etc/aisim/scenario.yaml"
    return options.apply(load_scenario(file), parsed)


def test_two_pools_with_their_roles_ranks_and_event_ports(tmp_path: Path) -> None:
    found = pools()
    assert set(found) == {"prefill", "decode"}
    services = {o["metadata"]["name"] for o in render("llm-d-fleet") if o["kind"] == "Service"}
    assert services == {"aisim-prefill", "aisim-decode"}
    for role, (deployment, config) in found.items():
        scenario = served_scenario(deployment, config, tmp_path)
        fleet = scenario.server.fleet
        assert fleet.kv_transfer.role == role
        assert fleet.kv_events.topic == f"kv@{POD_IP}@meta-llama/Meta-Llama-3-8B-Instruct"
        ranks = fleet.data_parallel_size
        assert ranks == (2 if role == "decode" else 1)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        declared = sorted(p["containerPort"] for p in container["ports"] if p["name"].startswith("kv-events"))
        assert declared == [int(offset_endpoint(fleet.kv_events.endpoint, r).rsplit(":", 1)[1]) for r in range(ranks)]
        env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
        assert env["POD_IP"] == "status.podIP"
        # served here on loopback (events on free ports): the start-up, then the ranks' publishers
        events = fleet.kv_events.model_copy(update={"endpoint": "tcp://127.0.0.1:0"})
        local = on_free_ports(scenario.model_copy(update={"server": scenario.server.model_copy(update={
            "fleet": fleet.model_copy(update={"kv_events": events})})}))
        with running_server(local, speed=10.0) as url:  # the 20 s start-up in 2 s
            assert httpx.get(url + "/health").status_code == 503
            deadline = time.monotonic() + 10
            while httpx.get(url + "/health").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            sources = httpx.get(url + "/kv_event_sources").json()
            assert sorted(sources) == [str(r) for r in range(ranks)]
            assert {s["topic"] for s in sources.values()} == {fleet.kv_events.topic}
