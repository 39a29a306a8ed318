"""A Triton model repository folder as the scenario's models: configs, versions, ONNX files, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper

from aisim.scenario import check_file
from aisim.testing import running_server

from .conftest import SERVE_MODES

SCENARIO = """apiVersion: aisim/v1
kind: Scenario
metadata: {name: repository}
gpus: [{id: gpu0, profile: T4}]
server:
  modelRepository: models
  listeners: [{port: 0, personalities: [kserve]}]
"""


def linear_model(path: Path) -> None:
    """A real ONNX model: [batch, 4] float -> MatMul by a 4x3 weight -> [batch, 3]."""
    weight = helper.make_tensor("W", TensorProto.FLOAT, [4, 3], np.ones(12, dtype=np.float32).tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [weight])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def repository(root: Path, config: str) -> Path:
    (root / "models" / "linear").mkdir(parents=True)
    (root / "models" / "linear" / "config.pbtxt").write_text(config)
    linear_model(root / "models" / "linear" / "1" / "model.onnx")
    linear_model(root / "models" / "linear" / "2" / "model.onnx")
    (root / "models" / "linear" / "01").mkdir()  # not a version: starts with 0
    (root / "scenario.yaml").write_text(SCENARIO)
    return root / "scenario.yaml"


def test_a_config_without_tensors_takes_them_and_the_size_from_the_onnx_file(tmp_path: Path) -> None:
    path = repository(tmp_path, 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
                                'dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 100 }\n'
                                'instance_group [ { count: 2 kind: KIND_GPU } ]\n')
    checked = check_file(path)
    assert checked.valid, [p.render() for p in checked.problems]
    model = checked.scenario.models[0]  # type: ignore[union-attr]
    assert (model.id, model.resolved_runtime()) == ("linear", "onnxruntime")
    assert [v.version for v in model.versions] == ["1", "2"] and model.lifecycle.initial_version == "2"
    assert [(t.name, t.datatype, t.shape) for t in model.versions[0].inputs] == [("x", "FP32", [-1, 4])]
    assert model.architecture.params == 12 and model.architecture.flops_per_sample == 2 * 4 * 3
    assert model.kserve.max_batch_size == 8 and model.kserve.dynamic_batching.max_queue_delay == 100_000
    assert model.kserve.instance_groups[0].count == 2


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_a_repository_model_is_served_through_kserve(tmp_path: Path, api_servers: int) -> None:
    path = repository(tmp_path, 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
                                'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                                'output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')
    with running_server(path, api_server_count=api_servers) as url:
        client = triton.InferenceServerClient(url=url.removeprefix("http://"))
        assert client.get_model_metadata("linear")["versions"] == ["2"]  # latest version only, as Triton serves
        tensor = triton.InferInput("x", [2, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((2, 4), dtype=np.float32))
        assert client.infer("linear", [tensor]).as_numpy("y").shape == (2, 3)


def test_a_bad_config_is_reported_at_its_line_and_column(tmp_path: Path) -> None:
    path = repository(tmp_path, 'platform: "onnxruntime_onnx"\nbogus_field: 3\n')
    checked = check_file(path)
    assert not checked.valid
    problem = next(p for p in checked.problems if p.file.endswith("config.pbtxt"))
    assert (problem.line, problem.column) == (2, 1)
    assert 'Message type "inference.ModelConfig" has no field named "bogus_field"' in problem.message


def test_a_model_the_simulator_cannot_size_says_what_to_add(tmp_path: Path) -> None:
    root = tmp_path / "models" / "plan"
    (root / "1").mkdir(parents=True)
    (root / "config.pbtxt").write_text('platform: "tensorrt_plan"\nmax_batch_size: 1\n')
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    checked = check_file(tmp_path / "scenario.yaml")
    messages = [p.message for p in checked.problems]
    assert any("aisim_family" in m for m in messages)
    assert any("a scenario needs at least one model" in m for m in messages)
