"""aisim's scheduler against vLLM's own, step for step.

Every golden trace in tests/data/schedules (recorded from vLLM's V1 scheduler by
tools/record_vllm_schedule.py; its README says how) goes through `aisim schedule` with the limits
it was recorded under, and every step record must equal vLLM's, the order inside `scheduled` aside.
No vLLM is needed here.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aisim.cli import main

DATA = Path(__file__).parent / "data" / "schedules"
CASES: dict[str, dict[str, Any]] = json.loads((DATA / "cases.json").read_text())


def _read(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _argv(name: str, out: Path) -> list[str]:
    limits = CASES[name]["limits"]
    argv = ["schedule", str(DATA / f"{name}.trace.jsonl.gz"), "--num-gpu-blocks", str(limits["num_gpu_blocks"]),
            "--block-size", str(limits["block_size"]), "--max-num-seqs", str(limits["max_num_seqs"]),
            "--max-num-batched-tokens", str(limits["max_num_batched_tokens"]), "--steps", str(out)]
    return argv + ["--no-prefix-caching"] * (not limits["prefix_caching"]) + ["--async"] * limits["async"]


def _canonical(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "scheduled": sorted(map(tuple, record["scheduled"]))}


@pytest.mark.parametrize("name", sorted(CASES))
def test_aisim_schedule_makes_vllms_decisions_step_for_step(name: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "steps.jsonl"
    assert main(_argv(name, out)) == 0
    ours, theirs = _read(out), _read(DATA / f"{name}.steps.jsonl.gz")
    for mine, vllm in zip(ours, theirs):
        mine, vllm = _canonical(mine), _canonical(vllm)
        if mine != vllm:
            fields = {key: {"aisim": mine[key], "vllm": vllm.get(key)} for key in mine if mine[key] != vllm.get(key)}
            pytest.fail(f"{name}: first divergence at step {vllm['step']}: {json.dumps(fields)}")
    assert len(ours) == len(theirs) == CASES[name]["steps"]
    assert f"in {len(ours)} steps: {CASES[name]['preemptions']} preemptions" in capsys.readouterr().out


def test_the_golden_traces_cover_what_the_scheduler_must_get_right() -> None:
    """Chunked prefill past the budget, prefix hits (some on blocks allocated in the same step),
    preemption and re-admission, the max_num_seqs cap; sync and async; block sizes 16 and 32."""
    seen: set[str] = set()
    for name, case in CASES.items():
        limits = case["limits"]
        seen |= {f"async={limits['async']}", f"block_size={limits['block_size']}"}
        prompts = {t["req_id"]: t["prompt_token_ids"] for t in _read(DATA / f"{name}.trace.jsonl.gz")}
        for step in _read(DATA / f"{name}.steps.jsonl.gz"):
            entries = step["scheduled"]
            if any(kind == "P" and how == "run" and before > 0 for _, _, kind, how, before in entries):
                seen.add("chunked prefill")
            if step["preempted"]:
                seen.add("preemption")
            if any(how == "resumed" for _, _, _, how, _ in entries):
                seen.add("re-admission")
                if any(step["prefix_hit_tokens"].get(r, 0) for r, _, _, how, _ in entries if how == "resumed"):
                    seen.add("re-admission hitting its own blocks")
            if step["n_running"] == limits["max_num_seqs"] and step["n_waiting"]:
                seen.add("max_num_seqs cap")
            new = [r for r, _, _, how, _ in entries if how == "new"]
            for later in new:  # a hit on blocks another request of the same step allocated
                hit = step["prefix_hit_tokens"][later]
                if hit and any(step["prefix_hit_tokens"][first] == 0 and prompts[first][:hit] == prompts[later][:hit]
                               for first in new[:new.index(later)]):
                    seen.add("same-step hit")
    assert seen >= {"async=True", "async=False", "block_size=16", "block_size=32", "chunked prefill", "preemption",
                    "re-admission", "re-admission hitting its own blocks", "max_num_seqs cap", "same-step hit"}
    assert len(CASES) >= 20


def test_the_command_reports_a_trace_that_can_never_run(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"req_id": "big", "arrival_step": 0, "prompt_token_ids": list(range(1, 200)),
                                 "max_tokens": 4}) + "\n")
    run = subprocess.run([sys.executable, "-m", "aisim", "schedule", str(trace), "--num-gpu-blocks", "8",
                          "--block-size", "16", "--max-num-seqs", "4", "--max-num-batched-tokens", "64"],
                         check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "request big (199 tokens) cannot be admitted: its sequence needs 13 blocks, the cache has 7" in run.stderr
