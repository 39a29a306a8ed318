"""Run a plan's configurations: serially, on a local process pool (the default), or on a Ray cluster.

Every configuration is one independent task (`evaluate.search`) whose result depends only on the task,
so the three ways give the same results; they are gathered in the plan's order whatever order they
finish in. `code_version` is a hash of the engine's and the language's source, part of every cache key:
a changed simulator never reuses an old result.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from .. import __version__
from .evaluate import Task, search

Progress = Callable[[int, int, dict[str, Any]], None]
"""Told of each finished configuration: (done, total, its result)."""


@functools.cache
def code_version() -> str:
    """aisim's version and a hash of the source the evaluations run (engine, language, planner)."""
    root = Path(__file__).resolve().parent.parent
    hasher = hashlib.sha256(__version__.encode())
    for folder in ("engine", "scenario", "plan", "telemetry"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".json"):
                hasher.update(path.relative_to(root).as_posix().encode())
                hasher.update(path.read_bytes())
    return hasher.hexdigest()


def run_tasks(tasks: list[Task], jobs: int | None = None, ray_address: str | None = None,
              progress: Progress | None = None) -> list[dict[str, Any]]:
    """Each task's result, in task order. `jobs=1` runs serially here; `ray_address` sends one Ray task per
    configuration to that cluster (`local` starts one on this machine)."""
    results: list[dict[str, Any]] = []
    if ray_address is not None:
        finished: Iterator[dict[str, Any]] = _on_ray(tasks, ray_address)
    elif jobs == 1 or len(tasks) <= 1:
        finished = (search(task) for task in tasks)
    else:
        finished = _on_pool(tasks, jobs or os.cpu_count() or 1)
    for result in finished:
        results.append(result)
        if progress:
            progress(len(results), len(tasks), result)
    return results


def _on_pool(tasks: list[Task], jobs: int) -> Iterator[dict[str, Any]]:
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        yield from pool.map(search, tasks)


def _on_ray(tasks: list[Task], address: str) -> Iterator[dict[str, Any]]:
    try:
        import ray
    except ImportError as error:
        raise RuntimeError("--ray needs Ray: pip install 'aisim[ray]'") from error
    started = not ray.is_initialized()
    if started:
        ray.init(address=None if address == "local" else address, ignore_reinit_error=True, log_to_driver=False)
    try:
        remote = ray.remote(search)
        refs = [remote.remote(task) for task in tasks]
        for ref in refs:
            yield ray.get(ref)
    finally:
        if started:
            ray.shutdown()


class Bar:
    """A one-line progress bar on stderr: configurations done, the best so far and an ETA."""

    def __init__(self, rank: Callable[[dict[str, Any]], float], stream: Any = None) -> None:
        self.rank = rank
        self.stream = stream or sys.stderr
        self.started = time.perf_counter()
        self.best: dict[str, Any] | None = None

    def __call__(self, done: int, total: int, result: dict[str, Any]) -> None:
        if result.get("status") == "meets" and (self.best is None or self.rank(result) > self.rank(self.best)):
            self.best = result
        elapsed = time.perf_counter() - self.started
        eta = elapsed / done * (total - done)
        width = 24
        filled = int(width * done / total)
        best = f"best {self.best['key']} at {self.best['max_rate']:.3g}/s" if self.best else "none meets the SLO yet"
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} configurations, "
                          f"{best}, ETA {eta:4.0f}s ")
        self.stream.flush()
        if done == total:
            self.stream.write("\n")
