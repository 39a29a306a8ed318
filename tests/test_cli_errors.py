"""Every way an `aisim` command fails: one report on stderr, the exit status, never a traceback.

The messages are the command line's contract (scripts grep them): each expected line is written out here
as the command has always worded it. Commands run in this process through `aisim.cli.main`, except where a
server must fail to bind.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from aisim.cli import main
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES

from .conftest import ROOT, TEST_SCENARIOS

UNKNOWN_GPU = TEST_SCENARIOS / "invalid" / "unknown-gpu.yaml"
SYNTAX_ERROR = TEST_SCENARIOS / "invalid" / "syntax-error.yaml"
ENDLESS = ("apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: endless}\nmodels: [{id: m, latency: {total: 1ms}}]\n"
           "workload:\n  sources:\n    - {name: s, model: m, arrival: {kind: poisson, rate: 1/s}, promptTokens: 1, "
           "outputTokens: 1}\n")
GRPC_ONLY = ("apiVersion: aisim/v1\nkind: Scenario\nmetadata: {{name: grpc}}\nmodels: [{{id: m, latency: {{total: 1ms}}}}]\n"
             "server:\n  listeners:\n    - {{port: 0, personalities: [kserve]}}\n"
             "    - {{port: {port}, personalities: [kserve-grpc]}}\n")
SCHEDULE_LIMITS = ("--num-gpu-blocks", "4", "--block-size", "16", "--max-num-seqs", "4", "--max-num-batched-tokens", "1000")


def _aisim(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def endless(tmp_path: Path) -> Path:
    path = tmp_path / "endless.yaml"
    path.write_text(ENDLESS, encoding="utf-8")
    return path


@pytest.fixture
def not_a_folder(tmp_path: Path) -> Path:
    """A path whose parent is a file: nothing can be written there."""
    (tmp_path / "file").write_text("", encoding="utf-8")
    return tmp_path / "file" / "out"


def test_no_command_prints_the_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _aisim(capsys)
    assert status == 2 and out.startswith("usage: aisim [-h] [--version] COMMAND ...") and err == ""


def test_an_invalid_scenario_is_every_problem_then_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _aisim(capsys, "run", str(SYNTAX_ERROR))
    assert status == 1 and out == ""
    problem, verdict = err.splitlines()
    assert problem.startswith(f"{SYNTAX_ERROR}:7:1: error: $: while parsing a flow sequence") and problem.endswith("(yaml-syntax)")
    assert verdict == f"{SYNTAX_ERROR}: invalid (1 error)"


@pytest.mark.parametrize("command", [("serve",), ("memory",)])
def test_serve_and_memory_report_an_invalid_scenarios_problems_alone(capsys: pytest.CaptureFixture[str],
                                                                     command: tuple[str, ...]) -> None:
    status, _, err = _aisim(capsys, *command, str(UNKNOWN_GPU))
    lines = err.splitlines()
    assert status == 1 and len(lines) == 2 and all(line.startswith(f"{UNKNOWN_GPU}:") for line in lines)
    assert "unknown GPU 'gpu9'" in lines[0]


def test_run_reports_bad_flags_with_status_2(capsys: pytest.CaptureFixture[str], endless: Path, not_a_folder: Path) -> None:
    assert _aisim(capsys, "run", "--until", "5 parsecs")[::2] == (
        2, ("aisim run: --until: '5 parsecs' is not a duration with a unit, like '120ms', '2s' or '10m' "
            "(ns, us, ms, s, m, h)\n"))
    assert _aisim(capsys, "run", "--report", "bogus", str(not_a_folder))[::2] == (
        2, "aisim run: --report: unknown format 'bogus'; the one there is: inference-perf\n")
    assert _aisim(capsys, "run", "--timeline", str(not_a_folder))[::2] == (
        2, f"aisim run: cannot write {not_a_folder}: Not a directory\n")
    status, out, err = _aisim(capsys, "run", str(endless), "--until", "1s", "--report", "inference-perf",
                              str(not_a_folder))
    assert (status, out, err) == (2, "", f"aisim run: --report: cannot write {not_a_folder}: Not a directory\n")


def test_run_reports_an_endless_workload_and_a_bad_trace_row(capsys: pytest.CaptureFixture[str], endless: Path,
                                                               tmp_path: Path) -> None:
    assert _aisim(capsys, "run", str(endless))[::2] == (
        1, ("aisim run: source(s) s never stop: give workload.duration, workload.requests, a source's requests, "
            "simulation.until or --until\n"))
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
                                    "2023-11-16 18:15:47.68,many,44\n", encoding="utf-8")
    scenario = tmp_path / "trace.yaml"
    scenario.write_text("apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: t}\nmodels: [{id: m, latency: "
                        "{total: 1ms}}]\nworkload:\n  sources:\n    - {name: t, model: m, arrival: {kind: trace, "
                        "file: t.csv}}\n", encoding="utf-8")
    status, _, err = _aisim(capsys, "run", str(scenario))
    assert status == 1 and err.startswith("aisim run: trace: t.csv: row 2: ValueError(") and err.count("\n") == 1


def test_workload_import_names_the_config_that_cannot_be_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing, listed, broken = tmp_path / "missing.yaml", tmp_path / "list.yaml", tmp_path / "broken.yaml"
    listed.write_text("- 1\n- 2\n", encoding="utf-8")
    broken.write_text("a: [1, 2\n", encoding="utf-8")
    assert _aisim(capsys, "workload", "import", "inference-perf", str(missing))[::2] == (
        1, f"aisim workload import: [Errno 2] No such file or directory: '{missing}'\n")
    assert _aisim(capsys, "workload", "import", "inference-perf", str(listed))[::2] == (
        1, f"aisim workload import: {listed}: not a YAML mapping\n")
    assert _aisim(capsys, "workload", "import", "inference-perf", str(broken))[::2] == (
        1, f"aisim workload import: {broken}:2:1: not YAML: did not find expected ',' or ']'\n")


def test_serve_reports_bad_flags_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _aisim(capsys, "serve", "--delay-ms", "abc")[::2] == (
        2, "aisim serve: --delay-ms: 'abc' is not a number or a range like 120-350\n")
    assert _aisim(capsys, "serve", "--kv-transfer-config", '{"kv_role": "nope"}')[::2] == (
        2, "aisim serve: --kv-transfer-config: kv_role 'nope' is not one of kv_producer, kv_consumer, kv_both\n")


def test_serve_refuses_an_admin_listener_without_a_token(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    scenario = tmp_path / "admin.yaml"
    scenario.write_text("apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: admin}\nmodels: [{id: m, latency: "
                        "{total: 1ms}}]\nserver:\n  admin: {enabled: true}\n  listeners:\n    - {port: 0, "
                        "personalities: [openai, admin]}\n", encoding="utf-8")
    assert _aisim(capsys, "serve", str(scenario), "--host", "0.0.0.0")[::2] == (
        1, ("aisim serve: the admin personality needs server.admin.token (or server.admin.insecure: true on a "
            "loopback address)\n"))


@pytest.mark.parametrize("api_servers", ["0", "1"])
def test_serve_stops_on_a_bad_content_dataset_without_a_traceback(tmp_path: Path, api_servers: str) -> None:
    """A dataset file that exists but is not JSONL fails at start-up (in the engine core when split)."""
    (tmp_path / "bad.jsonl").write_text("not json\n", encoding="utf-8")
    scenario = tmp_path / "dataset.yaml"
    scenario.write_text("apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: ds}\nmodels:\n  - id: m\n    latency: "
                        "{ttft: 10ms, interToken: 5ms}\n    content: {kind: dataset, file: bad.jsonl}\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "aisim", "serve", str(scenario), "--port", "0", "--api-server-count",
                           api_servers], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    reason = f"{tmp_path / 'bad.jsonl'}:1: not a JSON line: Expecting value (column 1)"
    split = "the engine core exited with status 1 while starting: DatasetError: " if api_servers == "1" else ""
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"aisim serve: {split}{reason}\n")


@pytest.mark.parametrize("api_servers", ["0", "2"])
def test_serve_on_a_port_in_use_says_so(api_servers: str) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "aisim", "serve", "--port", str(port), "--api-server-count",
                               api_servers], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"aisim serve: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_tui_serve_names_the_port_in_use_before_the_tui_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        status, out, err = _aisim(capsys, "tui", "--serve", "--port", str(port))
    assert (status, out, err) == (1, "", f"aisim tui: cannot listen on 127.0.0.1:{port}: Address already in use\n")


@pytest.mark.parametrize("api_servers", ["0", "2"])
def test_serve_names_the_grpc_port_in_use(tmp_path: Path, api_servers: str) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        scenario = tmp_path / "grpc.yaml"
        scenario.write_text(GRPC_ONLY.format(port=port), encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "aisim", "serve", str(scenario), "--api-server-count", api_servers],
                              capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(f"aisim serve: cannot listen on 127.0.0.1:{port} (gRPC): ")
    assert done.stderr.count("\n") == 1


def test_tokenizer_save_names_the_folder_it_cannot_write(capsys: pytest.CaptureFixture[str], not_a_folder: Path) -> None:
    status, _, err = _aisim(capsys, "tokenizer", "save", str(not_a_folder))
    assert (status, err) == (2, f"aisim tokenizer: cannot write {not_a_folder}: Not a directory\n")


def test_memory_reports_bad_flags_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _aisim(capsys, "memory")[::2] == (2, "aisim memory: give a SCENARIO, or --model (or --config) and --gpu\n")
    assert _aisim(capsys, "memory", "--model", "bogus", "--gpu", "H100-SXM")[::2] == (
        2, f"aisim memory: unknown 'bogus'; choose one of {', '.join(MODEL_FAMILIES)}\n")
    assert _aisim(capsys, "memory", "--model", "llama-3-8b", "--gpu", "bogus")[::2] == (
        2, f"aisim memory: unknown 'bogus'; choose one of {', '.join(GPU_PROFILES)}\n")
    assert _aisim(capsys, "memory", "--model", "llama-3-8b", "--gpu", "H100-SXM", "--tensor-parallel", "3")[::2] == (
        2, ("aisim memory: --tensor-parallel: Total number of attention heads (32) must be divisible by tensor parallel "
            "size (3).\n"))


def test_replay_snapshot_inspect_and_schedule_name_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    garbage, missing = tmp_path / "garbage.bin", tmp_path / "missing.jsonl"
    garbage.write_text("garbage\n", encoding="utf-8")
    assert _aisim(capsys, "replay-snapshot", str(garbage), "--capacity", "bogus")[::2] == (
        2, ("aisim replay-snapshot: 'bogus' is not a size with a unit, like '512B', '2MiB' or '80GB' "
            "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)\n"))
    status, _, err = _aisim(capsys, "replay-snapshot", str(garbage))
    assert status == 1 and err.startswith(f"aisim replay-snapshot: {garbage}: neither a pickle nor JSON")
    assert _aisim(capsys, "inspect", str(tmp_path / "m.onnx"))[::2] == (1, f"aisim inspect: {tmp_path / 'm.onnx'}: no such file\n")
    assert _aisim(capsys, "schedule", str(missing), *SCHEDULE_LIMITS)[::2] == (
        2, f"aisim schedule: {missing}: No such file or directory\n")
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"req_id": "a", "arrival_step": 0, "prompt_token_ids": [1, 2, 3], "max_tokens": 4}\nnot json\n',
                     encoding="utf-8")
    assert _aisim(capsys, "schedule", str(trace), *SCHEDULE_LIMITS)[::2] == (
        1, f"aisim schedule: {trace}: line 2: JSONDecodeError('Expecting value: line 1 column 1 (char 0)')\n")
    prompt = ", ".join(["1"] * 200)
    trace.write_text(f'{{"req_id": "a", "arrival_step": 0, "prompt_token_ids": [{prompt}], "max_tokens": 4}}\n',
                     encoding="utf-8")
    assert _aisim(capsys, "schedule", str(trace), *SCHEDULE_LIMITS)[::2] == (
        1, (f"aisim schedule: {trace}: step 0: request a (200 tokens) cannot be admitted: its sequence needs 13 blocks, "
            "the cache has 3 (one of the 4 is vLLM's null block)\n"))


def test_an_unexpected_error_is_one_line_and_status_1(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug (an exception that is not an `AisimError`) still ends in one line, with the way to see more."""
    def broken(_: object) -> int:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr("aisim.cli._schema", broken)
    monkeypatch.delenv("AISIM_TRACEBACK", raising=False)
    assert _aisim(capsys, "schema") == (
        1, "", "aisim schema: unexpected RuntimeError: boom (a bug in aisim; AISIM_TRACEBACK=1 shows where)\n")
    monkeypatch.setenv("AISIM_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["schema"])


def test_an_interrupt_ends_the_command_with_status_130(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(_: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("aisim.cli._schema", interrupted)
    assert _aisim(capsys, "schema") == (130, "", "aisim schema: interrupted\n")
