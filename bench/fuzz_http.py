"""The long HTTP fuzz run, for before a release: the strategies of tests/fuzzing.py, many more batches per
personality, and every distinct traceback (by its last aisim frame) with an example path.

    python bench/fuzz_http.py [--batches 200] [--size 25] [--personality openai kserve]

Prints per personality: requests sent, statuses, tracebacks, hangs, 500s without a real server's reason,
state changed by a failed request, the slowest request and the slowest /health (or /v2/health/live) answer
while the batches ran, against the median /health answer with no fuzzing (the baseline of this run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the harness lives with the tests

from tests.fuzzing import PERSONALITIES, LogCatcher, Tally, fuzz_personality


def idle_health_ms(url: str, path: str) -> float:
    times = []
    with httpx.Client(base_url=url) as client:
        for _ in range(50):
            start = time.perf_counter()
            client.get(path)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def fuzz(personality: str, batches: int, size: int) -> None:
    health = PERSONALITIES[personality][2]
    tally = Tally()
    idle: list[float] = []
    with LogCatcher().installed() as caught:
        started = time.perf_counter()
        fuzz_personality(personality, batches, size, tally, lambda url: idle.append(idle_health_ms(url, health)))
        wall = time.perf_counter() - started
        distinct: Counter[str] = Counter()
        for record in caught.records:
            text = "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else record.getMessage()
            frames = [line.strip() for line in text.splitlines() if line.strip().startswith("File") and "aisim" in line]
            distinct[(frames[-1] if frames else "") + " | " + text.strip().splitlines()[-1][:160]] += 1
    print(f"{personality}: {tally.summary(len(caught.records))}; /health idle median {idle[0]:.2f} ms; {wall:.0f} s")
    for key, count in distinct.most_common():
        print(f"  {count} x {key}")
    for case, text in tally.unexplained_500[:5]:
        print(f"  500 {case.method} {case.path} {case.body[:120] if case.body else b''!r}: {text[:120]}")
    for case, error in tally.dropped[:5]:
        print(f"  closed {case.method} {case.path} {dict(case.headers)} {case.body[:100] if case.body else b''!r}: "
              f"{error[:100]}")
    for case in tally.hangs[:5]:
        print(f"  hang {case.method} {case.path} {case.body[:200] if case.body else b''!r}")
    for case, change in tally.changed[:5]:
        print(f"  changed by {case.method} {case.path}: {change[:200]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--size", type=int, default=25)
    parser.add_argument("--personality", nargs="+", choices=sorted(PERSONALITIES), default=sorted(PERSONALITIES))
    args = parser.parse_args()
    for personality in args.personality:
        fuzz(personality, args.batches, args.size)


if __name__ == "__main__":
    main()
