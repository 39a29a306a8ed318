"""DCGM telemetry over HTTP: dcgm-exporter's `/metrics` on its own listener, and the admin API that
injects field values and XID errors into the running simulation (a real socket, `running_server`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aisim.testing import running_server

from .conftest import SERVE_MODES, TEST_SCENARIOS

DCGM = TEST_SCENARIOS / "serve" / "dcgm.yaml"
ADMIN = {"Authorization": "Bearer s3cret"}


@pytest.fixture(scope="module", params=SERVE_MODES)
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(the API and admin listener's URL, the dcgm-exporter listener's URL), in both modes."""
    with running_server(DCGM, api_server_count=request.param) as base:
        yield base, base.listeners[1]


def _values(metrics_url: str, name: str) -> dict[str, float]:
    """One family's value per `gpu` label."""
    text = httpx.get(f"{metrics_url}/metrics").text
    return {s.labels["gpu"]: s.value for family in text_string_to_metric_families(text) if family.name == name
            for s in family.samples}


def test_the_dcgm_listener_serves_dcgm_exporters_exposition(server: tuple[str, str]) -> None:
    _, dcgm = server
    answer = httpx.get(f"{dcgm}/metrics")
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    util = families["DCGM_FI_DEV_GPU_UTIL"]
    assert [s.labels["gpu"] for s in util.samples] == ["0", "1"]
    assert list(util.samples[0].labels) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname",
                                            "DCGM_FI_DRIVER_VERSION"]
    assert util.samples[1].labels["device"] == "nvidia1" and util.samples[1].labels["hostname"] == "sim-node"
    fb = _values(dcgm, "DCGM_FI_DEV_FB_USED")
    assert fb["0"] > 60_000 > fb["1"]  # weights and KV cache on gpu-0 only


def test_admin_calls_need_the_token(server: tuple[str, str]) -> None:
    base, _ = server
    body = {"gpu": 1, "field": "DCGM_FI_DEV_GPU_TEMP", "value": 80}
    missing = httpx.post(f"{base}/admin/dcgm/inject", json=body)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    wrong = httpx.post(f"{base}/admin/dcgm/inject", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403 and wrong.json()["error"]["type"] == "permission_error"
    assert httpx.post(f"{base}/admin/xid", json={"gpu": 1, "code": 79}).status_code == 401
    if hasattr(server[0], "state"):  # the timeline is in this process (not split)
        assert not any(r["type"] == "dcgm_inject" for r in server[0].state.sim.timeline.records())


def test_an_injected_value_shows_at_once_and_until_cleared(server: tuple[str, str]) -> None:
    base, dcgm = server
    answer = httpx.post(f"{base}/admin/dcgm/inject", headers=ADMIN,
                        json={"gpu": "gpu-1", "field": "DCGM_FI_DEV_GPU_TEMP", "value": 87.9})
    assert answer.status_code == 200
    got = answer.json()
    assert (got["message"], got["gpu"], got["dcgm_gpu"], got["field_id"], got["value"], got["until_ns"]) == (
        "Successfully injected field info.", "gpu-1", 1, 150, 87, None)
    assert _values(dcgm, "DCGM_FI_DEV_GPU_TEMP") == {"0": 33, "1": 87}
    time.sleep(0.3)  # samples come and go; the injection stays
    assert _values(dcgm, "DCGM_FI_DEV_GPU_TEMP")["1"] == 87
    listed = httpx.get(f"{base}/admin/dcgm/inject", headers=ADMIN).json()["injections"]
    assert [(i["gpu"], i["field"], i["value"], i["source"]) for i in listed] == [("gpu-1", "DCGM_FI_DEV_GPU_TEMP", 87, "admin")]
    cleared = httpx.delete(f"{base}/admin/dcgm/inject", params={"gpu": "1", "field": "150"}, headers=ADMIN)
    assert cleared.json() == {"gpu": "gpu-1", "cleared": ["DCGM_FI_DEV_GPU_TEMP"]}
    assert _values(dcgm, "DCGM_FI_DEV_GPU_TEMP")["1"] == 33


def test_an_injection_with_a_duration_ends_by_itself(server: tuple[str, str]) -> None:
    base, dcgm = server
    answer = httpx.post(f"{base}/admin/dcgm/inject", headers=ADMIN,
                        json={"gpu": 0, "field": "DCGM_FI_DEV_POWER_USAGE", "value": 650.5, "duration": "300ms"})
    got = answer.json()
    assert got["until_ns"] - got["since_ns"] == 300_000_000
    assert _values(dcgm, "DCGM_FI_DEV_POWER_USAGE")["0"] == 650.5
    deadline = time.monotonic() + 5
    while _values(dcgm, "DCGM_FI_DEV_POWER_USAGE")["0"] == 650.5:
        assert time.monotonic() < deadline, "the injection never ended"
        time.sleep(0.05)
    if hasattr(server[0], "state"):  # the timeline is in this process (not split)
        records = [r for r in server[0].state.sim.timeline.records() if r["type"] == "dcgm_clear"]
        assert records[-1]["field"] == "DCGM_FI_DEV_POWER_USAGE" and records[-1]["reason"] == "expired"


def test_bad_injections_are_refused(server: tuple[str, str]) -> None:
    base, _ = server

    def post(body: object) -> httpx.Response:
        return httpx.post(f"{base}/admin/dcgm/inject", headers=ADMIN, json=body)

    unknown = post({"gpu": 0, "field": "DCGM_FI_DEV_GPU_TEMPERATURE", "value": 1})
    assert unknown.status_code == 400 and unknown.json()["error"]["message"] == \
        "unknown DCGM field 'DCGM_FI_DEV_GPU_TEMPERATURE'"
    assert post({"gpu": 0, "field": "DCGM_FI_DRIVER_VERSION", "value": 1}).status_code == 400
    assert post({"gpu": 0, "field": "DCGM_FI_DEV_GPU_TEMP", "value": "hot"}).status_code == 400
    assert post({"gpu": 0, "field": "DCGM_FI_DEV_GPU_TEMP"}).json()["error"]["param"] == "value"
    missing_gpu = post({"gpu": 7, "field": "DCGM_FI_DEV_GPU_TEMP", "value": 1})
    assert missing_gpu.status_code == 404 and missing_gpu.json()["error"]["code"] == "gpu_not_found"
    assert post({"gpu": 0, "field": "DCGM_FI_DEV_GPU_TEMP", "value": 1, "duration": "soon"}).status_code == 400
    assert httpx.post(f"{base}/admin/xid", headers=ADMIN, json={"gpu": 0, "code": 0}).status_code == 400


def test_admin_endpoints_are_off_unless_enabled() -> None:
    with running_server(TEST_SCENARIOS / "serve" / "oom.yaml") as base:
        assert httpx.post(f"{base}/admin/xid", json={"gpu": 0, "code": 79}).status_code == 404


def test_an_xid_79_through_the_admin_api_kills_the_engine_as_a_lost_gpu_does() -> None:
    with running_server(DCGM) as base:
        dcgm = base.listeners[1]
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        assert client.completions.create(model="llama", prompt="hello", max_tokens=2).usage is not None
        answer = httpx.post(f"{base}/admin/xid", headers=ADMIN, json={"gpu": "gpu-0", "code": 79})
        assert answer.json() == {"gpu": "gpu-0", "code": 79, "message": "GPU has fallen off the bus",
                                 "effect": "gpu_lost", "killed": ["llama/0"]}
        with pytest.raises(openai.InternalServerError) as failed:
            client.completions.create(model="llama", prompt="hello", max_tokens=2)
        assert failed.value.status_code == 500
        assert failed.value.body["message"] == "EngineCore encountered an issue. See stack trace (above) for the root cause."
        assert httpx.get(f"{base}/health").status_code == 503
        text = httpx.get(f"{dcgm}/metrics").text
        xid = [line for line in text.splitlines() if line.startswith('DCGM_FI_DEV_XID_ERRORS{gpu="0"')]
        assert xid == [xid[0]] and xid[0].endswith(',err_code="79",err_msg="GPU has fallen off the bus"} 79')
        assert set(_values(dcgm, "DCGM_FI_DEV_GPU_UTIL")) == {"1"}  # the lost GPU answers nothing else
        logs = [r["message"] for r in base.state.sim.timeline.records() if r["type"] == "log" and r["level"] == "ERROR"]
        assert logs == ["NVRM: Xid (PCI:0000:08:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]


@pytest.mark.parametrize("scenario", ["dcgm.yaml", "triton.yaml"])
def test_head_metrics_answers_as_get_without_a_body(scenario: str) -> None:
    """`HEAD /metrics` in every metrics dialect (vLLM's, DCGM's, Triton's): GET's status and headers, no body."""
    with running_server(TEST_SCENARIOS / "serve" / scenario) as base:
        for listener in base.listeners:
            got = httpx.get(f"{listener}/metrics")
            if got.status_code != 200:
                continue  # a listener without metrics (KServe)
            head = httpx.head(f"{listener}/metrics")
            assert head.status_code == 200 and head.content == b""
            assert head.headers["Content-Type"] == got.headers["Content-Type"] and int(head.headers["Content-Length"]) > 0
