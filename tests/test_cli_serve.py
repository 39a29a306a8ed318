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
