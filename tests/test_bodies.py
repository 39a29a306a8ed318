"""`bodies.decode` reads a body with msgspec first: wherever that succeeds, its value must be the one
`json.loads` gives (the answers depend on it), and whatever it refuses must meet `json.loads`'s verdict."""

from __future__ import annotations

import json
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisim.api.http import bodies
from aisim.api.openai.protocol import Message

BASE = (b'{"model": "bench", "messages": [{"role": "user", "content": "Say \\u00e9 something."}], "max_tokens": 12, '
        b'"x": [1.5, -2e3, true, null, 18446744073709551616, -0.0]}')
ALPHABET = b'{}[],:"\\ 0123456789.eE+-tnfaulrsxuNI\x00\x7f\xff\xc3\xa9\t\n\r\x0c'


def verdict(body: bytes) -> tuple[str, str]:
    """What `json.loads` (with decode's own bounds) makes of a body: ("ok", repr of the value with its types)
    or ("refused", the refusal's kind)."""
    try:
        return "ok", typed(bodies.decode(body, 1 << 20))
    except bodies.BodyError as error:
        return "refused", error.kind


def reference(body: bytes) -> tuple[str, str]:
    """The same verdict from `json.loads` alone (the pre-msgspec reader)."""
    try:
        value = bodies._slow(body, bodies._LONG_DIGITS.search(body) is not None)
    except bodies.BodyError as error:
        return "refused", error.kind
    if body.count(b"[") + body.count(b"{") > bodies.MAX_DEPTH and bodies._depth(value) > bodies.MAX_DEPTH:
        return "refused", "too_deep"
    return "ok", typed(value)


def typed(value: object) -> str:
    """A value's repr with the type of every leaf (1 and 1.0 and True differ; -0.0 and 0.0 differ in repr)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{typed(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(typed(v) for v in value) + "]"
    return f"{type(value).__name__}:{value!r}"


EDGES = [b"01", b"1.", b".5", b"+1", b"[1,]", b"{'a':1}", b"1e", b"NaN", b"-Infinity", b"[Infinity]", b"1e400",
         b"-1e400", b'"\\ud800"', b'"\\uDE00"', b'"\\uD83D\\uDE00"', b'"\xed\xa0\x80"', b'"\xc0\xaf"', b"\xef\xbb\xbf{}",
         '{"a": 1}'.encode("utf-16"), b'{"a":1,"b":2,"a":3}', b"9" * 40, b"-" + b"9" * 41, b"1" * 39 + b"e2",
         b"[" * 65 + b"]" * 65, b"[" * 5000 + b"]" * 5000, b"\x0c1", b"\xc2\xa01", b'"\t"', b'"\x7f"', b"1 2",
         b"2.4703282292062328e-324", b"1.7976931348623158e308", b"9007199254740993", b"  \n\t\r[]\r\n", b"-0", b"-0.0"]


@pytest.mark.parametrize("body", EDGES)
def test_edge_bodies_read_as_json_loads_reads_them(body: bytes) -> None:
    assert verdict(body) == reference(body)


def test_mutated_request_bodies_read_as_json_loads_reads_them() -> None:
    rnd = random.Random(17)
    for _ in range(20_000):
        body = bytearray(BASE)
        for _ in range(rnd.randint(1, 3)):
            where = rnd.randrange(len(body))
            action = rnd.random()
            if action < 0.4:
                body[where] = rnd.choice(ALPHABET)
            elif action < 0.7:
                del body[where]
            else:
                body.insert(where, rnd.choice(ALPHABET))
        assert verdict(bytes(body)) == reference(bytes(body)), bytes(body)


def test_every_float_text_reads_as_the_same_float() -> None:
    rnd = random.Random(25)
    for _ in range(20_000):
        number = struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0]
        for text in (repr(number), f"{number:.17e}", f"{number:.20g}", f"{number:.3g}"):
            body = f"[{text}]".encode()
            assert verdict(body) == reference(body), text


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20))
def test_any_json_document_reads_back_as_json_loads_reads_it(value: object) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        body = text.encode("utf-8", "surrogatepass")
        assert verdict(body) == reference(body)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])},
    optional={"content": st.none() | st.text() | st.lists(st.dictionaries(st.sampled_from(["type", "text"]), st.text()),
                                                           max_size=2),
              "name": st.none() | st.text(), "tool_calls": st.none() | st.lists(st.dictionaries(st.text(), st.integers())),
              "tool_call_id": st.none() | st.text(), "extra": st.none() | st.integers()}))
def test_a_message_dumps_as_pydantic_dumps_it(fields: dict[str, object]) -> None:
    message = Message.model_validate(fields)
    assert json.dumps(message.dump()) == json.dumps(message.model_dump(exclude_none=True))
