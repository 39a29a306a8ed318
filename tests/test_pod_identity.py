"""A fleet's pods tell themselves apart: `aisim serve` started with `POD_NAME` / `POD_NAMESPACE` (as the
downward API sets them) answers with `x-inference-pod` / `x-inference-namespace`, draws its own random
stream unless `--seed` pins one, and labels its DCGM series with the pod as dcgm-exporter does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import openai
import pytest

from aisim.api.pod import PodIdentity
from aisim.scenario import load_scenario
from aisim.testing import running_server

from .conftest import ROOT, SERVE_MODES, on_free_ports

CHAT = {"model": "llama3-8b-sim", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 24}


@contextmanager
def pod_server(name: str | None, namespace: str | None = "fleet", *flags: str) -> Iterator[subprocess.Popen[str]]:
    """`aisim serve --port 0 FLAGS` as a pod with this name (no POD_* variables when None)."""
    env = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE")}
    env.update({"POD_NAME": name, "POD_NAMESPACE": namespace or ""} if name else {})
    process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", "--port", "0", *flags], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=20)


def url_of(process: subprocess.Popen[str]) -> str:
    line = process.stdout.readline()  # type: ignore[union-attr]
    found = re.search(r"at (http://\S+)", line)
    assert found, line
    return found.group(1)


def test_pods_answer_with_their_own_name_and_their_own_random_stream() -> None:
    with ExitStack() as stack:  # started together: their start-ups overlap
        started = [stack.enter_context(pod_server(*args)) for args in
                   (("aisim-7d9f-a", "fleet"), ("aisim-7d9f-b", "fleet"), ("aisim-7d9f-a", "fleet", "--seed", "5"),
                    ("aisim-7d9f-b", "fleet", "--seed", "5"), ("aisim-7d9f-a", "fleet"))]
        answers = []
        for process in started:
            client = openai.OpenAI(base_url=url_of(process) + "/v1", api_key="aisim", max_retries=0)
            raw = client.chat.completions.with_raw_response.create(**CHAT)  # type: ignore[call-overload]
            answers.append((raw.headers.get("x-inference-pod"), raw.headers.get("x-inference-namespace"),
                            raw.parse().choices[0].message.content))
    a, b, a_pinned, b_pinned, a_again = answers
    assert [answer[:2] for answer in answers] == [("aisim-7d9f-a", "fleet"), ("aisim-7d9f-b", "fleet")] * 2 + \
        [("aisim-7d9f-a", "fleet")]
    assert a[2] != b[2]  # two pods, two streams
    assert a_again[2] == a[2]  # a pod's stream is its name's: a restarted pod repeats it
    assert a_pinned[2] == b_pinned[2] != a[2]  # --seed pins one stream for every pod


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_every_answer_carries_the_pod_headers_and_none_outside_a_pod(api_servers: int) -> None:
    pod = PodIdentity("aisim-0", "team-a")
    with running_server(pod=pod, api_server_count=api_servers) as url, httpx.Client(timeout=30) as client:
        for reply in (client.get(f"{url}/health"), client.get(f"{url}/no/such/path"),
                      client.post(f"{url}/v1/chat/completions", json={**CHAT, "model": "no-such-model"})):
            assert (reply.headers["x-inference-pod"], reply.headers["x-inference-namespace"]) == ("aisim-0", "team-a")
            assert len(reply.headers.get_list("x-inference-pod")) == 1  # once, also when handed on
        with client.stream("POST", f"{url}/v1/chat/completions", json={**CHAT, "stream": True}) as stream:
            assert stream.headers["x-inference-pod"] == "aisim-0"
            assert list(stream.iter_lines())[-2] == "data: [DONE]"
    with running_server(api_server_count=api_servers) as url:
        assert "x-inference-pod" not in httpx.get(f"{url}/health").headers


def test_only_the_known_parts_of_the_identity_are_sent() -> None:
    assert PodIdentity.from_env({}) is None
    only_namespace = PodIdentity.from_env({"POD_NAMESPACE": "ns"})
    assert only_namespace is not None and only_namespace.headers() == [("x-inference-namespace", "ns")]


def test_the_dcgm_series_carry_the_pod_labels_of_dcgm_exporters_kubernetes_mode() -> None:
    scenario = on_free_ports(load_scenario(ROOT / "deploy" / "kubernetes" / "dcgm-metrics" / "scenario.yaml"))
    with running_server(scenario, pod=PodIdentity("aisim-0", "team-a")) as url:
        text = httpx.get(url.listeners[1] + "/metrics").text
    samples = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(samples) == 2  # both GPUs
    for line in samples:
        labels = re.findall(r'(\w+)="', line)
        assert labels[-4:] == ["DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"], line
        assert 'pod="aisim-0"' in line and 'namespace="team-a"' in line and 'container="aisim"' in line
