"""Faults in a headless run, through `aisim run` as a user runs it: the API faults act on the simulated clients
(counted as the client counts them), and the report's `faults` section, as JSON and as text, says which fired,
when, on what and with what effect.

The expected values are worked out by hand from `tests/scenarios/valid/headless-faults.yaml`: the chat source
sends request k at k seconds; the mock answers its first token 50 ms after arrival and one every 10 ms after it,
10 tokens; a stream fault with `afterTokens: n` acts on token n + 1, at arrival + 50 ms + n x 10 ms.
"""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import ROOT, SCENARIOS, TEST_SCENARIOS

HEADLESS = TEST_SCENARIOS / "valid" / "headless-faults.yaml"


def aisim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aisim", *args], cwd=ROOT, capture_output=True, text=True, check=False,
                          timeout=120)


def test_api_faults_act_on_the_simulated_clients_and_the_json_report_says_how() -> None:
    run = aisim("run", str(HEADLESS), "--json")
    assert run.returncode == 0, run.stderr
    assert run.stderr == ("aisim run: warning: API fault 'legacy-only' never fires headless: it is scoped to "
                          "/v1/completions, and the simulated clients call /v1/chat/completions\n")
    report = json.loads(run.stdout)
    # 1: 429; 2: held 2 s, then closed; 3: disconnected (aborted); 4: truncated (a short answer, completed);
    # 5: a malformed chunk (failed); 6-8: untouched
    assert report["models"]["chat"]["requests"] == {"arrived": 8, "completed": 4, "failed": 3, "aborted": 1,
                                                    "unfinished": 0}
    faults = report["faults"]
    assert list(faults) == ["refused", "held", "dropped", "cut-short", "garbled", "legacy-only", "throttled"]

    def once(at: float, effect: str, on: str = "chat") -> dict[str, object]:
        return {"fired": 1, "first_s": round(at, 6), "last_s": round(at, 6), "on": [on], "effects": {effect: 1}}

    expected = {
        "refused": once(1.0, "failed: HTTP 429 rate_limit_exceeded"),
        "held": once(2.0 + 2.0, "failed: no answer; the server closed the connection after 2s"),
        "dropped": once(3.0 + 0.05 + 2 * 0.01, "aborted: the server closed the connection after 2 tokens"),
        "cut-short": once(4.0 + 0.05 + 3 * 0.01, "completed: the stream ended after 3 tokens without [DONE]"),
        "garbled": once(5.0 + 0.05 + 1 * 0.01, "failed: a chunk that is not JSON after 1 token"),
    }
    for name, entry in expected.items():
        assert {key: faults[name][key] for key in entry} == entry, name
    assert faults["legacy-only"]["fired"] == 0 and faults["legacy-only"]["unreachable"].startswith("it is scoped to")
    throttled = faults["throttled"]
    # llama's requests arrive at 1..5 s and take about 0.1 s: those of 2 s and 3 s run while it lasts (2 s to 4 s)
    assert {k: throttled[k] for k in ("kind", "fired", "first_s", "on", "effects", "requests_slowed")} == {
        "kind": "slowdown", "fired": 1, "first_s": 2.0, "on": ["llama/0"],
        "effects": {"steps 3x slower for 2 s": 1}, "requests_slowed": 2}


def test_the_text_report_lists_each_fault_on_one_line() -> None:
    run = aisim("run", str(HEADLESS))
    assert run.returncode == 0, run.stderr
    block = run.stdout.split("\nfaults\n", 1)[1].splitlines()
    assert block[:3] == [
        "  refused (api_error): fired once at 1.0 s on chat: failed: HTTP 429 rate_limit_exceeded",
        "  held (timeout): fired once at 4.0 s on chat: failed: no answer; the server closed the connection after 2s",
        "  dropped (disconnect): fired once at 3.1 s on chat: aborted: the server closed the connection after 2 tokens",
    ]
    assert block[5] == ("  legacy-only (api_error): never fired: it is scoped to /v1/completions, and the simulated "
                        "clients call /v1/chat/completions")
    assert block[6] == "  throttled (slowdown): fired once at 2.0 s on llama/0: steps 3x slower for 2 s; 2 requests in flight slowed"


def test_device_faults_of_the_shipped_scenarios_show_in_the_report() -> None:
    """oom.yaml: the hog takes the headroom at 40 s and every request that failed, failed after it (the engine
    died of the OOM it caused); xid.yaml: XID 79 at 30 s kills gpu-1's replica, a temperature at 45 s for 10 s."""
    oom = json.loads(aisim("run", str(SCENARIOS / "oom.yaml"), "--json").stdout)
    hog = oom["faults"]["memory-hog"]
    assert (hog["fired"], hog["first_s"], hog["on"]) == (1, 40.0, ["gpu0"])
    (effect,) = hog["effects"]
    assert effect.startswith("another process holds ") and effect.endswith(" GiB")
    assert hog["requests_failed"] == oom["models"]["llama3-8b"]["requests"]["failed"] > 0
    text = aisim("run", str(SCENARIOS / "xid.yaml")).stdout.split("\nfaults\n", 1)[1].splitlines()
    assert text[0].startswith("  off-the-bus (xid): fired once at 30.0 s on gpu-1: XID 79: ")
    assert "killed llama3-8b/1" in text[0]
    assert text[1] == "  hot-reading (dcgm_field): fired once at 45.0 s on gpu-0: DCGM_FI_DEV_GPU_TEMP = 91 until 55 s"
