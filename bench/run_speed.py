"""Speed and memory of a headless run: the whole Azure conversation trace on Llama-3-8B and one H100.

Targets (issue 3): >= 500x real time on one core and peak RSS under 500 MB. Each variant runs in a
fresh process (so its peak RSS is its own) and prints simulated seconds per wall second. The
baseline, measured in the same run, is the same simulation planned one step at a time
(`macro_steps=False`); the ratio says what planning runs of decode steps at once buys.

`--against REF` (issue 25's target: at most half the CPU microseconds per simulated request of the
code before it) measures instead this tree's engine against git revision REF's (`git archive` into a
temporary folder, imported from there), in interleaved rounds of fresh processes pinned to one core,
CPU time of the simulation alone; it checks that both give the same result (a digest of every request's
times, every step and every allocator's counters) and prints the median ratio of the CPU time per request.

    python bench/run_speed.py [SCENARIO] [--skip-baseline]
    python bench/run_speed.py [SCENARIO] --against main [--rounds 5] [--core 1] [--same-as REF2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(scenario: str, macro: bool) -> dict[str, float]:
    """Run one variant in this process and return its figures."""
    from aisim.engine.simulation import Simulation
    from aisim.scenario import load_scenario

    loaded = load_scenario(scenario)
    started = time.perf_counter()
    sim = Simulation(loaded, Path(scenario).parent, macro_steps=macro)
    sim.run()
    wall = time.perf_counter() - started
    simulated = sim.kernel.now / 1e9
    return {
        "requests": len(sim.requests),
        "simulated_s": simulated,
        "wall_s": wall,
        "speed": simulated / wall,
        "events": sim.kernel.processed,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def cpu_per_request(scenario: str) -> dict[str, object]:
    """Run the scenario headless in this process: CPU seconds of `Simulation.run` alone, and a digest of
    the result (every request's outcome and times, every step's columns, every allocator's
    `memory_stats`) to compare two trees by."""
    import aisim
    from aisim.engine.simulation import Simulation
    from aisim.scenario import load_scenario

    sim = Simulation(load_scenario(scenario), Path(scenario).parent)
    cpu = time.process_time()
    sim.run()
    cpu = time.process_time() - cpu
    digest = hashlib.sha256()
    for r in sim.requests:
        digest.update(f"{r.id},{r.outcome},{r.arrival},{r.scheduled_at},{r.first_token_at},{r.finished_at},"
                      f"{r.generated},{r.preemptions};".encode())
    for run in sim.timeline.steps:
        for column in (run.starts, run.ends, run.requests, run.prefill_tokens, run.decode_tokens, run.kv_used):
            digest.update(column.astype("int64").tobytes())
    digest.update(repr(sorted(sim.timeline.events, key=repr)).encode())
    pools = {id(pool): pool for served in sim.served_models for engine in served.engines
             if getattr(engine, "memory", None) is not None for _, pool in engine.memory.pools}
    for pool in pools.values():  # every allocator's counters, peaks included
        digest.update(repr(sorted(pool.memory_stats().items())).encode())
    return {"requests": len(sim.requests), "cpu": cpu, "digest": digest.hexdigest(), "package": aisim.__file__}


def in_subprocess(scenario: str, macro: bool) -> dict[str, float]:
    code = f"import sys, json; sys.path.insert(0, {str(ROOT / 'bench')!r}); import run_speed; " \
           f"print(json.dumps(run_speed.measure({scenario!r}, {macro!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def pinned_run(scenario: str, package_root: Path, core: int) -> dict[str, object]:
    """`cpu_per_request` in a fresh process pinned to `core`, importing aisim from `package_root`."""
    code = (f"import sys, json; sys.path.insert(0, {str(package_root)!r}); sys.path.insert(1, {str(ROOT / 'bench')!r}); "
            f"import run_speed; print(json.dumps(run_speed.cpu_per_request({scenario!r})))")
    command = [sys.executable, "-c", code]
    if core >= 0:
        command = ["taskset", "-c", str(core), *command]
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def extract(ref: str, folder: Path) -> Path:
    """Revision `ref`'s `aisim` package, unpacked under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / "ref.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref, "aisim"], check=True, cwd=ROOT)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "ref", filter="data")
    archive.unlink()
    return folder / "ref"


def against(scenario: str, ref: str, rounds: int, core: int, same_as: str | None = None) -> None:
    """This tree against revision `ref`: interleaved rounds, the median ratio of CPU per request. The
    results must equal `ref`'s, or `same_as`'s when given (a revision after `ref` whose results changed
    on purpose, e.g. a new cost model: `ref` then only sets the speed baseline)."""
    with tempfile.TemporaryDirectory() as folder:
        trees = {"this": ROOT, ref: extract(ref, Path(folder) / "speed")}
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        digests: dict[str, set[str]] = {name: set() for name in trees}
        load = os.getloadavg()[0]
        for round_ in range(rounds):
            order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
            for name in order:
                run = pinned_run(scenario, trees[name], core)
                assert Path(str(run["package"])).resolve().is_relative_to(trees[name].resolve()), run["package"]
                per_request = float(run["cpu"]) / int(run["requests"]) * 1e6  # type: ignore[call-overload]
                cpu[name].append(per_request)
                digests[name].add(str(run["digest"]))
                print(f"round {round_ + 1}  {name:>8}: {per_request:6.0f} CPU us per request", flush=True)
        load = max(load, os.getloadavg()[0])
        expected = digests[ref]
        if same_as is not None:
            expected = {str(pinned_run(scenario, extract(same_as, Path(folder) / "same"), core)["digest"])}
        same = digests["this"] == expected and len(digests["this"]) == 1
        ratios = [a / b for a, b in zip(cpu["this"], cpu[ref])]
        print(f"scenario  {scenario}: {run['requests']:,} requests, {rounds} interleaved rounds on core {core}, "
              f"load average up to {load:.2f}")
        print(f"this tree {statistics.median(cpu['this']):.0f} CPU us per request (median); "
              f"{ref}: {statistics.median(cpu[ref]):.0f}")
        print(f"ratio     this / {ref}: {statistics.median(ratios):.3f} (median of rounds; "
              f"{min(ratios):.3f}-{max(ratios):.3f}); target <= 0.5: {'PASS' if statistics.median(ratios) <= 0.5 else 'FAIL'}")
        print(f"results   {'identical' if same else 'DIFFERENT'} to {same_as or ref}'s (digest of every request's "
              "times, every step and every allocator's counters)")
        if not same:
            sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "azure-conv.yaml"))
    parser.add_argument("--skip-baseline", action="store_true", help="do not run the step-at-a-time baseline")
    parser.add_argument("--against", metavar="REF", help="compare CPU per request with git revision REF's engine")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds with --against")
    parser.add_argument("--core", type=int, default=1, help="core the --against runs are pinned to (-1: none)")
    parser.add_argument("--same-as", metavar="REF2", help="with --against: the revision whose results this tree "
                        "must reproduce, when not REF (one whose results changed on purpose after REF)")
    args = parser.parse_args()
    if args.against:
        against(args.scenario, args.against, args.rounds, args.core, args.same_as)
        return
    fast = in_subprocess(args.scenario, True)
    print(f"scenario  {args.scenario}: {fast['requests']:,.0f} requests, {fast['simulated_s']:,.1f} simulated s")
    print(f"aisim     {fast['wall_s']:.2f} wall s, {fast['speed']:,.0f}x real time, {fast['events']:,.0f} events, "
          f"peak RSS {fast['peak_rss_mb']:.0f} MB")
    if not args.skip_baseline:
        slow = in_subprocess(args.scenario, False)
        print(f"baseline  one step at a time: {slow['wall_s']:.2f} wall s, {slow['speed']:,.0f}x real time, "
              f"{slow['events']:,.0f} events, peak RSS {slow['peak_rss_mb']:.0f} MB")
        print(f"ratio     decode runs / step at a time: {fast['speed'] / slow['speed']:.2f}x faster")
    print(f"target    >= 500x real time: {'PASS' if fast['speed'] >= 500 else 'FAIL'}; "
          f"peak RSS < 500 MB: {'PASS' if fast['peak_rss_mb'] < 500 else 'FAIL'}")


if __name__ == "__main__":
    main()
