"""Hostile clients over real sockets, against `aisim serve` in a subprocess (`tests/scenarios/serve/hostile.yaml`:
1 s timeouts, a 4 MiB body limit, an 8 KiB header limit), each case bounded to seconds. Throughout each case a
separate process asks `/health` every 20 ms on a new connection: its p99 must stay under 50 ms with no failure;
the server must log no traceback and little else, and keep its memory. Longer runs: `bench/hostile_clients.py`.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import cast

import httpx
import openai
import pytest

from .conftest import TEST_SCENARIOS

HOSTILE = TEST_SCENARIOS / "serve" / "hostile.yaml"
P99_S = 0.050
RSS_GROWTH_MB = 60
"""The most a case may add to the server's resident memory (docs/hostile-clients.md)."""
LOG_BYTES = 4096

PROBE = r"""
import json, socket, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
latencies, failures = [], 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        ok = data.startswith(b"HTTP/1.1 200")
    except OSError:
        ok = False
    if ok:
        latencies.append(time.perf_counter() - start)
    else:
        failures += 1
    time.sleep(0.02)
print(json.dumps({"latencies": latencies, "failures": failures}))
"""


class Served:
    """`aisim serve SCENARIO --port 0` in a subprocess (optionally under `prlimit`), with its stderr kept."""

    def __init__(self, scenario: Path, tmp: Path, nofile: int | None = None) -> None:
        self.stderr_path = tmp / "stderr.txt"
        prefix = ["prlimit", f"--nofile={nofile}:{nofile}"] if nofile else []
        self.process = subprocess.Popen([*prefix, sys.executable, "-m", "aisim", "serve", str(scenario), "--port", "0"],
                                        stdout=subprocess.PIPE, stderr=self.stderr_path.open("w"), text=True)
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        found = re.search(r"at http://127\.0\.0\.1:(\d+)", line)
        assert found, self.stderr_path.read_text()
        self.port = int(found.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / 100

    def stop(self) -> str:
        self.process.terminate()
        self.process.wait(timeout=30)
        return self.stderr_path.read_text()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = Served(HOSTILE, tmp_path)
    try:
        yield server
    finally:
        server.process.kill()


def probe_p99(port: int, seconds: float, during: Callable[[], Awaitable[object]] | None = None) -> tuple[float, object]:
    """The p99 of `/health` from a separate process over `seconds` (while `during` runs, if given), and what
    `during` returned; every probe must succeed."""
    probe = subprocess.Popen([sys.executable, "-c", PROBE, str(port), str(seconds)], stdout=subprocess.PIPE, text=True)
    result = asyncio.run(during()) if during is not None else None
    out, _ = probe.communicate(timeout=seconds + 30)
    report = json.loads(out)
    latencies = sorted(report["latencies"])
    assert report["failures"] == 0 and len(latencies) >= 10, report["failures"]
    return latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], result


def under_probe(server: Served, seconds: float, attack: Callable[[], Awaitable[object]]) -> object:
    """Run `attack` while a separate process probes `/health` for `seconds`; checks the probe's p99, the
    server's memory and its log; returns what the attack returned. The p99 must stay under 50 ms, or, on a
    machine so loaded that `/health` alone is slow (a shared CI runner: 15-30 ms alone on the 2-core machine
    these tests were written on), under 5x its p99 measured just before without the attack: a request that
    holds the loop for a second (as the 10,000-prompt completion did) fails either way."""
    baseline, _ = probe_p99(server.port, 1.0)
    rss = server.rss_mb()
    p99, result = probe_p99(server.port, seconds, attack)
    assert p99 < max(P99_S, 5 * baseline), f"/health p99 {p99 * 1000:.1f} ms (alone: {baseline * 1000:.1f} ms)"
    assert server.rss_mb() - rss < RSS_GROWTH_MB
    return result


def quiet(stderr: str) -> None:
    assert "Traceback" not in stderr and len(stderr.encode()) < LOG_BYTES, stderr[-2000:]


async def closed_within(reader: asyncio.StreamReader, seconds: float, trickle: asyncio.StreamWriter | None = None) -> float:
    """Seconds until the server closes the connection (reading; writing a byte every 0.25 s with `trickle`)."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if trickle is not None:
            try:
                trickle.write(b"X")
                await trickle.drain()
            except (ConnectionError, OSError):
                return time.monotonic() - start
        try:
            data = await asyncio.wait_for(reader.read(65536), 0.25)
        except TimeoutError:
            continue
        except (ConnectionError, OSError):
            return time.monotonic() - start
        if not data:
            return time.monotonic() - start
    return float("inf")


def test_slowloris_headers_and_bodies_that_never_finish_are_closed_by_their_timeouts(served: Served) -> None:
    async def attack() -> list[float]:
        async def slowloris() -> float:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            return await closed_within(reader, 6, trickle=writer)

        async def stalled_body() -> float:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100000\r\n\r\n{\"model\": ")
            return await closed_within(reader, 6)

        return list(await asyncio.gather(*[slowloris() for _ in range(300)], *[stalled_body() for _ in range(100)]))

    times = under_probe(served, 4, attack)
    assert max(times) < 3  # type: ignore[call-overload]  # header and body timeouts are 1 s
    quiet(served.stop())


def test_thousands_of_idle_keep_alive_connections_are_closed_after_the_idle_timeout(tmp_path: Path) -> None:
    """2,000 connections, each idle after one request, with a 4 s idle timeout (so that they are all idle at
    once): each is closed 4 s after its answer, with `/health` fast meanwhile."""
    scenario = tmp_path / "idle.yaml"
    scenario.write_text(HOSTILE.read_text().replace("idleTimeout: 1s", "idleTimeout: 4s").replace(
        "headerTimeout: 1s", "headerTimeout: 5s"))  # the first request's headers may wait on a starved CI machine
    server = Served(scenario, tmp_path)
    opening = asyncio.Semaphore(20)  # connect twenty at a time, as a pool warming up does

    async def attack() -> list[tuple[float, float]]:
        async def idle() -> tuple[float, float]:
            async with opening:
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                sent = time.monotonic()
                writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            after_answer = await closed_within(reader, 8)
            return time.monotonic() - sent, after_answer

        return list(await asyncio.gather(*[idle() for _ in range(2000)]))

    try:
        times = cast(list[tuple[float, float]], under_probe(server, 7, attack))
        # not before the timeout: timed from the request's sending, which comes before the answer's end (the
        # client may read its answer late on a loaded machine); and not long after the answer
        assert min(t for t, _ in times) >= 4 and max(t for _, t in times) < 6
        quiet(server.stop())
    finally:
        server.process.kill()


def test_more_clients_than_descriptors_under_prlimit(tmp_path: Path) -> None:
    """`prlimit --nofile=1024` and 1,100 clients holding connections open: the cap (the limit less 64) closes the
    longest-waiting connection for each new one, so descriptors never run out and `/health` stays fast."""
    scenario = tmp_path / "fd.yaml"
    scenario.write_text(HOSTILE.read_text().replace("headerTimeout: 1s", "headerTimeout: 60s"))
    server = Served(scenario, tmp_path, nofile=1024)
    try:
        async def attack() -> int:
            writers = []
            for index in range(1100):
                _, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writers.append(writer)
                if index % 50 == 49:
                    await asyncio.sleep(0.05)  # clients arriving over a second, not one SYN flood
            await asyncio.sleep(2)
            for writer in writers:
                writer.close()
            return len(writers)

        under_probe(server, 4, attack)
        quiet(server.stop())
    finally:
        server.process.kill()


def test_running_out_of_descriptors_backs_off_quietly_and_recovers(tmp_path: Path) -> None:
    """A cap above the descriptor limit (`maxOpen: 5000` under `prlimit --nofile=256`): `accept` fails with EMFILE.
    The server pauses accepting (no busy loop), logs one line, answers the client it could not take 503 through
    its reserved descriptor, and serves again once the clients leave."""
    scenario = tmp_path / "emfile.yaml"
    scenario.write_text(HOSTILE.read_text().replace("headerTimeout: 1s", "headerTimeout: 60s, maxOpen: 5000"))
    server = Served(scenario, tmp_path, nofile=256)
    try:
        cpu = server.cpu_s()

        async def attack() -> list[bytes]:
            opened = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(400)]
            await asyncio.sleep(2)
            answers = []
            for reader, _ in opened:
                try:
                    answers.append(await asyncio.wait_for(reader.read(200), 0.002))
                except (TimeoutError, ConnectionError):
                    answers.append(b"")
            for _, writer in opened:
                writer.close()
            return answers

        started = time.monotonic()
        answers = asyncio.run(attack())
        busy = server.cpu_s() - cpu
        assert busy < 0.5 * (time.monotonic() - started)  # paused, not spinning on accept
        assert any(a.startswith(b"HTTP/1.1 503") for a in answers)
        time.sleep(1.2)  # the longest pause of the accept loop
        assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
        stderr = server.stop()
        quiet(stderr)
        assert stderr.count("cannot accept connections") == 1
    finally:
        server.process.kill()


def test_oversized_headers_and_bodies_are_refused_before_they_are_read(served: Served) -> None:
    async def attack() -> list[bytes]:
        async def declared(size: int) -> bytes:
            """Headers only: the 413 comes although no byte of the body was sent."""
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {size}\r\n\r\n".encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            writer.close()
            return head

        async def chunked() -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            try:
                for _ in range(80):  # 5 MiB in 64 KiB chunks
                    writer.write(b"10000\r\n" + b" " * 65536 + b"\r\n")
                    await writer.drain()
            except ConnectionError:
                pass
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            writer.close()
            return head

        async def big_header() -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
            return await asyncio.wait_for(reader.read(4096), 2)

        return list(await asyncio.gather(*[declared(60 * 2**20) for _ in range(8)], chunked(), big_header()))

    answers = under_probe(served, 3, attack)
    assert all(a.startswith(b"HTTP/1.1 413") for a in answers[:9])  # type: ignore[index]
    assert answers[9].startswith(b"HTTP/1.1 431") and b"nosniff" in answers[9]  # type: ignore[index]
    huge = httpx.post(f"{served.url}/v1/chat/completions", timeout=10,
                      json={"model": "quick", "messages": [{"role": "user", "content": "x" * (60 * 2**20)}]})
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    quiet(served.stop())


def test_a_10000_prompt_completion_is_refused_and_2048_prompts_do_not_stall_the_others(served: Served) -> None:
    client = openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0, timeout=60)

    async def attack() -> object:
        with pytest.raises(openai.BadRequestError) as too_many:
            await client.completions.create(model="quick", prompt=["hello there"] * 10_000, max_tokens=1)
        served_at_cap = await client.completions.create(model="quick", prompt=["hello there " * 20] * 2048, max_tokens=2)
        return too_many.value, served_at_cap

    refused, at_cap = under_probe(served, 4, attack)  # type: ignore[misc]
    assert refused.param == "prompt" and "limit is 2048" in refused.message
    assert len(at_cap.choices) == 2048
    quiet(served.stop())


def test_a_2048_input_embedding_does_not_stall_the_others_and_2049_are_refused(served: Served) -> None:
    client = openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0, timeout=60)
    long_input = "the quick brown fox jumps over the lazy dog " * 14  # about 140 tokens: 2,048 of them under 300,000

    async def attack() -> object:
        embedded = await client.embeddings.create(model="quick", input=[long_input] * 2048)
        with pytest.raises(openai.BadRequestError) as too_many:
            await client.embeddings.create(model="quick", input=["x"] * 2049)
        with pytest.raises(openai.BadRequestError) as too_long:
            await client.embeddings.create(model="quick", input=[long_input * 4] * 600)
        return embedded, too_many.value, too_long.value

    embedded, too_many, too_long = under_probe(served, 4, attack)  # type: ignore[misc]
    assert len(embedded.data) == 2048
    assert too_many.code == "array_above_max_length"
    assert too_long.code == "max_tokens_per_request" and "max 300000 tokens per request" in too_long.message
    quiet(served.stop())
