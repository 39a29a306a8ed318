"""`aisim memory`: vLLM's KV-cache sizing, predicted without a GPU."""

from __future__ import annotations

import json
import re
import subprocess

from .conftest import ROOT, SCENARIOS

VLLM_LOGGED_TOKENS = 27_943 * 16
"""Llama-3.1-8B on an 80 GB GPU (79.11 GiB) at 0.90: "# cuda blocks: 27943" (gpu-memory-and-streams.md §4.3)."""


def _memory(python: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "aisim", "memory", *args], capture_output=True, text=True, cwd=ROOT, check=False)


def test_llama3_8b_on_h100_is_within_ten_percent_of_what_vllm_logs(python: str) -> None:
    run = _memory(python, "--model", "llama-3-8b", "--gpu", "H100-SXM")
    assert run.returncode == 0, run.stderr
    tokens = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", run.stdout).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert abs(tokens - VLLM_LOGGED_TOKENS) / VLLM_LOGGED_TOKENS < 0.10
    assert "Maximum concurrency for 8,192 tokens per request:" in run.stdout and "fits: yes" in run.stdout


def test_a_model_that_does_not_fit_says_so_and_exits_one(python: str) -> None:
    run = _memory(python, "--model", "llama-3-8b", "--gpu", "T4", "--json")
    [result] = json.loads(run.stdout)
    assert run.returncode == 1 and result["fits"] is False and result["num_blocks"] == 0
    assert result["weights"] > result["capacity"] * 0.9  # 16 GB of weights on a 14.75 GiB card


def test_every_simulated_model_of_a_scenario(python: str) -> None:
    run = _memory(python, str(SCENARIOS / "priorities.yaml"), "--json")
    assert [r["model"] for r in json.loads(run.stdout)] == ["chat", "embedder"]
    assert _memory(python, "--model", "llama-9000", "--gpu", "H100-SXM").returncode == 2


def test_weights_larger_than_the_gpu_and_no_room_for_the_cache_are_said_as_vllm_fails(python: str) -> None:
    """Llama-3-70B on one H100: the weights (131 GiB) never load, so there is no memory profile to print;
    Llama-3-8B at a utilisation of 0.1: vLLM's own start-up error, not a negative KV cache."""
    big = _memory(python, "--model", "llama-3-70b", "--gpu", "H100-SXM")
    assert big.returncode == 1
    assert "are larger than the GPU: loading them fails with torch.OutOfMemoryError" in big.stdout
    assert "Available KV cache memory" not in big.stdout
    starved = _memory(python, "--model", "llama-3-8b", "--gpu", "H100-SXM", "--gpu-memory-utilization", "0.1")
    assert starved.returncode == 1
    assert "ValueError: No available memory for the cache blocks." in starved.stdout
    assert "fits: NO (nothing is left for the KV cache)" in starved.stdout


def test_a_tensor_parallel_size_that_does_not_split_the_heads_is_refused_as_vllm_refuses_it(python: str) -> None:
    run = _memory(python, "--model", "llama-3-8b", "--gpu", "H100-SXM", "--tensor-parallel", "3")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == ("aisim memory: --tensor-parallel: Total number of attention heads (32) must be divisible by "
                          "tensor parallel size (3).\n")
