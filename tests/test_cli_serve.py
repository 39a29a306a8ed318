"""`aisim serve` as users start it: the seed's quick start, vLLM flags it does not know, a real port."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aisim.cli import split_foreign_flags
from aisim.replay.formats import read_log

from .conftest import ROOT


@pytest.fixture
def server() -> Iterator[tuple[str, str]]:
    """`aisim serve --port 0 --delay-ms 120-350` plus vLLM flags; yields (base URL, startup output)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "aisim", "serve", "--port", "0", "--delay-ms", "120-350", "--tensor-parallel-size", "2",
         "--enable-prefix-caching", "--max-num-seqs=64"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [process.stdout.readline(), process.stdout.readline()]  # type: ignore[union-attr]
        match = re.search(r"at (http://[\d.]+:\d+)", lines[0])
        assert match, lines
        yield match.group(1), "".join(lines)
    finally:
        process.terminate()
        process.wait(timeout=10)
        stderr = process.stderr.read() if process.stderr else ""  # type: ignore[union-attr]
        assert "ignoring options it does not simulate: --tensor-parallel-size 2 --enable-prefix-caching " \
               "--max-num-seqs=64" in stderr


def test_the_quick_start_serves_the_default_models_with_the_network_delay(server: tuple[str, str]) -> None:
    url, startup = server
    assert startup.splitlines()[1] == "models: gpt-4-turbo-mock, llama3-8b-sim"
    ids = [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
    assert {"gpt-4-turbo-mock", "llama3-8b-sim"} <= set(ids)
    started = time.perf_counter()
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
        "model": "llama3-8b-sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert reply.status_code == 200 and time.perf_counter() - started >= 0.120


def test_foreign_flags_are_separated_from_the_scenario_and_own_flags() -> None:
    kept, foreign = split_foreign_flags(["--served-model-name", "x", "my.yaml", "--port", "9000", "--trust-remote-code",
                                         "--seed", "3"])
    assert kept == ["my.yaml", "--port", "9000", "--seed", "3"]
    assert foreign == ["--served-model-name", "x", "--trust-remote-code"]


def test_stopping_with_streams_open_ends_them_quietly_and_logs_them_as_aborted(tmp_path: Path) -> None:
    """SIGTERM while clients stream: the connections close, the engine aborts their requests (the request
    log gets a line for each), and the server exits 0 without an error logged per stream."""
    log = tmp_path / "requests.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", "--port", "0", "--record", str(log)],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        match = re.search(r"at (http://[\d.]+:\d+)", process.stdout.readline())  # type: ignore[union-attr]
        assert match
        body = {"model": "llama3-8b-sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000,
                "stream": True}
        with httpx.Client(timeout=30) as client:
            streams = [client.stream("POST", f"{match.group(1)}/v1/chat/completions", json=body) for _ in range(3)]
            lines = []
            for stream in streams:
                response = stream.__enter__()
                lines.append(response.iter_lines())
                assert next(lines[-1]).startswith("data: {")  # the stream has begun
            process.terminate()
            assert process.wait(timeout=20) == 0
            for received in lines:
                with pytest.raises(httpx.RemoteProtocolError):  # closed mid-stream, no [DONE]
                    for line in received:
                        assert line != "data: [DONE]"
    finally:
        process.kill()
        stderr = process.stderr.read() if process.stderr else ""  # type: ignore[union-attr]
    assert stderr == ""
    assert [r.status for r in read_log(log).requests] == ["aborted"] * 3


def _free_offset(ports: list[int], taken: set[int]) -> int:
    """An offset that moves every one of `ports` to a port free now (and not in `taken`)."""
    import socket

    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            offset = probe.getsockname()[1] - ports[0]
        moved = [p + offset for p in ports]
        if not all(0 < p <= 65535 and p not in taken for p in moved):
            continue
        try:
            for p in moved:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", p))
        except OSError:
            continue
        return offset
    raise RuntimeError("no free offset")


def test_port_offset_lets_two_triton_servers_run_side_by_side() -> None:
    """`--port-offset N` moves every listener (KServe's HTTP and gRPC ports and the fixed metrics port alike)."""
    import tritonclient.grpc

    scenario = str(ROOT / "scenarios" / "triton.yaml")
    first = _free_offset([8000, 8001, 8002], set())
    second = _free_offset([8000, 8001, 8002], {8000 + first, 8001 + first, 8002 + first})
    processes = [subprocess.Popen([sys.executable, "-m", "aisim", "serve", scenario, "--port-offset", str(offset)],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for offset in (first, second)]
    try:
        for process, offset in zip(processes, (first, second)):
            lines = [process.stdout.readline() for _ in range(3)]  # type: ignore[union-attr]
            assert f"http://127.0.0.1:{8000 + offset} " in lines[0] and f"grpc://127.0.0.1:{8001 + offset} " in lines[1] \
                and f"http://127.0.0.1:{8002 + offset} " in lines[2], lines
            assert httpx.get(f"http://127.0.0.1:{8000 + offset}/v2/health/live").status_code == 200
            assert tritonclient.grpc.InferenceServerClient(f"127.0.0.1:{8001 + offset}").is_server_live()
            metrics = httpx.get(f"http://127.0.0.1:{8002 + offset}/metrics")
            assert metrics.status_code == 200 and "nv_inference_count" in metrics.text
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
