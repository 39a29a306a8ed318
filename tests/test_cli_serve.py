"""`aisim serve` as users start it: the seed's quick start, vLLM flags it does not know, a real port."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from aisim.cli import split_foreign_flags

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
