"""How close the calibrated cost model is to measured vLLM runs: every Argonne row, replayed.

Prints, per row, the measured and simulated batch latency and the error, then the median and
maximum absolute percentage error per GPU and overall. Target (issue 3): median <= 10 %.

    python bench/fidelity.py
"""

from __future__ import annotations

import statistics
import time

from argonne import rows, simulated_latency


def main() -> None:
    start = time.perf_counter()
    errors: dict[str, list[float]] = {}
    print(f"{'gpu':10} {'model':11} {'len':>5} {'batch':>5} {'measured s':>11} {'simulated s':>12} {'error':>8}")
    for row in rows():
        simulated = simulated_latency(row)
        error = (simulated - row.latency) / row.latency * 100
        errors.setdefault(row.gpu, []).append(abs(error))
        print(f"{row.gpu:10} {row.family:11} {row.length:5} {row.batch:5} {row.latency:11.2f} {simulated:12.2f} {error:+7.1f}%")
    everything = [e for values in errors.values() for e in values]
    for gpu, values in [*errors.items(), ("all", everything)]:
        print(f"{gpu:10} rows {len(values):3}  median |error| {statistics.median(values):5.1f} %  max |error| {max(values):5.1f} %")
    median = statistics.median(everything)
    print(f"target    median <= 10 %: {'PASS' if median <= 10 else 'FAIL'} ({median:.1f} %)")
    print(f"wall      {time.perf_counter() - start:.1f} s for {len(everything)} replays")


if __name__ == "__main__":
    main()
