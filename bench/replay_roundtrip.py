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
import json
import sys
import tempfile
from pathlib import Path

from aisim.replay.drift import compare, drift_table
from aisim.replay.formats import read_log
from aisim.replay.simulate import SimulationReplay
from aisim.scenario import check_file
from aisim.testing import recording_server, stream_chat_load

DEFAULT = Path(__file__).resolve().parents[1] / "aisim" / "scenarios" / "default.yaml"


def round_trip(scenario: Path, log_path: Path, requests: int, rate: float, seed: int,
               speed: float = 1.0) -> dict[str, object]:
    checked = check_file(scenario)
    assert checked.scenario is not None
    with recording_server(scenario, log_path, speed) as url:
        asyncio.run(stream_chat_load(url, [m.id for m in checked.scenario.models], requests, rate, seed, (8, 64)))
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
