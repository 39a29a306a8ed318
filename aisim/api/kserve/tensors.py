"""KServe v2 / Triton tensors on the wire: JSON and the binary tensor data extension, checked as Triton checks them.

Triton's protocol (triton-inference-server/server `docs/protocol/README.md`, `extension_binary_data.md`;
`src/http_server.cc`): a request is JSON, optionally followed by raw tensor bytes when the
`Inference-Header-Content-Length` header gives the JSON's length; binary inputs carry
`parameters.binary_data_size`. Datatypes map to numpy (little-endian); BYTES elements are a
4-byte little-endian length and the bytes. Errors carry Triton's status and exact message.
Outputs are generated from a seed derived from the request's input bytes, so the same request
always gets the same answer.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...scenario.models import Tensor
from ..http import bodies

NUMPY_TYPES: dict[str, str] = {
    "BOOL": "?", "UINT8": "<u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8", "INT8": "<i1", "INT16": "<i2",
    "INT32": "<i4", "INT64": "<i8", "FP16": "<f2", "FP32": "<f4", "FP64": "<f8",
}
"""KServe datatype -> numpy dtype (BF16 and BYTES are handled apart)."""
ITEMSIZE = {name: np.dtype(code).itemsize for name, code in NUMPY_TYPES.items()} | {"BF16": 2}
BINARY_ONLY = ("FP16", "BF16")
HEADER = "Inference-Header-Content-Length"
STRUCT_CODES: dict[str, str] = {
    "BOOL": "?", "UINT8": "B", "UINT16": "H", "UINT32": "I", "UINT64": "Q", "INT8": "b", "INT16": "h",
    "INT32": "i", "INT64": "q", "FP32": "f", "FP64": "d",
}
"""KServe datatype -> `struct` code (little-endian with "<"): for tiny tensors `struct` is faster than numpy's
per-call overhead, and makes the same bytes."""
SMALL_OUTPUT = 64
"""Outputs of up to this many elements are generated without numpy (faster there; the same bytes)."""
SMALL_INPUT = 64
"""Flat JSON inputs of up to this many numbers are packed without numpy (faster there; the same bytes)."""
INT_RANGES = {name: min(np.iinfo(np.dtype(code)).max, 1000) for name, code in NUMPY_TYPES.items()
              if np.dtype(code).kind in "iu"}
"""Integer outputs are in [0, this) (`_values`)."""
_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""`json.dumps(..., separators=(",", ":"))`."""
_string = json.encoder.encode_basestring_ascii
"""A string as JSON (`ensure_ascii`, as `json.dumps` writes it)."""


class KServeError(Exception):
    """An error answer: Triton's status and message, sent as `{"error": message}`."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, grpc: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        """Headers the answer carries besides the body (an unsupported encoding names those read)."""
        self.grpc = grpc
        """The gRPC status code's name where Triton's gRPC frontend does not answer the HTTP status's own
        (None: the code of `status`, see `grpc.GRPC_CODES`)."""


@dataclass
class InputTensor:
    name: str
    datatype: str
    shape: list[int]
    data: bytes
    """Raw little-endian bytes (BYTES: length-prefixed elements)."""
    shared_memory: tuple[str, int, int] | None = None
    """(region, offset, byte size) when the bytes are in a registered shared-memory region (read into `data`
    before the request is checked)."""


@dataclass
class InferRequest:
    id: str
    inputs: list[InputTensor]
    outputs: list[dict[str, Any]]
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Triton's prefix for request validation errors."""
        return f"[request id: {self.id or '<id_unknown>'}] "


MAX_INPUT_SIZE = 64 * 2**20
"""Triton's `--http-max-input-size` default: the largest request body, after decompression."""


def decompress(body: bytes, encoding: str | None, limit: int = MAX_INPUT_SIZE) -> bytes:
    """The request body after `Content-Encoding` (gzip and deflate, as Triton accepts), inflated no further than
    `limit` bytes: a body that would inflate past it is refused without inflating the rest."""
    if not encoding or encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise KServeError(501, "Unsupported compression type", {"Accept-Encoding": "gzip, deflate"})  # http_server.cc
    try:
        return bodies.inflate(body, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS, limit)
    except bodies.BodyError as error:
        raise _refused(error, len(body), limit) from None


def read_json(data: bytes, limit: int = MAX_INPUT_SIZE, empty: Any = None) -> Any:
    """A JSON request document read within `bodies.decode`'s bounds, refusals in Triton's words (a document
    it cannot parse is its 500, `failed to parse the request JSON buffer`)."""
    try:
        return bodies.decode(data, limit, empty)
    except bodies.BodyError as error:
        raise _refused(error, len(data), limit) from None


def _refused(error: bodies.BodyError, size: int, limit: int) -> KServeError:
    if error.kind == "too_large":
        return KServeError(400, f"Request JSON size of {size if size > limit else 'more than ' + str(limit)} exceeds "
                                f"the maximum allowed value of {limit}. Use --http-max-input-size to increase the "
                                "limit.")
    reason = "Invalid value" if error.kind == "not_json" else error.message  # RapidJSON's words for the first
    return KServeError(500, f"failed to parse the request JSON buffer: {reason}. at {error.position}")


def bytes_elements(items: Iterable[bytes]) -> bytes:
    """A BYTES tensor's raw data: each element as its length (4 bytes, little-endian) and its bytes (the protocol's
    tensor data)."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def compression(accept_encoding: str | None) -> str:
    """The response encoding Triton picks from `Accept-Encoding`: the highest-weighted of identity, deflate
    and gzip, the first on a tie (`http_server.cc` `CompressionTypeUsed`)."""
    chosen, weight = "identity", 0.0
    for part in (accept_encoding or "").split(","):
        name, _, q = part.strip().partition(";q=")
        try:
            value = float(q) if q else 1.0
        except ValueError:
            continue
        if name in ("identity", "deflate", "gzip") and value > weight:
            chosen, weight = name, value
    return chosen


def compress(body: bytes, encoding: str) -> bytes:
    """`body` in a response encoding (`extension_binary_data.md`): gzip or deflate (zlib format, as Triton's deflate
    writes it)."""
    if encoding == "gzip":
        return gzip.compress(body)
    return zlib.compress(body) if encoding == "deflate" else body


def raw_request(body: bytes, model: str, signature: Signature) -> InferRequest:
    """A raw binary request (`extension_binary_data.md`, `Inference-Header-Content-Length: 0`): the body is the bytes of
    the model's only input, at batch 1, and every output goes back in binary. Triton's sources give no text for a model
    that does not qualify; these are Triton core's (`infer_request.cc` `Normalize`, checked by Triton's `qa/L0_http`
    raw-binary tests)."""
    label = "[request id: <id_unknown>] "
    if len(signature.inputs) != 1:
        raise KServeError(400, f"{label}Raw request must only have 1 input (found 1) to be deduced but got "
                               f"{len(signature.inputs)} inputs in '{model}' model configuration")
    tensor = signature.inputs[0]
    dims = tensor.shape[1:] if signature.max_batch_size > 0 else list(tensor.shape)
    if dims.count(-1) > 1:
        raise KServeError(400, f"{label}The shape of the raw input '{tensor.name}' can not be deduced because there "
                               "are more than one variable-sized dimension")
    if tensor.datatype == "BYTES":
        if dims != [1]:
            raise KServeError(400, f"{label}For BYTE datatype raw input, the model must have input shape [1]")
        data = bytes_elements([body])
    else:
        data = body
        if -1 in dims:
            fixed = math.prod(d for d in dims if d != -1) * ITEMSIZE[tensor.datatype]
            dims = [len(body) // fixed if d == -1 else d for d in dims]
    shape = [1, *dims] if signature.max_batch_size > 0 else dims
    return InferRequest("", [InputTensor(tensor.name, tensor.datatype, shape, data)], [],
                        {"binary_data_output": True})


def parse_request(body: bytes, header_length: str | None, model: str, limit: int = MAX_INPUT_SIZE) -> InferRequest:
    """Split JSON and binary parts and read every input's bytes."""
    json_part, binary = body, b""
    if header_length is not None:
        length = header_number(header_length)
        if length is None:
            raise KServeError(400, f"Unable to parse {HEADER}, got: {header_length}")
        if not 0 < length <= len(body):
            raise KServeError(400, f"inference header size should be in range (0, {len(body)}), got: {header_length}")
        json_part, binary = body[:length], body[length:]
    document = read_json(json_part, limit)
    if not isinstance(document, dict):
        raise KServeError(500, "failed to parse the request JSON buffer: The document root must be an object. at 0")
    inputs_json = document.get("inputs")
    if not isinstance(inputs_json, list):
        raise KServeError(500, "Unable to parse 'inputs': attempt to access JSON non-array as array")
    given_id = document.get("id")
    if given_id is not None and not isinstance(given_id, str):  # (Triton reads `id`, `outputs` and `parameters`
        raise KServeError(500, "Unable to parse 'id': attempt to access JSON non-string as string")  # as it reads
    if document.get("outputs") is not None and not isinstance(document["outputs"], list):  # an input's fields)
        raise KServeError(500, "Unable to parse 'outputs': attempt to access JSON non-array as array")
    if document.get("parameters") is not None and not isinstance(document["parameters"], dict):
        raise KServeError(500, "Unable to parse 'parameters': attempt to access JSON non-object as object")
    request_id = given_id if isinstance(given_id, str) else ""
    offset = 0
    inputs = []
    for item in inputs_json:
        tensor, used = _read_input(item, binary, offset, header_length is not None, model)
        offset += used
        inputs.append(tensor)
    if offset < len(binary):
        raise KServeError(400, f"unexpected additional input data for model '{model}'")
    outputs = document.get("outputs") or []
    for output in outputs if isinstance(outputs, list) else []:
        if not isinstance(output, dict):
            raise KServeError(500, "Unable to parse 'outputs': attempt to access JSON non-object as object")
        if not isinstance(output.get("name"), str):
            raise KServeError(500, "Unable to parse 'name': attempt to access JSON non-string as string")
        if not isinstance(output.get("parameters", {}), dict):
            raise KServeError(500, "Unable to parse 'parameters': attempt to access JSON non-object as object")
    parameters = document.get("parameters") or {}
    return InferRequest(request_id, inputs, outputs if isinstance(outputs, list) else [],
                        parameters if isinstance(parameters, dict) else {})


_HEADER_NUMBER = re.compile(r"\s*[+-]?[0-9]{1,19}\s*")


def header_number(text: str) -> int | None:
    """A header's integer as Triton's `std::stoi` family reads it: ASCII digits only (Python's `int` also
    takes `١٢` and `¹` is a digit to `str.isdigit`), at most 64 bits; None otherwise."""
    return int(text) if _HEADER_NUMBER.fullmatch(text) else None


def _read_input(item: Any, binary: bytes, offset: int, has_header: bool, model: str) -> tuple[InputTensor, int]:
    if not isinstance(item, dict):
        raise KServeError(500, "Unable to parse 'inputs': attempt to access JSON non-object as object")
    name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
    if not isinstance(name, str):
        raise KServeError(500, "Unable to parse 'name': attempt to access JSON non-string as string")
    if not isinstance(datatype, str):
        raise KServeError(500, "Unable to parse 'datatype': attempt to access JSON non-string as string")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise KServeError(500, "Unable to parse 'shape': attempt to access JSON non-array as array")
    if shape and min(shape) < 0:
        raise KServeError(500, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer")
    parameters = item.get("parameters") or {}
    shared = shm_parameters(parameters)
    if shared is not None:
        return InputTensor(name, datatype, shape, b"", shared), 0
    size = parameters.get("binary_data_size") if isinstance(parameters, dict) else None
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise KServeError(500, "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as "
                                   "unsigned-integer")
        if not has_header:
            raise KServeError(400, "must specify valid 'Infer-Header-Content-Length' in request header and "
                                   "'binary_data_size' when passing inputs in binary data format")
        if offset + size > len(binary):
            raise KServeError(400, f"unexpected size for input '{name}', expecting {offset + size - len(binary)} "
                                   f"additional bytes for model '{model}'")
        return InputTensor(name, datatype, shape, binary[offset:offset + size]), size
    if datatype in BINARY_ONLY:
        raise KServeError(400, f"receiving {datatype} data via JSON is not supported. Please use the binary data "
                               f"format for input {name}")
    return InputTensor(name, datatype, shape, _json_data(name, datatype, shape, item.get("data"))), 0


def _json_data(name: str, datatype: str, shape: list[int], data: Any) -> bytes:
    """A JSON `data` field (flat or nested, row-major) as the tensor's raw bytes."""
    count = math.prod(shape)
    if datatype == "BYTES":
        flat = list(_flatten(data if data is not None else []))
        if len(flat) != count:
            raise KServeError(500, "Failed to parse 'data' field: shape does not match true shape")
        pieces = [str(v).encode() if not isinstance(v, bytes) else v for v in flat]
        return bytes_elements(pieces)
    if datatype not in NUMPY_TYPES:
        raise KServeError(400, f"invalid datatype for input {name}")
    values = data if isinstance(data, list) else [] if data is None else [data]
    types = set(map(type, values))
    if list in types:
        values = list(_flatten(values))
        types = set(map(type, values))
    if len(values) != count:
        raise KServeError(500, "Failed to parse 'data' field: shape does not match true shape")
    _check_values(name, datatype, values, types)
    code = STRUCT_CODES[datatype] if datatype != "BOOL" else None
    if code is not None and count <= SMALL_INPUT:
        try:
            return struct.pack(f"<{count}{code}", *values)
        except OverflowError:
            pass  # a float beyond FP32's range: numpy makes it an infinity, as Triton's cast does
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=NUMPY_TYPES[datatype]).tobytes()


JSON_TYPES: dict[str, tuple[set[type], str]] = {
    "BOOL": ({bool}, "attempt to access JSON non-boolean as boolean"),
    "u": ({int}, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    "i": ({int}, "attempt to access JSON non-signed-integer as signed-integer"),
    "f": ({int, float}, "attempt to access JSON non-number as double"),
}
"""What Triton's JSON reader (TritonJson `AsBool` / `AsUInt` / `AsInt` / `AsDouble`) accepts for a datatype
kind, and its message otherwise: a 500 `Unable to parse 'data': ...`, as for the other ill-typed fields."""


def _check_values(name: str, datatype: str, values: list[Any], types: set[type]) -> None:
    """Values of the wrong JSON type are Triton's 500; integers outside the datatype's range a 400.

    A negative number for an unsigned type, or an integer beyond 64 bits, is a value TritonJson does not
    read as that kind of integer (the 500 above, as for a negative dimension). Triton casts an
    in-64-bit but out-of-range integer to the narrower type without a check (`http_server.cc`
    `ReadDataFromJsonHelper`, marked FIXME there); aisim refuses it instead with a 400 of its own wording
    (Triton's sources give none for this case) rather than answer for a value the client did not send.
    """
    kind = datatype if datatype == "BOOL" else np.dtype(NUMPY_TYPES[datatype]).kind
    allowed, message = JSON_TYPES[kind]
    if not types <= allowed:
        raise KServeError(500, f"Unable to parse 'data': {message}")
    if kind not in "iu" or not values:
        return
    info = np.iinfo(np.dtype(NUMPY_TYPES[datatype]))
    low, high = int(info.min), int(info.max)
    if low <= min(values) and max(values) <= high:
        return
    bad = next(v for v in values if not low <= v <= high)
    if not (0 if kind == "u" else -2**63) <= bad < (2**64 if kind == "u" else 2**63):
        raise KServeError(500, f"Unable to parse 'data': {message}")
    raise KServeError(400, f"value {bad} of input '{name}' is out of range for data-type '{datatype}' "
                           f"(expected {low} to {high})")


def _flatten(value: Any) -> Any:
    if isinstance(value, list):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def shm_parameters(parameters: Any) -> tuple[str, int, int] | None:
    """A tensor's shared-memory parameters (`shared_memory_region`, `_byte_size`, `_offset`), or None."""
    if not isinstance(parameters, dict) or parameters.get("shared_memory_region") is None:
        return None
    region = parameters["shared_memory_region"]
    size = parameters.get("shared_memory_byte_size")
    offset = parameters.get("shared_memory_offset", 0)
    if not isinstance(region, str):
        raise KServeError(400, "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise KServeError(400, f"'shared_memory_byte_size' must be given with 'shared_memory_region' '{region}'")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise KServeError(400, "Unable to parse 'shared_memory_offset': attempt to access JSON non-unsigned-integer as "
                               "unsigned-integer")
    return region, offset, size


def byte_size(datatype: str, shape: list[int]) -> int | None:
    """Bytes a fixed-size tensor takes (None for BYTES)."""
    if datatype == "BYTES":
        return None
    return math.prod(shape) * ITEMSIZE[datatype]


@dataclass(frozen=True)
class Signature:
    """A model version's declared tensors as each request uses them, indexed once per version."""

    inputs: list[Tensor]
    outputs: list[Tensor]
    max_batch_size: int
    by_name: dict[str, Tensor]
    """The inputs by name."""

    @classmethod
    def of(cls, inputs: list[Tensor], outputs: list[Tensor], max_batch_size: int) -> Signature:
        return cls(inputs, outputs, max_batch_size, {t.name: t for t in inputs})


def check_inputs(request: InferRequest, model: str, signature: Signature) -> int:
    """Triton's request validation (core `src/infer_request.cc`), in its order; returns the batch size."""
    expected, declared, max_batch_size = signature.by_name, signature.inputs, signature.max_batch_size
    for tensor in request.inputs:
        if tensor.name not in expected:
            raise KServeError(400, f"unexpected inference input '{tensor.name}' for model '{model}'")
    if len({t.name for t in request.inputs}) != len(expected):  # every name given is declared: one is missing
        given = [t.name for t in request.inputs]
        missing = [t.name for t in declared if t.name not in given]
        raise KServeError(400, f"{request.label}expected {len(declared)} inputs but got {len(given)} inputs for model "
                               f"'{model}'. Got input(s) {_names(given)}, but missing required input(s) "
                               f"{_names(missing)}. Please provide all required input(s).")
    batch = 1
    for tensor in request.inputs:
        want = expected[tensor.name]
        if tensor.datatype != want.datatype:
            raise KServeError(400, f"{request.label}inference input '{tensor.name}' data-type is '{tensor.datatype}', "
                                   f"but model '{model}' expects '{want.datatype}'")
        if max_batch_size > 0 and tensor.shape:
            batch = tensor.shape[0]
            if batch > max_batch_size:
                raise KServeError(400, f"{request.label}inference request batch-size must be <= {max_batch_size} "
                                       f"for '{model}'")
        if not _fits(tensor.shape, want.shape):
            note = ("NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
                    "prepended to each input shape. If you want to specify the full shape including the batch dim "
                    "in your input dims config, try setting max_batch_size to zero. See the model configuration "
                    "docs for more info on max_batch_size." if max_batch_size > 0 else "")
            raise KServeError(400, f"{request.label}unexpected shape for input '{tensor.name}' for model '{model}'. "
                                   f"Expected {_dims(want.shape)}, got {_dims(tensor.shape)}. {note}")
        size = byte_size(tensor.datatype, tensor.shape)
        if size is not None and size != len(tensor.data):
            raise KServeError(400, f"{request.label}input byte size mismatch for input '{tensor.name}' for model "
                                   f"'{model}'. Expected {size}, got {len(tensor.data)}")
    return batch


def _fits(shape: list[int], declared: list[int]) -> bool:
    return len(shape) == len(declared) and all(d == -1 or d == s for s, d in zip(shape, declared))


def _dims(shape: list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _names(names: list[str]) -> str:
    return "[" + ", ".join(f"'{n}'" for n in names) + "]"


def generate_outputs(request: InferRequest, signature: Signature, batch: int, model: str,
                     version: str) -> list[tuple[Tensor, list[int], bytes]]:
    """Each requested output (all when none is named): its shape and deterministic bytes.

    The bytes come from SHAKE-128 over the model, the version and every input's name and bytes:
    the same request always gets the same answer, a different one another answer.
    """
    declared = signature.outputs
    batched = signature.max_batch_size > 0
    chosen = declared
    if request.outputs:
        wanted = [o.get("name") for o in request.outputs if isinstance(o, dict)]
        for index, name in enumerate(wanted):
            if name in wanted[:index]:  # Triton's text as far as its sources show it (its start is unverified)
                raise KServeError(400, f"output '{name}' already exists in request")
        chosen = [t for t in declared if not wanted or t.name in wanted]
        unknown = [n for n in wanted if n not in {t.name for t in declared}]
        if unknown:
            raise KServeError(400, f"{request.label}unexpected inference output '{unknown[0]}' for model '{model}'")
    seed = hashlib.sha256(f"{model}/{version}".encode())
    for given in request.inputs:
        seed.update(given.name.encode())
        seed.update(given.data)
    digest = seed.digest()
    classes = _classification_counts(request.outputs) if request.outputs else {}
    produced = []
    for index, tensor in enumerate(chosen):
        dims = [max(d, 1) for d in tensor.shape]
        if batched and dims:
            dims[0] = batch
        count = math.prod(dims)
        stream = hashlib.shake_128(digest + index.to_bytes(4, "little"))
        data = _values(tensor.datatype, count, stream)
        top = classes.get(tensor.name)
        produced.append(_classified(tensor, dims, data, top, batched) if top else (tensor, dims, data))
    return produced


CLASSIFIABLE = ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64")
"""The datatypes Triton's classification extension ranks (`classification.cc` `TopkClassifications`)."""


def _classification_counts(outputs: list[Any]) -> dict[str, int]:
    """Each requested output's `classification` parameter (the top-k count asked for), when non-zero."""
    counts = {}
    for output in outputs:
        parameters = output.get("parameters") if isinstance(output, dict) else None
        count = parameters.get("classification") if isinstance(parameters, dict) else None
        if count is None:
            continue
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise KServeError(500, "Unable to parse 'classification': attempt to access JSON non-unsigned-integer as "
                                   "unsigned-integer")
        if count:
            counts[str(output.get("name"))] = count
    return counts


def _classified(tensor: Tensor, dims: list[int], data: bytes, top: int, batched: bool) -> tuple[Tensor, list[int], bytes]:
    """Triton's classification extension: an output replaced, per batch entry, by its `top` largest values,
    largest first, as BYTES strings `value:index` (C++ `std::to_string`: a float with six decimals), shape
    [batch, top] (or [top] for a model that does not batch). Ties keep the lower index first (Triton's
    unstable sort leaves their order open). aisim models no label files, so no `:label` part."""
    if tensor.datatype not in CLASSIFIABLE:
        raise KServeError(400, f"class result not available for output due to unsupported type '{tensor.datatype}'")
    values = np.frombuffer(data, dtype=NUMPY_TYPES[tensor.datatype])
    rows = values.reshape(dims[0] if batched and dims else 1, -1)
    top = min(top, rows.shape[1])
    floating = tensor.datatype.startswith("FP")
    words = []
    for row in rows:
        for index in np.argsort(-row.astype(np.float64), kind="stable")[:top]:
            value = row[index]
            words.append((f"{float(value):f}" if floating else str(int(value))) + f":{index}")
    shape = [rows.shape[0], top] if batched and dims else [top]
    return Tensor(name=tensor.name, datatype="BYTES", shape=shape), shape, bytes_elements(w.encode() for w in words)


def _values(datatype: str, count: int, stream: Any) -> bytes:
    """`count` values of a datatype from a SHAKE stream: floats in [0, 1), integers in [0, 1000), words."""
    if count <= SMALL_OUTPUT and (datatype in STRUCT_CODES or datatype == "BYTES"):
        return _small_values(datatype, count, stream.digest(4 * count))
    raw = np.frombuffer(stream.digest(4 * count), dtype="<u4")
    if datatype == "BYTES":
        return bytes_elements(f"out{int(v) % 1000}".encode() for v in raw)
    if datatype == "BOOL":
        return (raw & 1).astype("?").tobytes()
    unit = raw.astype(np.float64) / 2**32
    if datatype == "BF16":
        return (unit.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    dtype = np.dtype(NUMPY_TYPES[datatype])
    if dtype.kind == "f":
        return unit.astype(dtype).tobytes()
    return (raw % INT_RANGES[datatype]).astype(dtype).tobytes()


def _small_values(datatype: str, count: int, digest: bytes) -> bytes:
    """`_values` in plain Python: the same arithmetic (u32 / 2**32 is exact in a double, float32 rounds as
    numpy's cast does), so the same bytes."""
    raw = struct.unpack(f"<{count}I", digest)
    if datatype == "BYTES":
        return bytes_elements(f"out{v % 1000}".encode() for v in raw)
    if datatype == "BOOL":
        return bytes(v & 1 for v in raw)
    code = STRUCT_CODES[datatype]
    if code in "fd":
        return struct.pack(f"<{count}{code}", *[v / 2**32 for v in raw])
    modulus = INT_RANGES[datatype]
    return struct.pack(f"<{count}{code}", *[v % modulus for v in raw])


def json_values(datatype: str, data: bytes) -> list[Any]:
    """A tensor's bytes as the flat JSON list Triton sends."""
    if datatype == "BYTES":
        values, offset = [], 0
        while offset < len(data):
            (length,) = struct.unpack_from("<I", data, offset)
            values.append(data[offset + 4:offset + 4 + length].decode("utf-8", "replace"))
            offset += 4 + length
        return values
    code = STRUCT_CODES.get(datatype)
    if code is not None:
        return list(struct.unpack(f"<{len(data) // ITEMSIZE[datatype]}{code}", data))
    return np.frombuffer(data, dtype=NUMPY_TYPES[datatype]).tolist()


def encode_response(model: str, version: str, request: InferRequest,
                    outputs: list[tuple[Tensor, list[int], bytes]]) -> tuple[bytes, int | None]:
    """The response body, and the JSON part's length when binary outputs follow (`extension_binary_data.md`).

    The JSON is written piece by piece, exactly as `json.dumps(..., separators=(",", ":"))` writes the
    document `{"id"?, "model_name", "model_version", "outputs": [...]}`: for a small answer, building the
    dictionaries and the encoder costs more than the writing."""
    default_binary = bool(request.parameters.get("binary_data_output", False))
    asked = {o.get("name"): o.get("parameters") or {} for o in request.outputs if isinstance(o, dict)} \
        if request.outputs else {}
    parts = ['{"id":', _string(request.id), ","] if request.id else ["{"]
    parts += ['"model_name":', _string(model), ',"model_version":', _string(version), ',"outputs":[']
    blobs = []
    for index, (tensor, shape, data) in enumerate(outputs):
        parts += [',{"name":' if index else '{"name":', _string(tensor.name), ',"datatype":', _string(tensor.datatype),
                  ',"shape":[', ",".join(map(int.__repr__, shape)), "]"]
        wanted = asked.get(tensor.name, {})
        binary = wanted.get("binary_data", default_binary) or tensor.datatype in BINARY_ONLY
        if "shared_memory_region" in wanted:  # written into the region: the answer names it and the size
            parts += [',"parameters":{"shared_memory_region":', _string(str(wanted["shared_memory_region"])),
                      ',"shared_memory_byte_size":', str(len(data)), "}}"]
        elif binary:
            parts += [',"parameters":{"binary_data_size":', str(len(data)), "}}"]
            blobs.append(data)
        else:
            parts += [',"data":', _json_list(tensor.datatype, json_values(tensor.datatype, data)), "}"]
    parts.append("]}")
    header = "".join(parts).encode()
    return (header + b"".join(blobs), len(header)) if blobs else (header, None)


def _json_list(datatype: str, values: list[Any]) -> str:
    """`values` as compact JSON: numbers joined directly when their repr is their JSON (finite floats, ints),
    anything else (booleans, strings, NaN and infinities) through the encoder."""
    if datatype in ("FP32", "FP64") and all(map(math.isfinite, values)):
        return "[" + ",".join(map(float.__repr__, values)) + "]"
    if datatype in INT_RANGES:
        return "[" + ",".join(map(int.__repr__, values)) + "]"
    return _COMPACT.encode(values)
