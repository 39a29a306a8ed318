"""Every mistake at once: several independent mistakes give one problem each, in one run."""

from __future__ import annotations

import json
import subprocess

from aisim.scenario import check_file, check_text

from .conftest import ROOT, TEST_SCENARIOS

FIVE_MISTAKES = """\
apiVersion: aisim/v1
kind: Scenario
metadata: {name: five-mistakes}
gpus:
  - id: gpu0
    profile: H100-SXMM
  - id: gpu1
    profile: A100-80GB
    streams:
      - {name: default, priority: -9}
models:
  - id: chat
    family: llama-3-8b
    placement: {gpus: [gpu2]}
  - id: mock
    latency: {ttft: 200ms, interToken: fast}
faults:
  - kind: api_error
    error: rate_limit
    trigger: {probability: 0.05}
    scope: {models: [chta]}
"""


def test_five_independent_mistakes_give_five_problems() -> None:
    checked = check_text(FIVE_MISTAKES, "five.yaml")
    errors = [(p.line, p.column, p.path, p.rule) for p in checked.problems if p.severity == "error"]
    assert errors == [
        (6, 14, "$.gpus[0].profile", "enum"),
        (10, 35, "$.gpus[1].streams[0].priority", "stream-priority"),
        (14, 24, "$.models[0].placement.gpus[0]", "reference"),
        (16, 40, "$.models[1].latency.interToken", "pattern"),
        (21, 22, "$.faults[0].scope.models[0]", "reference"),
    ]


def test_problems_name_what_was_expected() -> None:
    checked = check_text(FIVE_MISTAKES, "five.yaml")
    messages = {p.path: p.message for p in checked.problems}
    assert "'H100-SXMM'" in messages["$.gpus[0].profile"] and "'H100-SXM'" in messages["$.gpus[0].profile"]
    assert messages["$.faults[0].scope.models[0]"] == "unknown model 'chta'; did you mean 'chat'?"
    assert "like '200ms'" in messages["$.models[1].latency.interToken"]
    assert messages["$.models[0].placement.gpus[0]"].startswith("unknown GPU 'gpu2'")


def test_json_format_carries_the_same_records(tmp_path, python) -> None:  # type: ignore[no-untyped-def]
    doc = tmp_path / "five.yaml"
    doc.write_text(FIVE_MISTAKES)
    run = subprocess.run([python, "-m", "aisim", "validate", "--format", "json", str(doc)],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 1
    [report] = json.loads(run.stdout)
    assert report["file"] == str(doc) and report["valid"] is False
    assert {p["path"] for p in report["problems"]} >= {"$.gpus[1].streams[0].priority", "$.models[0].placement.gpus[0]"}
    assert set(report["problems"][0]) == {"file", "line", "column", "path", "message", "rule", "severity"}


def test_problems_hidden_by_a_broken_sibling_are_reported_once_in_the_same_run() -> None:
    """A duplicate id, an unknown reference or a cross-field rule shows even when its entry has another mistake."""
    checked = check_file(TEST_SCENARIOS / "invalid" / "hidden-by-siblings.yaml")
    errors = [(p.path, p.message) for p in checked.problems if p.severity == "error"]
    assert len(errors) == len(set(errors)) == 14
    assert ("$.gpus[1].id", "duplicate GPU id 'gpu0'") in errors
    assert ("$.models[1].id", "duplicate model name 'm'") in errors
    assert ("$.faults[1].name", "duplicate fault name 'f1'") in errors
    assert ("$.faults[0].scope.models[0]", "unknown model 'nosuchmodel'") in errors
    assert ("$.gpus[0].memoryPool.thresholds", "warning must be below critical") in errors


def test_a_duplicate_yaml_key_does_not_stop_the_later_stages() -> None:
    checked = check_file(TEST_SCENARIOS / "invalid" / "duplicate-key-and-more.yaml")
    assert [p.rule for p in checked.problems] == ["yaml-duplicate-key", "enum"]


def test_arrival_rates_say_what_was_expected() -> None:
    checked = check_file(TEST_SCENARIOS / "invalid" / "arrival-rates.yaml")
    messages = [p.message for p in checked.problems]
    assert messages[0] == "'0/s' is not a rate above 0, like '5/s', '600/min' or '100000/h'"
    assert messages[3] == "2000000/s is outside the arrival rates aisim draws, from 0.01/h to 1000000/s"
    assert messages[4].startswith("0.001/h is outside")


def test_a_rate_limit_of_zero_is_refused_not_a_500_at_the_first_request() -> None:
    """The limiter divides by the rate: `0/min` validated and then failed every request with a 500."""
    body = ("apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: t}\n"
            "models: [{id: m, latency: {total: 1ms}}]\nserver:\n  rateLimits: {requests: 0/min, tokens: 100/min}\n")
    problems = check_text(body, "t.yaml").problems
    assert [(p.path, p.message) for p in problems] == [
        ("$.server.rateLimits.requests", "'0/min' is not a rate above 0, like '5/s', '600/min' or '100000/h'")]
