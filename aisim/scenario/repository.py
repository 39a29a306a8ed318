"""A Triton model repository folder read into scenario models (`server.modelRepository`).

Layout (triton-inference-server/server `docs/user_guide/model_repository.md`, `model_configuration.md`):
`<repo>/<model>/config.pbtxt` and numeric version folders (`1/`, `2/`; names that are not numbers or start with 0 are
ignored) holding `model.onnx`, `model.plan` or `model.py` (or `default_model_filename`). The config is protobuf text
format of Triton's `ModelConfig`, parsed with Triton's own message type (`tritonclient[grpc]`: `pip install
'aisim[triton]'`), so an unknown field is refused as Triton refuses it.

What becomes of it: the platform or backend gives the runtime; `max_batch_size`, inputs and
outputs (with a `-1` batch dimension prepended when the model batches), `dynamic_batching` and
`instance_group` give the `kserve` block; each version folder a version, the highest one serving
(`version_policy` latest 1, Triton's default). A config without inputs or outputs takes them from
the version's ONNX file (`aisim[inspect]`). The simulator also needs the model's size: a config
parameter `aisim_family` names a preset family (`resnet-50`), or the ONNX file's weights and
layers give an architecture (as `aisim inspect` maps it). Instances go on the scenario's GPUs
(`instance_group.gpus` are indices into its device list).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from .problems import Problem

RUNTIMES = {"onnxruntime_onnx": "onnxruntime", "onnxruntime": "onnxruntime", "tensorrt_plan": "tensorrt",
            "tensorrt": "tensorrt", "python": "python"}
DEFAULT_FILES = {"onnxruntime": "model.onnx", "tensorrt": "model.plan", "python": "model.py"}


class RepositoryError(InputError):
    """A model of the repository that cannot be read; `file` and the position say where."""

    def __init__(self, file: Path, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.file, self.message, self.line, self.column = file, message, line, column


def read_repository(root: Path, devices: list[str]) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Scenario model entries (camelCase, as in YAML) for every model folder of `root`, and the problems
    of those that cannot be read."""
    if not root.is_dir():
        return [], [Problem(str(root), 1, 1, "$", "the model repository is not a folder", "model-repository")]
    models, problems = [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            models.append(_model(folder, devices))
        except RepositoryError as error:
            problems.append(Problem(str(error.file), error.line, error.column, "$", error.message, "model-repository"))
    return models, problems


def _config(file: Path) -> Any:
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except (ImportError, RuntimeError):
        raise RepositoryError(file, "reading a Triton model repository needs Triton's protobuf types: "
                                    "pip install 'aisim[triton]'") from None
    try:
        return text_format.Parse(file.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())
    except text_format.ParseError as error:
        raise RepositoryError(file, str(error).split(" : ", 1)[-1], error.GetLine() or 1, error.GetColumn() or 1) from None
    except (OSError, UnicodeDecodeError) as error:
        raise RepositoryError(file, f"cannot read the config: {error}") from None


def _model(folder: Path, devices: list[str]) -> dict[str, Any]:
    file = folder / "config.pbtxt"
    if not file.exists():
        raise RepositoryError(folder, "a model folder needs a config.pbtxt")
    config = _config(file)
    name = folder.name
    if config.name and config.name != name:
        raise RepositoryError(file, f"the config names the model {config.name!r}, but its folder is {name!r}")
    kind = config.platform or config.backend
    runtime = RUNTIMES.get(kind)
    if runtime is None:
        raise RepositoryError(file, f"platform or backend {kind!r} is not simulated; use one of {sorted(RUNTIMES)}")
    versions = sorted((int(p.name), p) for p in folder.iterdir() if p.is_dir() and p.name.isdigit() and not p.name.startswith("0"))
    if not versions:
        raise RepositoryError(folder, "no version folder (1/, 2/, ...)")
    batched = config.max_batch_size > 0
    filename = config.default_model_filename or DEFAULT_FILES[runtime]
    entry: dict[str, Any] = {"id": name, "runtime": runtime, "task": "classify"}
    family = config.parameters["aisim_family"].string_value if "aisim_family" in config.parameters else ""
    inputs = [_tensor(t, batched) for t in config.input]
    outputs = [_tensor(t, batched) for t in config.output]
    onnx_file = versions[-1][1] / filename
    if (not inputs or not outputs or not family) and runtime == "onnxruntime" and onnx_file.exists():
        report = _inspect(onnx_file)
        from ..inspect_onnx import architecture_of, tensors_of

        read_inputs, read_outputs = tensors_of(report)
        inputs, outputs = inputs or read_inputs, outputs or read_outputs
        if not family:
            entry["architecture"] = architecture_of(report)
    if family:
        entry["family"] = family
    elif "architecture" not in entry:
        raise RepositoryError(file, "the simulator needs the model's size: add parameters { key: \"aisim_family\" "
                                    "value { string_value: \"resnet-50\" } } or put an ONNX file in the version folder")
    entry["versions"] = [{"version": str(number), "inputs": inputs, "outputs": outputs} for number, _ in versions]
    entry["lifecycle"] = {"initialVersion": str(versions[-1][0])}
    entry["kserve"] = kserve_section(config, devices)
    entry["placement"] = {"gpus": list(dict.fromkeys(d for g in entry["kserve"]["instanceGroups"] for d in g["gpus"]))}
    return entry


def _inspect(file: Path) -> Any:
    from ..inspect_onnx import InspectError, inspect_model

    try:
        return inspect_model(str(file))
    except InspectError as error:
        raise RepositoryError(file, str(error)) from None


def _tensor(tensor: Any, batched: bool) -> dict[str, Any]:
    from tritonclient.grpc import model_config_pb2

    datatype = model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    return {"name": tensor.name, "datatype": "BYTES" if datatype == "STRING" else datatype,
            "shape": ([-1] if batched else []) + list(tensor.dims)}


def kserve_section(config: Any, devices: list[str]) -> dict[str, Any]:
    """A Triton `ModelConfig` (protobuf) as a scenario model's `kserve` section (camelCase, unvalidated);
    `devices` are the GPU ids an instance group's `gpus` indices name."""
    from tritonclient.grpc import model_config_pb2

    kserve: dict[str, Any] = {"platform": config.platform or config.backend, "maxBatchSize": config.max_batch_size}
    if config.HasField("dynamic_batching"):
        batching = config.dynamic_batching
        kserve["dynamicBatching"] = {"preferredBatchSizes": list(batching.preferred_batch_size),
                                     "maxQueueDelay": f"{batching.max_queue_delay_microseconds}us"}
        if batching.default_queue_policy.max_queue_size:
            kserve["dynamicBatching"]["maxQueueSize"] = batching.default_queue_policy.max_queue_size
    groups = []
    for group in config.instance_group or [model_config_pb2.ModelInstanceGroup(count=1)]:
        cpu = group.kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
        chosen = [devices[i] for i in group.gpus if 0 <= i < len(devices)] or devices
        groups.append({"count": group.count or 1, "kind": "cpu" if cpu else "gpu", "gpus": chosen})
    kserve["instanceGroups"] = groups
    return kserve
