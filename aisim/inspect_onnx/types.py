"""ONNX element types: their KServe v2 / Triton datatype and their size in bits.

Datatypes follow Triton's onnxruntime backend (triton-inference-server/onnxruntime_backend `src/onnxruntime_utils.h`);
an ONNX type without a Triton counterpart (complex, FP8, 4-bit) maps to None. Sizes are storage sizes: 4-bit and 2-bit
types are packed, two or four to a byte, as ONNX stores them.
"""

from __future__ import annotations

TRITON_DATATYPES: dict[str, str] = {
    "FLOAT": "FP32",
    "UINT8": "UINT8",
    "INT8": "INT8",
    "UINT16": "UINT16",
    "INT16": "INT16",
    "INT32": "INT32",
    "INT64": "INT64",
    "STRING": "BYTES",
    "BOOL": "BOOL",
    "FLOAT16": "FP16",
    "DOUBLE": "FP64",
    "UINT32": "UINT32",
    "UINT64": "UINT64",
    "BFLOAT16": "BF16",
}
"""ONNX TensorProto type name -> KServe v2 datatype."""

ELEMENT_BITS: dict[str, int] = {
    "FLOAT": 32, "UINT8": 8, "INT8": 8, "UINT16": 16, "INT16": 16, "INT32": 32, "INT64": 64, "BOOL": 8,
    "FLOAT16": 16, "DOUBLE": 64, "UINT32": 32, "UINT64": 64, "COMPLEX64": 64, "COMPLEX128": 128,
    "BFLOAT16": 16, "FLOAT8E4M3FN": 8, "FLOAT8E4M3FNUZ": 8, "FLOAT8E5M2": 8, "FLOAT8E5M2FNUZ": 8,
    "FLOAT8E8M0": 8, "UINT4": 4, "INT4": 4, "FLOAT4E2M1": 4, "UINT2": 2, "INT2": 2,
}
"""Bits per element; STRING is absent (its size is the strings' own)."""

SCENARIO_DTYPES: dict[str, str] = {
    "FLOAT": "fp32", "FLOAT16": "fp16", "BFLOAT16": "bf16", "FLOAT8E4M3FN": "fp8", "FLOAT8E4M3FNUZ": "fp8",
    "FLOAT8E5M2": "fp8", "FLOAT8E5M2FNUZ": "fp8", "INT8": "int8", "UINT8": "int8", "INT4": "int4", "UINT4": "int4",
}
"""ONNX weight type -> the scenario language's architecture `dtype`."""


def storage_bytes(type_name: str, elements: int) -> int | None:
    """Bytes `elements` values of a type take in storage, None for types of variable or unknown size."""
    bits = ELEMENT_BITS.get(type_name)
    return None if bits is None else (elements * bits + 7) // 8
