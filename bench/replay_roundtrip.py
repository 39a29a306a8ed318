"""Round trip: `aisim serve --record` a workload a real client (the OpenAI SDK) drives, replay the
log headless on the same scenario, and print the drift.

The server runs as its own process (`python -m aisim serve --record`), so that the client's
Python does not share its interpreter lock; the client sends streamed chat completions at seeded
Poisson arrivals to every model of the scenario in turn. The replay (`aisim.replay`) schedules
the logged arrivals on the scenario's simulation; TTFT and E2E must agree within timer jitter.

    python bench/replay_roundtrip.py [--requests 40] [--rate 8] [--scenario S] [--log FILE] [--speed X]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from openai import AsyncOpenAI

from aisim.replay.drift import compare, drift_table
from aisim.replay.formats import read_log
from aisim.replay.simulate import SimulationReplay
from aisim.scenario import check_file

DEFAULT = Path(__file__).resolve().parents[1] / "aisim" / "scenarios" / "default.yaml"


@contextlib.contextmanager
def served(scenario: Path, record: Path, speed: float = 1.0) -> Iterator[str]:
    """`aisim serve SCENARIO --record FILE --port 0 --speed X` in a subprocess; yields its base URL."""
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
        process.terminate()  # SIGTERM: the server stops, closing the log
        process.wait(timeout=30)


async def drive(url: str, models: list[str], requests: int, rate: float, seed: int) -> None:
    """Streamed chat completions at Poisson arrivals, round-robin over `models`."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, requests))
    caps = rng.integers(8, 64, requests)
    words = rng.integers(20, 400, requests)
    client = AsyncOpenAI(base_url=url + "/v1", api_key="replay", max_retries=0)
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


def round_trip(scenario: Path, log_path: Path, requests: int, rate: float, seed: int,
               speed: float = 1.0) -> dict[str, object]:
    checked = check_file(scenario)
    assert checked.scenario is not None
    with served(scenario, log_path, speed) as url:
        asyncio.run(drive(url, [m.id for m in checked.scenario.models], requests, rate, seed))
    recorded = read_log(log_path)
    replayed = SimulationReplay(checked.scenario, checked.base_dir).run(recorded)
    return {"recorded": recorded, "replayed": replayed, "report": compare(recorded, replayed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=DEFAULT)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rate", type=float, default=8.0, help="requests per second")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--log", type=Path, help="keep the recorded log here")
    parser.add_argument("--speed", type=float, default=1.0, help="the server's --speed (the log is read back in its "
                        "simulated seconds)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log_path = args.log or Path(tmp) / "served.jsonl"
        result = round_trip(args.scenario, log_path, args.requests, args.rate, args.seed, args.speed)
    report = result["report"]
    sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n" if args.json else drift_table(report))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
