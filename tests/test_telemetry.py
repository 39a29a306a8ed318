"""DCGM telemetry in headless runs: dcgm-exporter's exposition, values that follow the load, field
injections and XID faults from the scenario, and sampling that never changes the run.

Expected names, help texts and label order are copied from `shared/reference/dcgm-telemetry.md`;
expected values are worked out by hand from the scenario (the cost model's calibrated constants,
the power model's stated constants), never read back from the output under test.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aisim.engine.costmodel import CostModel, calibration
from aisim.engine.memory import kv_bytes_per_token
from aisim.engine.report import build_report
from aisim.engine.simulation import Simulation
from aisim.scenario import Scenario, check_text
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES
from aisim.telemetry.fields import INT64_BLANK

from .conftest import ROOT, SCENARIOS
from .engine_helpers import batch, llama, run, scenario

MIB = 2**20
H100_IDLE_W = 700 * 11 / 70
"""The power model's idle draw of a 700 W H100: 11/70 of TDP (fake-gpu-operator's `11W / 70W`)."""

DEFAULT_FAMILIES = [  # dcgm-telemetry.md §2, in field-id order, less the driver-version label field
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
]
DOUBLES = {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
           "DCGM_FI_PROF_DRAM_ACTIVE"}
COUNTERS = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"}
LABELS = re.compile(r'^(?P<name>\w+)\{gpu="0",UUID="GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}",'
                    r'pci_bus_id="[0-9A-F]{8}:[0-9A-F]{2}:00\.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
                    r'Hostname="aisim",DCGM_FI_DRIVER_VERSION="550\.54\.15"(?P<extra>[^}]*)\} (?P<value>\S+)$')


def samples(sim: Simulation, gpu: str = "g") -> list[tuple[float, dict[str, Any]]]:
    """The `gpu_sample` records of one GPU: (seconds, fields)."""
    return [(r["t_ns"] / 1e9, r["fields"]) for r in sim.timeline.records() if r["type"] == "gpu_sample" and r["gpu"] == gpu]


def idle(seconds: int = 5, **extra: Any) -> Scenario:
    """Llama-3-8B loaded on an H100, nothing to do."""
    return Scenario.model_validate({
        "apiVersion": "aisim/v1", "kind": "Scenario", "metadata": {"name": "idle"},
        "gpus": [{"id": "g", "profile": "H100-SXM"}], "models": [llama()],
        "simulation": {"until": f"{seconds}s"}, "telemetry": {"interval": "1s"}, **extra,
    })


# -- exposition --------------------------------------------------------------------------------


def test_the_exposition_has_dcgm_exporters_default_families_labels_and_formats() -> None:
    sim = run(scenario([llama()], [batch(8, 500, 100)], telemetry={"interval": "1s"}))
    assert sim.telemetry is not None
    text = sim.telemetry.exposition()
    families = list(text_string_to_metric_families(text))
    expected = [name for name in DEFAULT_FAMILIES if name != "DCGM_FI_DEV_VGPU_LICENSE_STATUS"]  # blank off vGPU
    assert [f.name for f in families] == expected
    assert {f.name for f in families if f.type == "counter"} == COUNTERS
    assert all(f.type == "gauge" for f in families if f.name not in COUNTERS)
    assert "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" in text
    assert "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n" in text
    assert ("# HELP DCGM_FI_PROF_DRAM_ACTIVE Ratio of cycles the device memory interface is active sending or "
            "receiving data.\n") in text
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(lines) == len(expected)
    for line in lines:
        found = LABELS.match(line)
        assert found, line
        name, value = found["name"], found["value"]
        assert not name.endswith("_total")
        assert re.fullmatch(r"\d+\.\d{6}" if name in DOUBLES else r"\d+", value), line
        assert found["extra"] == (',err_code="0",err_msg="No Error"' if name == "DCGM_FI_DEV_XID_ERRORS" else "")
    assert "DCGM_FI_DRIVER_VERSION{" not in text  # a label, never a series


@pytest.mark.parametrize(("style", "label"), [("hostname", ',hostname="node-7",'), ("none", None)])
def test_the_hostname_label_follows_the_scenario(style: str, label: str | None) -> None:
    sim = Simulation(idle(1, telemetry={"interval": "1s", "dcgm": {"hostnameLabel": style, "hostname": "node-7"}}))
    sim.run()
    assert sim.telemetry is not None
    line = next(line for line in sim.telemetry.exposition().splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    if label is None:
        assert "ostname" not in line and 'modelName="NVIDIA H100 80GB HBM3",DCGM_FI_DRIVER_VERSION=' in line
    else:
        assert label in line and "Hostname" not in line


def test_a_field_list_chooses_the_families_and_blank_values_have_no_line() -> None:
    fields = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_VGPU_LICENSE_STATUS"]
    sim = Simulation(idle(1, telemetry={"interval": "1s", "dcgm": {"fields": fields}}))
    sim.run()
    assert sim.telemetry is not None
    text = sim.telemetry.exposition()
    assert [f.name for f in text_string_to_metric_families(text)] == ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"]
    assert "DCGM_FI_DRIVER_VERSION" not in text  # not among the fields: no label either


# -- values that follow the load ----------------------------------------------------------------


def test_an_idle_gpu_reads_zero_utilisation_idle_power_and_idle_clocks() -> None:
    sim = Simulation(idle(5))
    sim.run()
    series = samples(sim)
    assert [t for t, _ in series] == [0, 1, 2, 3, 4, 5]
    for t, fields in series:
        assert fields["DCGM_FI_DEV_GPU_UTIL"] == 0 and fields["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 0.0
        assert fields["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(H100_IDLE_W)
        assert fields["DCGM_FI_DEV_SM_CLOCK"] == 210 and fields["DCGM_FI_DEV_GPU_TEMP"] == 33
        assert fields["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == round(H100_IDLE_W * 1000 * t)  # mJ
        assert fields["DCGM_FI_PROF_PCIE_RX_BYTES"] == 0
    assert 'DCGM_FI_DEV_POWER_USAGE{' in (text := sim.telemetry.exposition())  # type: ignore[union-attr]
    assert re.search(r"DCGM_FI_DEV_POWER_USAGE\{[^}]*\} 110\.000000\n", text)


def test_a_gpu_kept_busy_by_long_prefills_reads_near_100_percent() -> None:
    # 8,192-token steps of 8,000-token prompts: each is about 180 ms of GEMMs (2 x 8.03e9 x 8192 FLOPs at the
    # ~720 TFLOP/s H100's BF16 GEMM table reaches) plus causal attention; the host's CPU work is the
    # engine core's and its 384 eager launches run while the kernels do, so kernels run nearly all the time.
    # 78 such steps last about 12 s. The first second is left out: the GPU waits there for the API server to
    # tokenize the first prompt and hand it over (`frontend_token_ns` x 8,000 + `frontend_ns`, tens of ms).
    sim = run(scenario([llama()], [batch(80, 8000, 1)], telemetry={"interval": "1s"}))
    busy = [f for t, f in samples(sim)[2:] if t <= 10]
    assert len(busy) == 9
    gemm_share = 0.9  # no BF16 GEMM of the H100's tables reaches 90 % of the datasheet peak
    for fields in busy:
        assert fields["DCGM_FI_DEV_GPU_UTIL"] >= 97
        assert fields["DCGM_FI_DEV_SM_CLOCK"] == 1980
        share = fields["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
        # compute-bound: tensor pipes active at between attention's achieved share (0.5) and the GEMMs'
        assert 0.5 * share < fields["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] < gemm_share * share
        assert fields["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(H100_IDLE_W + (700 - H100_IDLE_W) * share)


def test_decoding_one_request_keeps_the_gpu_busy_for_the_kernel_share_of_each_step() -> None:
    # One request decoding: on the host each step spends what of the engine's CPU work its kernels do not hide and
    # a CUDA graph launch of 15 us + 0.5 us x 384 kernels; on the GPU its layers' operators (the cost model's
    # GPU part). The GPU is busy for the kernels' share; the memory interface is active for the weights it
    # reads (every linear layer and the LM head, not the embedding table) at the datasheet 3.35 TB/s.
    arch = MODEL_FAMILIES["llama-3-8b"]
    # a `vllm serve` engine (the default entrypoint): the engine core's CPU terms, the same as offline's
    served = calibration.constants("H100-SXM").default
    cost = CostModel(arch, GPU_PROFILES["H100-SXM"], served, 1, kv_bytes_per_token(arch, 1))
    gpu_ns = cost.step_parts(1, 1, 1100, 1101, 1, 1100)[1]  # mid-run context; its KV is < 1 % of the bytes
    # async scheduling (the server's default): the engine core's CPU work runs under the kernels, so only the
    # critical-path term, the graph launch and the kernels' gaps are host time (the CPU work is shorter than the
    # kernels)
    cpu_ns = served.step_overhead_ns + served.per_request_ns + served.per_token_ns
    host_ns = max(cpu_ns - gpu_ns, 0) + served.critical_ns + 15_000 + 500 * 32 * 12
    share = gpu_ns / (gpu_ns + host_ns)
    # the weights it reads (every linear layer and the LM head) and the KV of its ~1,100-token context
    weights_ns = ((arch.params - arch.vocab * arch.hidden) * 2 + 1101 * kv_bytes_per_token(arch, 1)) / 3.35e12 * 1e9
    sim = run(scenario([llama()], [batch(1, 100, 2000)], telemetry={"interval": "1s"}))
    steady = [f for t, f in samples(sim)[2:] if t <= 10]  # 2,000 steps of about 5.3 ms
    assert len(steady) == 9
    for fields in steady:
        assert fields["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(share, abs=0.01)
        assert fields["DCGM_FI_DEV_GPU_UTIL"] == pytest.approx(100 * share, abs=1)
        assert fields["DCGM_FI_PROF_DRAM_ACTIVE"] == pytest.approx(weights_ns / (gpu_ns + host_ns), abs=0.01)
        assert fields["DCGM_FI_DEV_MEM_COPY_UTIL"] == pytest.approx(100 * weights_ns / (gpu_ns + host_ns), abs=1)


def test_power_integrates_to_the_energy_counter_and_heats_the_gpu_towards_its_steady_state() -> None:
    sim = run(scenario([llama()], [batch(360, 8000, 1)], telemetry={"interval": "1s"}))
    series = samples(sim)
    for (t0, before), (t1, after) in itertools.pairwise(series):
        if t1 - t0 == 1:
            energy = after["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] - before["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
            assert energy == pytest.approx(after["DCGM_FI_DEV_POWER_USAGE"] * 1000, abs=1)  # W x 1 s in mJ
    temps = [f["DCGM_FI_DEV_GPU_TEMP"] for t, f in series if t <= 60]
    assert temps == sorted(temps)  # heating all along
    load = sum(f["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] for t, f in series if 0 < t <= 60) / 60
    assert load > 0.93
    # first order, tau 60 s: 60 s at a load L from 33 C reach 33 + 45 L (1 - 1/e)
    assert temps[-1] == pytest.approx(33 + 45 * load * (1 - math.exp(-1)), abs=1)


def test_fb_used_is_the_pools_reserved_bytes_plus_memory_outside_the_pool() -> None:
    hog = {"name": "hog", "kind": "oom", "size": "4GiB", "trigger": {"at": "2s"}, "scope": {"gpus": ["g"]}}
    sim = Simulation(idle(4, faults=[hog]))
    sim.run()
    series = dict(samples(sim))
    pool = sim.pools["g"]
    used = pool.memory_stats()["reserved_bytes.all.current"] + pool.device.non_pytorch + 4 * 2**30
    assert series[4]["DCGM_FI_DEV_FB_USED"] == used // MIB
    assert series[4]["DCGM_FI_DEV_FB_FREE"] == (pool.capacity - used) // MIB
    assert series[4]["DCGM_FI_DEV_FB_USED"] - series[1]["DCGM_FI_DEV_FB_USED"] == 4096  # the hog's 4 GiB
    assert series[1]["DCGM_FI_DEV_FB_USED"] + series[1]["DCGM_FI_DEV_FB_FREE"] in (80998, 80997)  # 79.1 GiB in MiB
    assert series[1]["DCGM_FI_DEV_FB_RESERVED"] == 0


def test_stream_scheduled_steps_and_direct_steps_read_the_same_utilisation() -> None:
    # per-layer kernels go through the stream scheduler and copy engines; step detail bypasses both
    step = run(scenario([llama()], [batch(6, 300, 400)], telemetry={"interval": "1s"}))
    layer = run(scenario([llama()], [batch(6, 300, 400)], telemetry={"interval": "1s"},
                         simulation={"detail": "layer"}))
    for (t, a), (u, b) in zip(samples(step)[1:6], samples(layer)[1:6]):
        assert t == u
        assert a["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(b["DCGM_FI_PROF_GR_ENGINE_ACTIVE"], abs=0.01)
        assert a["DCGM_FI_PROF_DRAM_ACTIVE"] == pytest.approx(b["DCGM_FI_PROF_DRAM_ACTIVE"], abs=0.01)
        assert a["DCGM_FI_PROF_PCIE_RX_BYTES"] == pytest.approx(b["DCGM_FI_PROF_PCIE_RX_BYTES"], rel=0.05)
        assert a["DCGM_FI_PROF_PCIE_RX_BYTES"] > 0


def test_tensor_parallel_all_reduces_count_on_nvlink() -> None:
    # Llama-3-8B over 2 GPUs: per token, 2 all-reduces x 32 layers x 2 (2-1)/2 x 4096 x 2 bytes = 524,288 bytes
    gpus = [{"id": "g", "profile": "H100-SXM", "count": 2}]
    model = {"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"], "tensorParallel": 2}}
    sim = run(scenario([model], [batch(1, 100, 10)], gpus, telemetry={"interval": "1s"}, simulation={"until": "1s"}))
    last = samples(sim, "g-0")[-1][1]
    assert last["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == 524_288 * (100 + 9)  # prompt, then 9 decode steps
    assert samples(sim, "g-1")[-1][1]["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == 524_288 * 109


# -- sampling changes nothing ---------------------------------------------------------------------


def _without_telemetry(sim: Simulation) -> tuple[str, str]:
    report = build_report(sim)
    for name in list(report["gpus"]):
        report["gpus"][name].pop("telemetry", None)
        if not report["gpus"][name]:
            del report["gpus"][name]
    records = [r for r in sim.timeline.records() if r["type"] != "gpu_sample"]
    return json.dumps(report, sort_keys=True), json.dumps(records, sort_keys=True)


@pytest.mark.parametrize("macro", [True, False])
def test_sampling_does_not_change_the_run(macro: bool) -> None:
    s = scenario([llama()], [batch(40, 600, 1000)])  # long enough for several samples
    plain = Simulation(s, macro_steps=macro, telemetry=False)
    plain.run()
    sampled = Simulation(s, macro_steps=macro, telemetry=True)
    sampled.run()
    assert sampled.telemetry is not None and sampled.telemetry.samples > 3
    assert _without_telemetry(plain) == _without_telemetry(sampled)
    assert plain.kernel.now == sampled.kernel.now and plain.kernel.processed == sampled.kernel.processed


def test_runs_of_decode_steps_in_flight_are_sampled_as_single_steps_are() -> None:
    s = scenario([llama()], [batch(40, 600, 300)], telemetry={"interval": "250ms"})
    fast, slow = run(s, macro_steps=True), run(s, macro_steps=False)
    a, b = samples(fast), samples(slow)
    assert len(a) == len(b) > 10
    for (t, x), (u, y) in zip(a, b):
        assert t == u and x.keys() == y.keys()
        for name in x:
            assert x[name] == pytest.approx(y[name], rel=1e-6, abs=1), (t, name)


# -- injections -------------------------------------------------------------------------------------


def test_a_dcgm_field_fault_overrides_the_derived_value_for_its_duration() -> None:
    fault = {"name": "hot", "kind": "dcgm_field", "field": "DCGM_FI_DEV_GPU_TEMP", "value": 91.7, "duration": "2500ms",
             "trigger": {"at": "2s"}, "scope": {"gpus": ["g"]}}
    sim = Simulation(idle(6, faults=[fault]))
    sim.run()
    temps = {t: f["DCGM_FI_DEV_GPU_TEMP"] for t, f in samples(sim)}
    assert temps == {0: 33, 1: 33, 2: 91, 3: 91, 4: 91, 5: 33, 6: 33}  # int64 field: 91.7 stored as 91
    records = [r for r in sim.timeline.records() if r["type"] in ("dcgm_inject", "dcgm_clear")]
    assert records == [
        {"t_ns": 2_000_000_000, "type": "dcgm_inject", "gpu": "g", "field": "DCGM_FI_DEV_GPU_TEMP", "value": 91,
         "until_ns": 4_500_000_000, "source": "hot"},
        {"t_ns": 4_500_000_000, "type": "dcgm_clear", "gpu": "g", "field": "DCGM_FI_DEV_GPU_TEMP", "reason": "expired"},
    ]


def test_injecting_a_blank_value_hides_the_field_as_dcgm_exporter_does() -> None:
    fault = {"kind": "dcgm_field", "field": "DCGM_FI_DEV_GPU_UTIL", "value": INT64_BLANK + 2,
             "trigger": {"at": "1s"}, "scope": {"gpus": ["g"]}}
    sim = Simulation(idle(2, faults=[fault]))
    sim.run()
    assert ["DCGM_FI_DEV_GPU_UTIL" in f for _, f in samples(sim)] == [True, False, False]
    assert "DCGM_FI_DEV_GPU_UTIL" not in sim.telemetry.exposition()  # type: ignore[union-attr]


def test_unknown_or_string_fields_are_scenario_errors() -> None:
    checked = check_text(
        "apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: t}\ngpus: [{id: g, profile: H100-SXM}]\n"
        "models: [{id: m, latency: {total: 1s}}]\n"
        "faults:\n"
        "  - {kind: dcgm_field, field: DCGM_FI_DEV_GPU_TEMPS, value: 1, trigger: {at: 1s}, scope: {gpus: [g]}}\n"
        "  - {kind: dcgm_field, field: DCGM_FI_DRIVER_VERSION, value: 1, trigger: {at: 1s}, scope: {gpus: [g]}}\n"
        "telemetry: {dcgm: {fields: [DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FOO]}}\n"
        "server: {listeners: [{port: 9400, personalities: [dcgm-metrics, vllm-metrics]}]}\n",
        "t.yaml",
    )
    found = {p.path: p.message for p in checked.problems if p.severity == "error"}
    assert list(found) == ["$.faults[0].field", "$.faults[1].field", "$.telemetry.dcgm.fields[1]",
                           "$.server.listeners[0].personalities"]
    assert found["$.faults[0].field"] == ("'DCGM_FI_DEV_GPU_TEMPS' is not a DCGM field aisim simulates; "
                                          "did you mean 'DCGM_FI_DEV_GPU_TEMP'?")
    assert found["$.faults[1].field"].startswith("'DCGM_FI_DRIVER_VERSION' is a string field")
    assert found["$.server.listeners[0].personalities"] == (
        "dcgm-metrics and vllm-metrics would both serve /metrics; give dcgm-metrics a listener of its own "
        "(dcgm-exporter listens on :9400)")
    assert found["$.telemetry.dcgm.fields[1]"].startswith("'DCGM_FI_DEV_FOO' is not a DCGM field aisim exports")


# -- XIDs -----------------------------------------------------------------------------------------


def two_gpus(code: int, at: str = "3s", profile: str = "H100-SXM") -> Simulation:
    """Llama-3-8B replicas on g-0 and g-1, a request every 200 ms for 10 s, XID `code` on g-1."""
    s = scenario(
        [{"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g-0", "g-1"]}, "engine": {"maxModelLen": 4096}}],
        [{"name": "p", "model": "m", "arrival": {"kind": "constant", "rate": "5/s"}, "requests": 50,
          "promptTokens": 200, "outputTokens": 100}],
        [{"id": "g", "profile": profile, "count": 2}],
        faults=[{"name": "x", "kind": "xid", "code": code, "trigger": {"at": at}, "scope": {"gpus": ["g-1"]}}],
    )
    return run(s)


def test_xid_79_kills_the_engine_on_the_lost_gpu_and_blanks_its_telemetry() -> None:
    sim = two_gpus(79)
    served = sim.models["m"]
    dead, alive = served.engines[1], served.engines[0]
    assert dead.dead == "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    assert not alive.dead
    failed = [r for r in sim.requests if r.outcome == "failed"]
    assert failed and all(r.finished_at == 3_000_000_000 for r in failed)  # those on g-1 at that instant
    assert all(r.outcome == "completed" for r in sim.requests if r.arrival > 3_000_000_000)  # routed to g-0
    assert served.lifecycle.lives["1"].state.value == "DEGRADED" and not served.crash
    after = [f for t, f in samples(sim, "g-1") if t >= 3]
    assert after and all(f == {"DCGM_FI_DEV_XID_ERRORS": 79} for f in after)
    text = sim.telemetry.exposition()  # type: ignore[union-attr]
    xid_lines = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_XID_ERRORS{")]
    assert xid_lines[0].endswith(',err_code="0",err_msg="No Error"} 0')
    assert xid_lines[1].startswith('DCGM_FI_DEV_XID_ERRORS{gpu="1",')
    assert xid_lines[1].endswith(',err_code="79",err_msg="GPU has fallen off the bus"} 79')
    assert sum(line.startswith("DCGM_FI_DEV_GPU_UTIL{") for line in text.splitlines()) == 1  # only g-0's
    [xid] = [r for r in sim.timeline.records() if r["type"] == "xid"]
    assert (xid["gpu"], xid["code"], xid["effect"], xid["killed"]) == ("g-1", 79, "gpu_lost", "m/1")
    summary = build_report(sim)["gpus"]["g-1"]["telemetry"]
    assert summary["xids"] == [79] and summary["fell_off_bus_s"] == 3.0


def test_xid_79_on_the_only_gpu_makes_the_model_unavailable_and_fails_later_requests() -> None:
    s = scenario([llama()], [{"name": "p", "model": "m", "arrival": {"kind": "constant", "rate": "5/s"}, "requests": 20,
                              "promptTokens": 200, "outputTokens": 50}],
                 faults=[{"kind": "xid", "code": 79, "trigger": {"at": "2s"}, "scope": {"gpus": ["g"]}}])
    sim = run(s)
    served = sim.models["m"]
    assert served.lifecycle.lives["1"].state.value == "UNAVAILABLE"
    assert served.crash.startswith("NVRM: Xid (PCI:0000:08:00): 79,")
    late = [r for r in sim.requests if r.arrival >= 2_000_000_000]
    assert late and all(r.outcome == "failed" and r.error.startswith("EngineCore encountered an issue") for r in late)
    assert build_report(sim)["models"]["m"]["state"] == "DEAD"


@pytest.mark.parametrize(("code", "remapped"), [(48, ("UNCORRECTABLE", 1)), (63, ("CORRECTABLE", 1)), (64, None)])
def test_memory_xids_degrade_the_model_and_count_remapped_rows(code: int, remapped: tuple[str, int] | None) -> None:
    sim = two_gpus(code)
    served = sim.models["m"]
    assert not any(e.dead for e in served.engines)
    assert all(r.outcome == "completed" for r in sim.requests)
    assert served.lifecycle.lives["1"].state.value == "DEGRADED"
    last = samples(sim, "g-1")[-1][1]
    assert last["DCGM_FI_DEV_XID_ERRORS"] == code
    if remapped:
        assert last[f"DCGM_FI_DEV_{remapped[0]}_REMAPPED_ROWS"] == remapped[1]
    else:
        assert last["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 1
    assert samples(sim, "g-0")[-1][1]["DCGM_FI_DEV_XID_ERRORS"] == 0


@pytest.mark.parametrize("code", [13, 31, 43, 94, 95])
def test_application_and_ecc_xids_kill_the_engines_on_their_gpu_only(code: int) -> None:
    sim = two_gpus(code)
    served = sim.models["m"]
    assert served.engines[1].dead.startswith(f"NVRM: Xid (PCI:0000:18:00): {code},") and not served.engines[0].dead
    assert served.lifecycle.lives["1"].state.value == "DEGRADED"
    assert samples(sim, "g-1")[-1][1]["DCGM_FI_DEV_GPU_UTIL"] == 0  # the GPU is still there, idle


def test_an_unknown_xid_is_recorded_with_exporters_unknown_message_and_changes_nothing() -> None:
    sim = two_gpus(200)
    assert not any(e.dead for e in sim.models["m"].engines)
    assert sim.models["m"].lifecycle.lives["1"].state.value == "READY"
    assert 'err_code="200",err_msg="Unknown Error"} 200' in sim.telemetry.exposition()  # type: ignore[union-attr]


def test_an_nvlink_xid_kills_tensor_parallel_engines() -> None:
    gpus = [{"id": "g", "profile": "H100-SXM", "count": 2}]
    model = {"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"], "tensorParallel": 2}}
    s = scenario([model], [batch(2, 100, 500)], gpus,
                 faults=[{"kind": "xid", "code": 74, "trigger": {"at": "1s"}, "scope": {"gpus": ["g-1"]}}])
    sim = run(s)
    assert sim.models["m"].engines[0].dead.startswith("NVRM: Xid (PCI:0000:18:00): 74,")
    assert sim.models["m"].lifecycle.lives["1"].state.value == "UNAVAILABLE"


def test_gpus_without_row_remapping_or_dcgm_have_no_such_series() -> None:
    s = scenario([{"id": "m", "latency": {"total": "10ms"}}], [batch(1, 10, 1)],
                 [{"id": "t4", "profile": "T4"}, {"id": "amd", "profile": "MI300X"}], telemetry={"interval": "1s"})
    sim = run(s)
    assert sim.telemetry is not None and list(sim.telemetry.boards) == ["t4"]  # DCGM sees NVIDIA GPUs only
    fields = samples(sim, "t4")[0][1]
    assert "DCGM_FI_DEV_ROW_REMAP_FAILURE" not in fields and "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in fields
    assert 'modelName="Tesla T4"' in sim.telemetry.exposition()


def test_the_windowed_xid_count_when_enabled() -> None:
    faults = [{"kind": "xid", "code": 63, "trigger": {"every": "2s", "until": "5s"}, "scope": {"gpus": ["g"]}}]
    telemetry = {"interval": "1s", "dcgm": {"fields": ["DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_XID_ERRORS"],
                                            "xidCountWindow": "4s"}}
    sim = Simulation(idle(5, faults=faults, telemetry=telemetry))
    sim.run()
    text = sim.telemetry.exposition()  # type: ignore[union-attr]
    # XIDs at 2 s and 4 s; at 5 s the window (1 s, 5 s] holds both
    assert re.search(r'DCGM_EXP_XID_ERRORS_COUNT\{gpu="0",[^}]*,window_size_in_ms="4000",xid="63"\} 2\n', text)


# -- aisim run --metrics ----------------------------------------------------------------------------


def test_run_writes_the_sampled_series_and_the_final_exposition(python: str, tmp_path: Path) -> None:
    series, final = tmp_path / "out.csv", tmp_path / "out.prom"
    for target in (series, final):
        done = subprocess.run([python, "-m", "aisim", "run", str(SCENARIOS / "xid.yaml"), "--quiet", "--metrics", str(target)],
                              capture_output=True, text=True, cwd=ROOT, check=False)
        assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(series.open()))
    assert list(rows[0])[:4] == ["time_s", "gpu", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK"]
    assert [(r["time_s"], r["gpu"]) for r in rows[:4]] == [("0", "gpu-0"), ("0", "gpu-1"), ("1", "gpu-0"), ("1", "gpu-1")]
    lost = [r for r in rows if r["gpu"] == "gpu-1" and float(r["time_s"]) >= 30]
    assert lost and all(r["DCGM_FI_DEV_XID_ERRORS"] == "79" and r["DCGM_FI_DEV_GPU_UTIL"] == "" for r in lost)
    hot = {r["time_s"]: r["DCGM_FI_DEV_GPU_TEMP"] for r in rows if r["gpu"] == "gpu-0"}
    assert [hot[str(t)] for t in range(45, 55)] == ["91"] * 10 and hot["55"] != "91"
    last = [r for r in rows if r["gpu"] == "gpu-0"][-1]
    families = {f.name: f.samples for f in text_string_to_metric_families(final.read_text())}
    assert families["DCGM_FI_DEV_GPU_UTIL"][0].value == float(last["DCGM_FI_DEV_GPU_UTIL"])
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0].value == float(last["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
    assert [s.labels["err_code"] for s in families["DCGM_FI_DEV_XID_ERRORS"]] == ["0", "79"]
