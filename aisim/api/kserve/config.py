"""A model's Triton configuration: the `ModelConfig` protobuf, built from the scenario, printed as Triton prints it.

Triton's model configuration extension (triton-inference-server/server `docs/protocol/extension_model_configuration.md`;
triton-inference-server/common `protobuf/model_config.proto`): snake_case names, every primitive field printed with its
default, enums by name, int64 values as JSON numbers (plain protobuf JSON quotes them). The message type is Triton's own
(`model_config_pb2`, shipped in `tritonclient[grpc]`: `pip install 'aisim[triton]'`), so field names and defaults cannot
drift from Triton's. The values are those Triton fills in when it normalises a config: the latest version served, pinned
input and output memory, the default model file of the backend, one instance group per scenario group.
"""

from __future__ import annotations

from typing import Any

from ...scenario.models import KServe, Model, Tensor

BACKENDS = {"onnxruntime": ("onnxruntime_onnx", "onnxruntime", "model.onnx"),
            "tensorrt": ("tensorrt_plan", "tensorrt", "model.plan"),
            "python": ("", "python", "model.py"),
            "vllm": ("", "vllm", "model.json")}
"""Runtime -> (platform, backend, default model file)."""


def platform_of(model: Model) -> str:
    """What model metadata reports as `platform`: the config's platform, else its backend (Triton's model metadata,
    server `docs/protocol/README.md`)."""
    platform, backend, _ = BACKENDS[model.resolved_runtime()]
    return (model.kserve.platform if model.kserve and model.kserve.platform else None) or platform or backend


def model_config_types() -> Any:
    try:
        from tritonclient.grpc import model_config_pb2
    except (ImportError, RuntimeError) as error:
        raise RuntimeError("the model configuration needs Triton's protobuf types: pip install 'aisim[triton]'") from error
    return model_config_pb2


def model_config(model: Model, tensors: tuple[list[Tensor], list[Tensor]], device_indices: list[list[int]]) -> dict[str, Any]:
    """The `/config` answer for a model: its inputs and outputs, batching and instance groups."""
    pb = model_config_types()
    from google.protobuf import json_format

    kserve = model.kserve or KServe()
    _, backend, filename = BACKENDS[model.resolved_runtime()]
    config = pb.ModelConfig(name=model.id, platform=platform_of(model) if platform_of(model) != backend else "",
                            backend=backend, max_batch_size=kserve.max_batch_size, default_model_filename=filename)
    config.version_policy.latest.num_versions = 1
    batched = kserve.max_batch_size > 0
    for declared, field in zip(tensors, (config.input, config.output)):
        for tensor in declared:
            entry = field.add(name=tensor.name, data_type=getattr(pb, "TYPE_STRING" if tensor.datatype == "BYTES"
                                                                  else f"TYPE_{tensor.datatype}"))
            entry.dims.extend(tensor.shape[1:] if batched else tensor.shape)
    for index, (group, gpus) in enumerate(zip(kserve.instance_groups, device_indices)):
        config.instance_group.add(name=f"{model.id}_{index}", count=group.count,
                                  kind=pb.ModelInstanceGroup.KIND_GPU if group.kind == "gpu" else pb.ModelInstanceGroup.KIND_CPU,
                                  gpus=gpus if group.kind == "gpu" else [])
    if kserve.dynamic_batching is not None:
        batching = kserve.dynamic_batching
        config.dynamic_batching.preferred_batch_size.extend(batching.preferred_batch_sizes)
        config.dynamic_batching.max_queue_delay_microseconds = batching.max_queue_delay // 1000
        if batching.max_queue_size is not None:
            config.dynamic_batching.default_queue_policy.max_queue_size = batching.max_queue_size
    config.optimization.input_pinned_memory.enable = True
    config.optimization.output_pinned_memory.enable = True
    document = json_format.MessageToDict(config, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)
    return _numbers(config, document)


def _numbers(message: Any, document: Any) -> Any:
    """Turn the quoted int64 values of protobuf JSON back into numbers, as Triton prints them."""
    from google.protobuf.descriptor import FieldDescriptor

    wide = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}
    for field in message.DESCRIPTOR.fields:
        if field.name not in document:
            continue
        value = document[field.name]
        repeated = field.is_repeated
        if field.type in wide:
            document[field.name] = [int(v) for v in value] if repeated else int(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:
            inner = getattr(message, field.name)
            if repeated:
                document[field.name] = [_numbers(item, part) for item, part in zip(inner, value)]
            else:
                document[field.name] = _numbers(inner, value)
    return document
