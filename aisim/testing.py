"""Test helpers: run aisim in-process on a free port and point clients at it.

    from aisim.testing import running_server

    with running_server("scenarios/rate-limit.yaml") as base_url:
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-team-a")

As a pytest plugin (registered through the `pytest11` entry point), the fixture `aisim_server`
yields the base URL of the built-in default scenario, served for the whole session.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .api.runner import ServerUrl


def running_server(*args: Any, **kwargs: Any) -> AbstractContextManager[ServerUrl]:
    """See `aisim.api.runner.running_server` (imported lazily, so the plugin costs nothing at start-up)."""
    from .api.runner import running_server as start

    return start(*args, **kwargs)


@pytest.fixture(scope="session")
def aisim_server() -> Iterator[str]:
    """The base URL of an aisim server running the built-in default scenario."""
    with running_server() as url:
        yield url


def free_port_offset(ports: Sequence[int], taken: Collection[int] = ()) -> int:
    """An offset (for `aisim serve --port-offset`) that moves every one of `ports` onto a loopback port free now
    and not in `taken`: the first port lands where the operating system finds a free one, the rest keep their gaps."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            offset = probe.getsockname()[1] - ports[0]
        if all(0 < port + offset < 65536 and port + offset not in taken and _bindable(port + offset) for port in ports):
            return offset
    raise RuntimeError(f"no offset moves the ports {list(ports)} onto free ones")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def recording_server(scenario: str | Path, record: str | Path, speed: float = 1.0) -> Iterator[str]:
    """`aisim serve SCENARIO --record FILE --port 0 --speed X` in a subprocess; yields its base URL. On exit
    the server gets SIGTERM (which completes the log) and must stop cleanly, else RuntimeError."""
    process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", str(scenario), "--record", str(record),
                                "--port", "0", "--speed", str(speed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"at (http://\S+)", line)
        if found is None:
            raise RuntimeError(f"aisim serve did not start: {line!r} {process.stderr.read() if process.stderr else ''}")
        yield found.group(1)
    finally:
        process.terminate()
        status = process.wait(timeout=30)
    if status != 0:
        raise RuntimeError(f"aisim serve exited with status {status}")


async def stream_chat_load(url: str, models: list[str], requests: int, rate: float, seed: int,
                           max_tokens: tuple[int, int] = (8, 48)) -> None:
    """Streamed chat completions through the OpenAI SDK at seeded Poisson arrivals (`rate` per second),
    alternating between `models`, with `max_tokens` drawn from [low, high)."""
    import numpy as np
    from openai import AsyncOpenAI

    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, requests))
    caps, words = rng.integers(*max_tokens, requests), rng.integers(20, 400, requests)
    client = AsyncOpenAI(base_url=url + "/v1", api_key="aisim", max_retries=0)
    start = time.monotonic()

    async def one(i: int) -> None:
        await asyncio.sleep(max(0.0, start + arrivals[i] - time.monotonic()))
        stream = await client.chat.completions.create(
            model=models[i % len(models)], messages=[{"role": "user", "content": "lorem ipsum " * int(words[i])}],
            max_tokens=int(caps[i]), stream=True)
        async for _ in stream:
            pass

    await asyncio.gather(*(one(i) for i in range(requests)))
    await client.close()
