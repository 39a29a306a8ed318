"""`aisim inspect`: real ONNX models built with onnx.helper, and the light models the onnx wheel ships.

Expected figures are worked out by hand from the models' dims (bytes = elements x element size,
FLOPs = 2 x multiply-accumulates) or quoted from `model-runtimes.md` §1, never read back from
the code under test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aisim.cli import main
from aisim.inspect_onnx import (
    OPS,
    UNKNOWN,
    InspectError,
    OnnxMissing,
    behaviour,
    inspect_model,
    scenario_block,
)
from aisim.scenario import check_text

onnx = pytest.importorskip("onnx")
from onnx import GraphProto, TensorProto, helper, numpy_helper  # noqa: E402 - after importorskip

OPSET = [helper.make_opsetid("", 17)]
SCENARIO_HEAD = """apiVersion: aisim/v1
kind: Scenario
metadata: {name: inspected}
gpus:
  - id: gpu0
    profile: T4
"""
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _save(tmp_path: Path, name: str, graph: GraphProto, **kwargs: object) -> Path:
    model = helper.make_model(graph, opset_imports=kwargs.pop("opsets", OPSET), ir_version=kwargs.pop("ir", 8))
    path = tmp_path / name
    onnx.save_model(model, str(path), **kwargs)  # type: ignore[arg-type]
    return path


def _mlp(batch: int | str = 2) -> GraphProto:
    """784 -> 128 -> 10 with ReLU and softmax; W1 stored as raw_data, b1 in the typed float_data field."""
    w1 = numpy_helper.from_array(np.full((784, 128), 0.01, np.float32), "w1")
    b1 = helper.make_tensor("b1", TensorProto.FLOAT, [128], [0.0] * 128)
    w2 = numpy_helper.from_array(np.full((128, 10), 0.02, np.float32), "w2")
    b2 = numpy_helper.from_array(np.zeros(10, np.float32), "b2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["logits0"], name="fc2"),
        helper.make_node("Add", ["logits0", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 784])
    y = helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10])
    return helper.make_graph(nodes, "mlp", [x], [y], [w1, b1, w2, b2])


MLP_BYTES = (784 * 128 + 128 + 128 * 10 + 10) * 4  # 407,080
MLP_FLOPS_PER_SAMPLE = 2 * 784 * 128 + 2 * 128 * 10  # 203,264


def _convnet() -> GraphProto:
    """3x32x32 -> conv 8 (pad 1) -> relu -> maxpool 2 -> depthwise 3x3 -> conv 16 (no pad) -> GAP -> gemm 10."""
    def weight(name: str, *dims: int) -> TensorProto:
        return numpy_helper.from_array(np.full(dims, 0.1, np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "c1"], ["a"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["a"], ["a1"]),
        helper.make_node("MaxPool", ["a1"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "dw"], ["d"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Conv", ["d", "c2"], ["c"]),
        helper.make_node("GlobalAveragePool", ["c"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1),
    ]
    inits = [weight("c1", 8, 3, 3, 3), weight("dw", 8, 1, 3, 3), weight("c2", 16, 8, 3, 3),
             weight("fc", 10, 16), weight("fcb", 10)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])
    return helper.make_graph(nodes, "convnet", [x], [y], inits)


CONV_FLOPS = {
    "Conv": 2 * (8 * 32 * 32) * (3 * 3 * 3) + 2 * (8 * 16 * 16) * (1 * 3 * 3) + 2 * (16 * 14 * 14) * (8 * 3 * 3),
    "Gemm": 2 * 10 * 16,
}  # 442,368 + 36,864 + 451,584 and 320


def test_mlp_weights_ops_and_flops(tmp_path: Path) -> None:
    report = inspect_model(_save(tmp_path, "mlp.onnx", _mlp()))
    assert report.valid and report.ir_version == 8 and report.opsets == {"ai.onnx": 17}
    assert report.weights.initializers == 4 and report.weights.initializer_bytes == MLP_BYTES == 407_080
    model = onnx.load(str(tmp_path / "mlp.onnx"))
    assert sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer) == MLP_BYTES
    assert {r.op: r.count for r in report.ops} == {"MatMul": 2, "Add": 2, "Relu": 1, "Softmax": 1}
    matmul = next(r for r in report.ops if r.op == "MatMul")
    assert matmul.flops == 2 * 2 * 784 * 128 + 2 * 2 * 128 * 10 == 406_528
    assert report.costs.flops == 406_528 and report.flops_per_sample == MLP_FLOPS_PER_SAMPLE
    assert [(t.name, t.datatype, t.shape) for t in report.inputs] == [("x", "FP32", [2, 784])]
    shapes = {t.name: t.dims for t in report.intermediates}
    assert shapes["h"] == [2, 128] and shapes["h2"] == [2, 128] and shapes["logits"] == [2, 10]
    assert report.declared_shapes == 0 and report.inferred_shapes == 5


def test_convnet_flops_count_groups_and_padding(tmp_path: Path) -> None:
    report = inspect_model(_save(tmp_path, "convnet.onnx", _convnet()))
    assert {r.op: r.flops for r in report.ops if r.counted} == CONV_FLOPS
    assert report.costs.flops == 931_136 and report.costs.layers == 4 and report.costs.widest == 16
    shapes = {t.name: t.dims for t in report.intermediates}
    assert shapes["p"] == [1, 8, 16, 16] and shapes["c"] == [1, 16, 14, 14] and shapes["f"] == [1, 16]
    rows = {r.op: r.behaviour for r in report.ops}
    assert (rows["Conv"].fusable, rows["Conv"].access) == (False, "compute-bound")
    assert (rows["Relu"].fusable, rows["Relu"].access) == (True, "streaming")
    assert rows["MaxPool"].access == "strided" and rows["GlobalAveragePool"].access == "reduction"
    assert rows["Flatten"].category == "view"
    assert report.weights.initializer_bytes == (216 + 72 + 1152 + 160 + 10) * 4


def test_symbolic_batch_keeps_its_name_and_counts_one_sample(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])
    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    report = inspect_model(_save(tmp_path, "sym.onnx", helper.make_graph(nodes, "g", [x], [y], [w])))
    assert report.inputs[0].dims == ["batch", 3] and report.inputs[0].shape == [-1, 3]
    assert {t.name: t.dims for t in report.intermediates}["h"] == ["batch", 4]
    assert report.outputs[0].dims == ["batch", 4]
    assert report.costs.flops is None and "'x'" in report.costs.unknown[0]
    assert report.flops_per_sample == 2 * 3 * 4
    data = report.to_dict()
    assert data["flops"] == "unknown" and data["flops_per_sample"] == 24 and data["inputs"][0]["dims"] == ["batch", 3]


def test_scenario_block_validates_and_carries_the_models_figures(tmp_path: Path) -> None:
    report = inspect_model(_save(tmp_path, "mlp net.onnx", _mlp("N")))
    block = scenario_block(report)
    checked = check_text(SCENARIO_HEAD + block)
    assert [p for p in checked.problems if p.severity == "error"] == [] and checked.scenario is not None
    [model] = checked.scenario.models
    assert model.id == "mlp-net" and model.runtime == "onnxruntime" and model.weight_bytes() == MLP_BYTES
    arch = model.resolved()
    assert (arch.layers, arch.hidden, arch.vocab, arch.dtype) == (2, 784, 10, "fp32")
    assert arch.flops_per_sample == MLP_FLOPS_PER_SAMPLE
    version = model.versions[0]
    assert [(t.name, t.datatype, t.shape) for t in version.inputs] == [("x", "FP32", [-1, 784])]
    assert [(t.name, t.shape) for t in version.outputs] == [("probs", [-1, 10])]
    assert model.kserve is not None and model.kserve.platform == "onnxruntime_onnx"
    assert model.kserve.max_batch_size == 4 and model.kserve.dynamic_batching is not None


def test_element_sizes_by_type(tmp_path: Path) -> None:
    inits = [
        helper.make_tensor("i8", TensorProto.INT8, [3, 5], list(range(15))),
        helper.make_tensor("f16", TensorProto.FLOAT16, [7], [1.0] * 7),
        helper.make_tensor("i64", TensorProto.INT64, [2, 2], [1, 2, 3, 4]),
        helper.make_tensor("i4", TensorProto.INT4, [5], [1, 2, 3, 4, 5]),
    ]
    outs = [helper.make_tensor_value_info(f"o_{t.name}", t.data_type, list(t.dims)) for t in inits]
    nodes = [helper.make_node("Identity", [t.name], [f"o_{t.name}"]) for t in inits]
    opsets = [helper.make_opsetid("", 21)]
    report = inspect_model(_save(tmp_path, "types.onnx", helper.make_graph(nodes, "g", [], outs, inits),
                                 opsets=opsets, ir=10))
    assert report.weights.bytes_by_type == {"INT8": 15, "FLOAT16": 14, "INT64": 32, "INT4": 3}
    assert report.weights.initializer_bytes == 15 + 14 + 32 + 3
    assert [t.datatype for t in report.outputs] == ["INT8", "FP16", "INT64", None]
    with pytest.raises(InspectError, match="INT4, which has no KServe v2 datatype"):
        scenario_block(report)


def test_external_data_is_sized_from_dims_and_a_missing_file_fails_the_checker(tmp_path: Path) -> None:
    path = _save(tmp_path, "ext.onnx", _mlp(), save_as_external_data=True, all_tensors_to_one_file=True,
                 location="weights.bin", size_threshold=0)
    moved = MLP_BYTES - 128 * 4  # onnx moves raw_data only: b1, in float_data, stays in the model file
    assert path.stat().st_size < 2_000 and (tmp_path / "weights.bin").stat().st_size == moved
    report = inspect_model(path)
    assert report.valid and report.weights.external == 3 and report.weights.external_bytes == moved
    assert report.weights.external_files == ["weights.bin"] and report.costs.flops == 406_528
    (tmp_path / "weights.bin").unlink()
    broken = inspect_model(path)
    assert not broken.valid and "weights.bin" in broken.checker_errors[0]
    assert broken.weights.initializer_bytes == MLP_BYTES


def test_unknown_ops_get_an_unknown_row_and_subgraphs_are_counted(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    branch_out = helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "then", [], [branch_out])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "else", [], [branch_out])
    nodes = [helper.make_node("If", ["cond"], ["t"], then_branch=then, else_branch=other),
             helper.make_node("FooBar", ["t"], ["y"], domain="com.example")]
    opsets = [*OPSET, helper.make_opsetid("com.example", 1)]
    report = inspect_model(_save(tmp_path, "if.onnx", helper.make_graph(nodes, "g", [cond, x], [y]), opsets=opsets))
    counts = {r.op: r.count for r in report.ops}
    assert counts == {"If": 1, "Identity": 1, "Neg": 1, "com.example:FooBar": 1}
    assert report.nodes == 2 and report.subgraph_nodes == 2
    foo = next(r for r in report.ops if r.op == "com.example:FooBar")
    assert foo.behaviour == UNKNOWN and foo.behaviour.fusable is None
    assert next(o for o in report.to_dict()["ops"] if o["op"] == "com.example:FooBar")["fusable"] == "unknown"
    assert next(r for r in report.ops if r.op == "If").behaviour.access == "subgraph"


def test_op_table_names_real_onnx_ops() -> None:
    assert all(onnx.defs.has(op) for op in OPS)
    assert behaviour("", "StringNormalizer") == UNKNOWN and behaviour("com.microsoft", "FusedConv") == UNKNOWN
    assert behaviour("ai.onnx", "Gather").access == "gather/scatter"
    assert behaviour("", "Transpose").access == "strided" and behaviour("", "ReduceSum").access == "reduction"
    assert behaviour("", "BatchNormalization").fusable is True and behaviour("", "MatMul").fusable is False


def test_checker_errors_are_reported_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, "future.onnx", _mlp(), ir=99)
    report = inspect_model(path)
    assert not report.valid and "ir_version 99 is higher than the checker's" in report.checker_errors[0]
    assert main(["inspect", str(path)]) == 1
    assert "checker: INVALID: Your model ir_version 99" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"this is not an onnx model\n", b"", "truncated"])
def test_unreadable_files_fail_clearly(tmp_path: Path, content: bytes | str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.onnx"
    if content == "truncated":
        whole = helper.make_model(_mlp(), opset_imports=OPSET, ir_version=8).SerializeToString()
        content = whole[: len(whole) // 2]
    path.write_bytes(content)  # type: ignore[arg-type]
    with pytest.raises(InspectError, match="not an ONNX model"):
        inspect_model(path)
    assert main(["inspect", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"aisim inspect: {path}: ")
    with pytest.raises(InspectError, match="no such file"):
        inspect_model(tmp_path / "absent.onnx")


def test_missing_onnx_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, "mlp.onnx", _mlp())
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(OnnxMissing, match=r"pip install 'aisim\[inspect\]'"):
        inspect_model(path)
    assert main(["inspect", str(path)]) == 1
    assert "pip install 'aisim[inspect]'" in capsys.readouterr().err


def test_cli_text_json_and_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, "convnet.onnx", _convnet())
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "initializers: 5, 6.4 KB (6,440 bytes)" in text and "FLOPs per inference: 931.14 K" in text
    assert any(line.split()[:6] == ["Conv", "3", "convolution", "no", "compute-bound", "930.82"]
               for line in text.splitlines())
    assert main(["inspect", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["flops"] == 931_136 and data["weights"]["initializer_bytes"] == 6_440
    assert {o["op"]: o["count"] for o in data["ops"]}["Conv"] == 3
    assert main(["inspect", str(path), "--scenario", "--gpu", "t4"]) == 0
    block = capsys.readouterr().out
    checked = check_text(SCENARIO_HEAD.replace("gpu0", "t4") + block)
    assert checked.scenario is not None, checked.problems
    assert checked.scenario.models[0].kserve.max_batch_size == 0  # type: ignore[union-attr]


def test_cli_does_not_import_onnx(python: str) -> None:
    code = "import sys, aisim.cli, aisim.inspect_onnx; print('onnx' in sys.modules)"
    assert subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


@pytest.mark.skipif(not (LIGHT / "light_resnet50.onnx").is_file(), reason="this onnx wheel ships no light models")
def test_light_resnet50_from_the_onnx_wheel() -> None:
    report = inspect_model(LIGHT / "light_resnet50.onnx")
    assert (report.ir_version, report.opsets, report.producer) == (3, {"ai.onnx": 9}, "onnx-caffe2")
    assert report.valid and report.nodes == 415 and report.weights.initializers == 269
    assert [(t.datatype, t.shape) for t in report.inputs] == [("FP32", [1, 3, 224, 224])]  # IR 3: initializers subtracted
    assert [t.shape for t in report.outputs] == [[1, 1000]]
    assert (report.declared_shapes, report.inferred_shapes) == (0, 414)
    assert report.weights.initializer_bytes < 11_000  # "~10 KB": int64 shape vectors
    assert round(report.weights.implied_bytes / 1e6, 1) == 102.4
    assert abs(report.costs.flops - 8.2e9) / 8.2e9 < 0.01  # type: ignore[operator]  # 4.1 GMAC per image
    checked = check_text(SCENARIO_HEAD + scenario_block(report))
    assert checked.scenario is not None and checked.scenario.models[0].resolved().hidden == 2048


@pytest.mark.skipif(not LIGHT.is_dir(), reason="this onnx wheel ships no light models")
@pytest.mark.parametrize(("name", "implied_mb"), [("light_densenet121", 32.6), ("light_vgg19", 574.7),
                                                   ("light_bvlc_alexnet", 243.9), ("light_squeezenet", 4.9)])
def test_light_models_implied_weights(name: str, implied_mb: float) -> None:
    report = inspect_model(LIGHT / f"{name}.onnx")
    assert report.valid and round(report.weights.implied_bytes / 1e6, 1) == implied_mb
    assert check_text(SCENARIO_HEAD.replace("T4", "H200") + scenario_block(report)).scenario is not None
