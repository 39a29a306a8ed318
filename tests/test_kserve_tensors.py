"""KServe v2 tensors: the generated outputs pinned byte for byte, and the fast paths equal to the general ones.

The pinned values are computed here by an independent route (hashlib and `struct`, as the module
docstring of `aisim.api.kserve.tensors` describes the derivation) and also written out as literals, so
a change that alters what clients receive fails here.
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

import numpy as np
import pytest

from aisim.api.kserve import tensors as kt
from aisim.scenario.models import Tensor

BENCH_BODY = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]}).encode()
BENCH_Y = [0.8325916528701782, 0.4725990891456604, 0.9997642040252686, 0.6067233681678772]
"""The bench request's output `y` as aisim answered it before the fast paths existed."""


def bench_signature() -> kt.Signature:
    return kt.Signature.of([Tensor(name="x", datatype="FP32", shape=[-1, 16])],
                           [Tensor(name="y", datatype="FP32", shape=[-1, 4])], 8)


def answer(body: bytes) -> tuple[bytes, int | None]:
    request = kt.parse_request(body, None, "bench")
    batch = kt.check_inputs(request, "bench", bench_signature())
    return kt.encode_response("bench", "1", request, kt.generate_outputs(request, bench_signature(), batch, "bench", "1"))


def test_the_bench_answer_is_pinned_and_derived_independently() -> None:
    seed = hashlib.sha256(b"bench/1" + b"x" + struct.pack("<16f", *[0.5] * 16)).digest()
    words = struct.unpack("<4I", hashlib.shake_128(seed + bytes(4)).digest(16))
    floats = list(struct.unpack("<4f", struct.pack("<4f", *[w / 2**32 for w in words])))
    assert floats == BENCH_Y
    payload, header = answer(BENCH_BODY)
    assert header is None
    assert payload == (b'{"model_name":"bench","model_version":"1","outputs":[{"name":"y","datatype":"FP32","shape":[1,4],'
                       b'"data":[0.8325916528701782,0.4725990891456604,0.9997642040252686,0.6067233681678772]}]}')


def test_binary_outputs_are_pinned() -> None:
    body = json.dumps({"id": "r\u00e9\"1", "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}],
                       "parameters": {"binary_data_output": True}}).encode()
    payload, header = answer(body)
    assert header is not None
    assert json.loads(payload[:header])["id"] == "r\u00e9\"1"
    assert payload[header:] == struct.pack("<4f", *BENCH_Y)


def numpy_values(datatype: str, count: int, digest: bytes, monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setattr(kt, "SMALL_OUTPUT", -1)
    try:
        return kt._values(datatype, count, _Stream(digest))
    finally:
        monkeypatch.undo()


class _Stream:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def digest(self, length: int) -> bytes:
        assert length == len(self.data)
        return self.data


@pytest.mark.parametrize("datatype", [*kt.STRUCT_CODES, "BYTES"])
@pytest.mark.parametrize("count", [1, 5, 64])
def test_small_outputs_are_the_bytes_numpy_makes(datatype: str, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in range(20):
        digest = hashlib.shake_128(f"{datatype}/{count}/{seed}".encode()).digest(4 * count)
        if seed == 0:  # the extremes of a 32-bit word
            digest = (b"\xff\xff\xff\xff" + bytes(4)) * (count // 2) + b"\xff\xff\xff\xff" * (count % 2)
        assert kt._small_values(datatype, count, digest) == numpy_values(datatype, count, digest, monkeypatch)


@pytest.mark.parametrize("datatype", list(kt.STRUCT_CODES))
def test_json_values_are_numpys(datatype: str) -> None:
    data = hashlib.shake_128(datatype.encode()).digest(8 * kt.ITEMSIZE[datatype])
    if datatype == "BOOL":
        data = bytes(b & 1 for b in data)
    expected = np.frombuffer(data, dtype=kt.NUMPY_TYPES[datatype]).tolist()
    got = kt.json_values(datatype, data)
    assert [type(v) for v in got] == [type(v) for v in expected]
    assert json.dumps(got) == json.dumps(expected)


def reference_encoding(model: str, version: str, request: kt.InferRequest,
                       outputs: list[tuple[Tensor, list[int], bytes]]) -> tuple[bytes, int | None]:
    """`encode_response` as a document passed to `json.dumps`."""
    default_binary = bool(request.parameters.get("binary_data_output", False))
    asked = {o.get("name"): o.get("parameters") or {} for o in request.outputs if isinstance(o, dict)}
    document: dict[str, Any] = {"id": request.id} if request.id else {}
    document |= {"model_name": model, "model_version": version, "outputs": []}
    blobs = []
    for tensor, shape, data in outputs:
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": shape}
        if asked.get(tensor.name, {}).get("binary_data", default_binary) or tensor.datatype in kt.BINARY_ONLY:
            entry["parameters"] = {"binary_data_size": len(data)}
            blobs.append(data)
        else:
            entry["data"] = kt.json_values(tensor.datatype, data)
        document["outputs"].append(entry)
    header = json.dumps(document, separators=(",", ":")).encode()
    return (header + b"".join(blobs), len(header)) if blobs else (header, None)


DATATYPES = [*kt.NUMPY_TYPES, "BF16", "BYTES"]


@pytest.mark.parametrize("request_id", ["", "a", "\u00e9\u4e2d\"\\\n"])
@pytest.mark.parametrize("binary", [None, False, True])
def test_the_written_json_is_json_dumps(request_id: str, binary: bool | None) -> None:
    declared = [Tensor(name=f"out_{d}\u00e9", datatype=d, shape=[-1, 3]) for d in DATATYPES]  # type: ignore[arg-type]
    inputs = [kt.InputTensor("x", "FP32", [2, 2], bytes(range(16)))]
    asked = [{"name": t.name, "parameters": {"binary_data": i % 2 == 0}} for i, t in enumerate(declared)]
    for outputs in ([], asked, [{"name": declared[3].name}]):
        parameters = {} if binary is None else {"binary_data_output": binary}
        request = kt.InferRequest(request_id, inputs, outputs, parameters)
        produced = kt.generate_outputs(request, kt.Signature.of([], declared, 4), 2, "m\u00e9", "7")
        assert kt.encode_response("m\u00e9", "7", request, produced) == reference_encoding("m\u00e9", "7", request, produced)


def test_non_finite_floats_are_written_as_json_dumps_writes_them() -> None:
    values = [0.5, float("nan"), float("inf"), -float("inf"), -0.0, 1e-300]
    assert kt._json_list("FP64", values) == json.dumps(values, separators=(",", ":"))
    assert kt._json_list("BOOL", [True, False]) == "[true,false]"


NUMERIC = [t for t in kt.NUMPY_TYPES if t not in ("BOOL", "FP16")]
JSON_INPUTS: list[Any] = [[0.5] * 16, [1, 2, 3], [1.5, -2.25, 3e38, 1e-45], [True, False, 7], [-1, 0, 1],
                          [300, 70000, 2**31, 2**63], [1e39], ["1.5", "2"], [[1.0, 2.0], [3.0, 4.0]], [None, 1.0],
                          [float("nan"), float("inf")], list(range(64)), [0.1 * k for k in range(65)]]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # numpy reads 1e39 as an FP32 inf
@pytest.mark.parametrize("datatype", NUMERIC)
@pytest.mark.parametrize("data", JSON_INPUTS, ids=range(len(JSON_INPUTS)))
def test_small_json_inputs_pack_to_numpys_bytes_or_fail_as_numpy_does(datatype: str, data: list[Any]) -> None:
    """Small flat inputs are packed with `struct`; the bytes (or the error) must be numpy's."""
    shape = [len(data), len(data[0])] if isinstance(data[0], list) else [len(data)]

    def read(small_input: int) -> bytes | str:
        original = kt.SMALL_INPUT
        kt.SMALL_INPUT = small_input
        try:
            return kt._json_data("x", datatype, shape, data)
        except kt.KServeError as error:
            return f"{error.status} {error.message}"
        except Exception as error:  # noqa: BLE001 (numpy's own error: the struct path must raise the same)
            return type(error).__name__
        finally:
            kt.SMALL_INPUT = original

    assert read(kt.SMALL_INPUT) == read(0)


INTEGER_TYPES = ["INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"]


def json_input(datatype: str, data: list[Any]) -> bytes:
    return json.dumps({"inputs": [{"name": "x", "datatype": datatype, "shape": [len(data)], "data": data}]}).encode()


@pytest.mark.parametrize("datatype", INTEGER_TYPES)
def test_json_integers_are_checked_against_their_datatype(datatype: str) -> None:
    info = np.iinfo(np.dtype(kt.NUMPY_TYPES[datatype]))
    low, high = int(info.min), int(info.max)
    request = kt.parse_request(json_input(datatype, [low, high]), None, "m")
    assert request.inputs[0].data == np.array([low, high], dtype=kt.NUMPY_TYPES[datatype]).tobytes()
    unsigned = datatype.startswith("U")
    kind = "unsigned-integer" if unsigned else "signed-integer"
    not_read = f"Unable to parse 'data': attempt to access JSON non-{kind} as {kind}"
    beyond_64_bits = 2**64 if unsigned else 2**63
    cases = [([high + 1], 500 if high + 1 >= beyond_64_bits else 400), ([low - 1], 500 if unsigned or low - 1 < -2**63 else 400),
             (["1"], 500), ([True], 500), ([1.0], 500), ([[1], "2"], 500)]
    for data, status in cases:
        with pytest.raises(kt.KServeError) as error:
            kt.parse_request(json_input(datatype, data), None, "m")
        expected = not_read if status == 500 else \
            f"value {data[0]} of input 'x' is out of range for data-type '{datatype}' (expected {low} to {high})"
        assert (error.value.status, error.value.message) == (status, expected), data


def test_json_bools_and_floats_take_only_their_own_kinds() -> None:
    for datatype, data, message in (("BOOL", [1], "non-boolean as boolean"), ("FP32", [True], "non-number as double"),
                                    ("FP64", ["1.5"], "non-number as double")):
        with pytest.raises(kt.KServeError) as error:
            kt.parse_request(json_input(datatype, data), None, "m")
        assert (error.value.status, error.value.message) == (500, f"Unable to parse 'data': attempt to access JSON {message}")
    assert kt.parse_request(json_input("FP32", [1, 2.5]), None, "m").inputs[0].data == struct.pack("<2f", 1, 2.5)


def test_a_raw_request_deduces_the_variable_dimension_and_refuses_what_it_cannot_deduce() -> None:
    one_variable = kt.Signature.of([Tensor(name="x", datatype="FP32", shape=[-1, -1, 2])], [], 4)
    request = kt.raw_request(bytes(24), "m", one_variable)
    assert (request.inputs[0].shape, request.parameters) == ([1, 3, 2], {"binary_data_output": True})
    two_variable = kt.Signature.of([Tensor(name="x", datatype="FP32", shape=[-1, -1])], [], 0)
    with pytest.raises(kt.KServeError, match="The shape of the raw input 'x' can not be deduced because there are more "
                                             "than one variable-sized dimension"):
        kt.raw_request(bytes(8), "m", two_variable)
    text = kt.Signature.of([Tensor(name="t", datatype="BYTES", shape=[-1, 1])], [], 4)
    assert kt.raw_request(b"hello", "m", text).inputs[0].data == struct.pack("<I", 5) + b"hello"
    wide_text = kt.Signature.of([Tensor(name="t", datatype="BYTES", shape=[-1, 2])], [], 4)
    with pytest.raises(kt.KServeError, match=r"For BYTE datatype raw input, the model must have input shape \[1\]"):
        kt.raw_request(b"hello", "m", wide_text)
