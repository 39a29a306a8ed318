"""A published OpenAPI document as a test oracle: requests generated from its request schemas, mutated into
schema-invalid ones, sent to a running server; answers judged against its response schemas.

Shared by `tests/test_openai_conformance.py` (bounded, in CI) and `bench/conformance.py` (thousands of
requests, per-operation figures). The generator is a small seeded one written here rather than
hypothesis-jsonschema: that library's object strategy relies on a Hypothesis internal (`many.more`) that
the Hypothesis this project pins no longer has. Every generated request is checked against the schema with
`jsonschema` before it is sent, so a generator slip is counted, never reported as the server's fault.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from ruamel.yaml import YAML

DATA = Path(__file__).resolve().parent / "data"
OPENAI_SPEC = DATA / "openai" / "openapi.yaml"
KSERVE_SPEC = DATA / "kserve" / "open_inference_rest.yaml"

Json = Any


@cache
def load_spec(path: Path) -> dict[str, Json]:
    """The document as JSON values (YAML timestamps, such as examples' dates, become strings)."""
    with path.open(encoding="utf-8") as stream:
        document = YAML(typ="safe", pure=False).load(stream)  # (ruamel's C loader: about 1 s for OpenAI's 3 MB)
    return json.loads(json.dumps(document, default=str))  # type: ignore[no-any-return]


class Spec:
    """One OpenAPI document: its components, validators for them and a generator of instances."""

    def __init__(self, path: Path) -> None:
        self.document = load_spec(path)
        self.components = self.document.get("components", {})

    def ref(self, name: str) -> dict[str, Json]:
        return {"$ref": f"#/components/schemas/{name}"}

    def validator(self, schema: dict[str, Json]) -> Draft202012Validator:
        """A validator of `schema` whose `$ref`s resolve into this document."""
        return _validator(json.dumps(schema), id(self), self)

    def branch(self, schema: dict[str, Json], payload: Json) -> dict[str, Json]:
        """The branch of a union (`anyOf`/`oneOf`) whose `type` property names the payload's `type` (a stream
        event's schema is chosen by its type), else the schema itself: an error then points into that branch."""
        node = self.resolve(schema)
        kind = payload.get("type") if isinstance(payload, dict) else None
        for branch in node.get("anyOf", node.get("oneOf", [])) if kind is not None else []:
            declared = self.resolve(self.resolve(branch).get("properties", {}).get("type", {}))
            if kind == declared.get("const") or kind in declared.get("enum", []):
                return branch  # type: ignore[no-any-return]
        return schema

    def resolve(self, node: dict[str, Json]) -> dict[str, Json]:
        """`node` with its `$ref` followed (sibling keywords kept, as OpenAPI 3.1 allows)."""
        while "$ref" in node:
            target = self.document
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            rest = {k: v for k, v in node.items() if k != "$ref"}
            node = {**target, **rest}
        return node


@cache
def _validator(schema: str, _key: int, spec: Spec) -> Draft202012Validator:
    return Draft202012Validator({**json.loads(schema), "components": spec.components})


class Generator:
    """Seeded instances of JSON Schemas: required properties always, optional ones at `optional` odds, depth-bounded."""

    def __init__(self, spec: Spec, rng: random.Random, optional: float = 0.35, depth: int = 7) -> None:
        self.spec = spec
        self.rng = rng
        self.optional = optional
        self.depth = depth

    def value(self, schema: Json, depth: int = 0) -> Json:
        if schema is True or schema == {}:
            return self._scalar()
        node = self.spec.resolve(schema)
        if "const" in node:
            return copy.deepcopy(node["const"])
        if "enum" in node:
            return copy.deepcopy(self.rng.choice(node["enum"]))
        for key in ("anyOf", "oneOf"):
            if key in node:
                branches = node[key]
                if depth >= self.depth:  # prefer a scalar branch deep down
                    scalar = [b for b in branches if self.spec.resolve(b).get("type") not in ("object", "array")]
                    branches = scalar or branches
                rest = {k: v for k, v in node.items() if k != key}
                return self.value({**rest, **self.spec.resolve(self.rng.choice(branches))}, depth)
        if "allOf" in node:
            return self.value(self._merge(node), depth)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = self.rng.choice(kind)
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else None
        if kind is None:
            return self._scalar()
        return getattr(self, f"_{kind}")(node, depth)

    def _merge(self, node: dict[str, Json]) -> dict[str, Json]:
        merged: dict[str, Json] = {k: v for k, v in node.items() if k != "allOf"}
        for part in node["allOf"]:
            part = self.spec.resolve(part)
            if "allOf" in part:
                part = self._merge(part)
            for key, value in part.items():
                if key == "properties":
                    merged["properties"] = {**merged.get("properties", {}), **value}
                elif key == "required":
                    merged["required"] = [*merged.get("required", []), *value]
                else:
                    merged.setdefault(key, value)
        return merged

    def _scalar(self) -> Json:
        return self.rng.choice([self.rng.randint(-3, 100), "x", True, None, 0.5])

    def _null(self, node: dict[str, Json], depth: int) -> None:
        return None

    def _boolean(self, node: dict[str, Json], depth: int) -> bool:
        return self.rng.random() < 0.5

    def _integer(self, node: dict[str, Json], depth: int) -> int:
        low, high = _bounds(node, -5, 64)
        low, high = int(-(-low // 1)), int(high // 1)
        return self.rng.randint(low, max(low, min(high, low + 64)))

    def _number(self, node: dict[str, Json], depth: int) -> float:
        low, high = _bounds(node, -5.0, 5.0)
        return round(self.rng.uniform(low, min(high, low + 10)), 3)

    def _string(self, node: dict[str, Json], depth: int) -> str:
        low = node.get("minLength", 0)
        high = min(node.get("maxLength", low + 12), low + 12)
        alphabet = "abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789_-"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(low, max(low, high))))

    def _array(self, node: dict[str, Json], depth: int) -> list[Json]:
        low = node.get("minItems", 0)
        high = low if depth >= self.depth else min(node.get("maxItems", low + 3), low + 3)
        items = node.get("items", {})
        return [self.value(items, depth + 1) for _ in range(self.rng.randint(low, max(low, high)))]

    def _object(self, node: dict[str, Json], depth: int) -> dict[str, Json]:
        properties = node.get("properties", {})
        required = set(node.get("required", []))
        out: dict[str, Json] = {}
        for name, schema in properties.items():
            if name in required or (depth < self.depth and self.rng.random() < self.optional):
                out[name] = self.value(schema, depth + 1)
        return out


def _bounds(node: dict[str, Json], low: float, high: float) -> tuple[float, float]:
    step = 1e-3 if isinstance(low, float) else 1
    if "minimum" in node:
        low = node["minimum"]
    if isinstance(node.get("exclusiveMinimum"), (int, float)) and not isinstance(node["exclusiveMinimum"], bool):
        low = node["exclusiveMinimum"] + step
    if "maximum" in node:
        high = node["maximum"]
    if isinstance(node.get("exclusiveMaximum"), (int, float)) and not isinstance(node["exclusiveMaximum"], bool):
        high = node["exclusiveMaximum"] - step
    return low, max(low, high)


WRONG = [12345, "AAA", True, 0.5, None, [1, "x"], {"x": 1}, -1, 10**9, [], {}]
"""The values a mutation puts in place of a field's: each is of the wrong type or out of range for most fields."""


def mutate(request: dict[str, Json], rng: random.Random) -> tuple[dict[str, Json], str]:
    """`request` with one field (a top-level one, or one level down in a list of objects) given a wrong value or
    removed; and the path of that field, as OpenAI names it (`tools.[0].type`)."""
    out = copy.deepcopy(request)
    paths: list[tuple[Any, Any, str]] = [(out, key, key) for key in out if key != "model"]  # (an unknown model: 404)
    for key, value in out.items():
        if isinstance(value, list):
            for index, item in enumerate(value[:2]):
                if isinstance(item, dict):
                    paths += [(item, sub, f"{key}.[{index}].{sub}") for sub in item]
        elif isinstance(value, dict):
            paths += [(value, sub, f"{key}.{sub}") for sub in value]
    container, key, name = rng.choice(paths)
    if rng.random() < 0.15:
        del container[key]
    else:
        container[key] = copy.deepcopy(rng.choice(WRONG))
    return out, name


def _at(body: dict[str, Json], path: str) -> str:
    """The JSON of the value at a `mutate` path (`absent` when the mutation removed it)."""
    node: Json = body
    for part in path.split("."):
        index = re.fullmatch(r"\[(\d+)\]", part)
        try:
            node = node[int(index.group(1))] if index else node[part]
        except (KeyError, IndexError, TypeError):
            return "absent"
    return json.dumps(node)


@dataclass
class Operation:
    """One operation under test: how to send it, and the schemas it is judged by."""

    name: str
    method: str
    path: str
    request: str | None
    response: str | None
    stream_event: str | None = None
    fix: Callable[[dict[str, Json], random.Random], bool | None] | None = None
    """Makes a generated body address this server (its model names): applied before the schema check. It returns
    False for a body it left unaddressed on purpose (a tensor the model does not take): such a body must get no
    5xx and a well-shaped error, but may be refused though the schema allows it."""
    error_shape: Callable[[Json], bool] | None = None
    """The protocol's error body (default: OpenAI's)."""


Finding = tuple[str, str, str]
"""(key, detail, request): the key is a path with list indices as `*` (`tools.[*].type`, `choices/*/logprobs`)."""


def _key(path: str) -> str:
    return re.sub(r"\[\d+\]", "[*]", re.sub(r"(^|/)\d+(?=/|$)", r"\1*", path))


@dataclass
class Tally:
    """What one operation's requests came to."""

    sent: int = 0
    valid_sent: int = 0
    invalid_sent: int = 0
    generator_misses: int = 0
    status: Counter[int] = field(default_factory=Counter)
    server_errors: list[Finding] = field(default_factory=list)
    bad_200: list[Finding] = field(default_factory=list)
    """200 answers whose body (or a stream event) the response schema rejects: (where in the body, why, request)."""
    bad_error_shape: list[Finding] = field(default_factory=list)
    accepted_invalid: list[Finding] = field(default_factory=list)
    """Schema-invalid requests answered 200: (the mutated field's path, its new value as JSON, request)."""
    refused_valid: list[Finding] = field(default_factory=list)
    """Schema-valid requests answered 4xx: (the error's param, its message, request)."""

    def line(self, name: str) -> str:
        return (f"{name}: {self.sent} requests ({self.valid_sent} valid, {self.invalid_sent} invalid, "
                f"{self.generator_misses} generator misses), statuses {dict(sorted(self.status.items()))}, "
                f"5xx {len(self.server_errors)}, schema-invalid 200 bodies {len(self.bad_200)}, "
                f"invalid accepted {len(self.accepted_invalid)}, valid refused {len(self.refused_valid)}, "
                f"error bodies not in OpenAI's shape {len(self.bad_error_shape)}")


def error_shape(body: Json) -> bool:
    """OpenAI's (and vLLM's) error body: `{"error": {"message": str, "type": str, "param", "code"}}`."""
    error = body.get("error") if isinstance(body, dict) else None
    return (isinstance(error, dict) and isinstance(error.get("message"), str) and isinstance(error.get("type"), str)
            and "param" in error and "code" in error)


def events(text: str) -> Iterator[Json]:
    """The JSON payloads of a server-sent event stream (`[DONE]` left out)."""
    for block in text.split("\n\n"):
        data = "".join(line[5:].strip() for line in block.splitlines() if line.startswith("data:"))
        if data and data != "[DONE]":
            yield json.loads(data)


def check_answer(spec: Spec, operation: Operation, response: httpx.Response, tally: Tally, sent: str) -> None:
    """Judge one answer: no 5xx, a 200 valid against the response schema, an error in OpenAI's shape."""
    tally.status[response.status_code] += 1
    if response.status_code >= 500:
        tally.server_errors.append((str(response.status_code), response.text[:200], sent))
        return
    if response.status_code != 200:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not (operation.error_shape or error_shape)(body):
            tally.bad_error_shape.append((str(response.status_code), response.text[:200], sent))
        return
    if operation.response is None and operation.stream_event is None:
        return  # (a health route: its status is its answer)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        schema, payloads = operation.stream_event, list(events(response.text))
    else:
        schema, payloads = operation.response, [response.json()]
    if schema is None:
        return
    for payload in payloads:
        validator = spec.validator(spec.branch(spec.ref(schema), payload))
        problem = best_match(validator.iter_errors(payload))  # (the deepest relevant error of an anyOf's branches)
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path)
            tally.bad_200.append((_key(where), problem.message[:200], sent))
            return


def run_operation(client: httpx.Client, spec: Spec, operation: Operation, count: int, seed: int,
                  invalid_share: float = 0.4) -> Tally:
    """`count` requests of one operation: about `invalid_share` of them mutated into schema-invalid ones."""
    rng = random.Random(seed)
    generator = Generator(spec, rng)
    tally = Tally()
    request_validator = spec.validator(spec.ref(operation.request)) if operation.request else None
    for _ in range(count):
        if operation.request is None or request_validator is None:
            response = client.request(operation.method, operation.path)
            addressed = True
            tally.sent += 1
            tally.valid_sent += 1
            check_answer(spec, operation, response, tally, operation.path)
            continue
        body = generator.value(spec.ref(operation.request))
        addressed = operation.fix(body, rng) is not False if operation.fix else True
        if not request_validator.is_valid(body):
            tally.generator_misses += 1
            continue
        mutated = rng.random() < invalid_share
        where = ""
        if mutated:
            body, where = mutate(body, rng)
            value = _at(body, where)
            if request_validator.is_valid(body):  # the mutation happened to keep it valid
                mutated = False
        text = json.dumps(body)
        response = client.request(operation.method, operation.path, content=text,
                                  headers={"content-type": "application/json"})
        tally.sent += 1
        if mutated:
            tally.invalid_sent += 1
        else:
            tally.valid_sent += 1
        check_answer(spec, operation, response, tally, text)
        if mutated and response.status_code == 200:
            tally.accepted_invalid.append((_key(where), value, text))
        elif not mutated and addressed and 400 <= response.status_code < 500:
            if error_shape(response.json()):
                error = response.json()["error"]
                tally.refused_valid.append((_key(str(error.get("param"))), str(error.get("message")), text))
            else:  # KServe's error: a message alone
                tally.refused_valid.append(("error", _message(response.text), text))
    return tally


def _model(name: str) -> Callable[[dict[str, Json], random.Random], None]:
    def fix(body: dict[str, Json], rng: random.Random) -> None:
        body["model"] = name
    return fix


OPENAI_OPERATIONS = [
    Operation("POST /v1/chat/completions", "POST", "/v1/chat/completions", "CreateChatCompletionRequest",
              "CreateChatCompletionResponse", "CreateChatCompletionStreamResponse", _model("quick")),
    Operation("POST /v1/completions", "POST", "/v1/completions", "CreateCompletionRequest",
              "CreateCompletionResponse", "CreateCompletionResponse", _model("quick")),
    Operation("POST /v1/embeddings", "POST", "/v1/embeddings", "CreateEmbeddingRequest",
              "CreateEmbeddingResponse", None, _model("embedder")),
    Operation("POST /v1/responses", "POST", "/v1/responses", "CreateResponse", "Response", "ResponseStreamEvent",
              _model("quick")),
    Operation("GET /v1/models", "GET", "/v1/models", None, "ListModelsResponse"),
    Operation("GET /v1/models/{model}", "GET", "/v1/models/quick", None, "Model"),
]
"""The operations of OpenAI's document that the OpenAI personality serves, each aimed at a model that answers
it (a generated model name is almost never served: its 404 would teach nothing)."""


def declared_fields(operation: str) -> frozenset[str]:
    """The top-level fields aisim's request model of an operation declares (what vLLM's declares, by design)."""
    from aisim.api.openai import protocol

    models = {"POST /v1/chat/completions": protocol.ChatRequest, "POST /v1/completions": protocol.CompletionRequest,
              "POST /v1/embeddings": protocol.EmbeddingRequest, "POST /v1/responses": protocol.ResponseRequest}
    if operation.startswith("POST /v2/"):
        return frozenset({"id", "parameters", "inputs", "outputs"})  # (Triton reads every field of the request)
    model = models.get(operation)
    return frozenset(model.model_fields) if model else frozenset()


def _covered(exceptions: dict[tuple[str, str, str], str], operation: str, kind: str, key: str) -> bool:
    """Whether an exception covers a finding: its operation starts the operation's name (`POST /v2/models/`
    covers every model's), and its key is the finding's, or ends in `*` and starts it."""
    return any(operation.startswith(op) and k == kind and (key == pattern or (pattern.endswith("*") and
                                                                              key.startswith(pattern[:-1])))
               for op, k, pattern in exceptions)


def _message(body: str) -> str:
    """An error body's message (KServe's `error` string, OpenAI's `error.message`), else the body."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body
    return str(error.get("message") if isinstance(error, dict) else error)


def unexplained(operation: str, tally: Tally, exceptions: dict[tuple[str, str, str], str]) -> list[str]:
    """The findings of one operation that no documented exception (nor one of its two rules) covers."""
    declared = declared_fields(operation)
    left: list[str] = []
    for kind, findings in (("response", tally.bad_200), ("accepted", tally.accepted_invalid),
                           ("refused", tally.refused_valid)):
        for key, detail, request in findings:
            if _covered(exceptions, operation, kind, key):
                continue
            top = key.split(".")[0]
            if kind == "accepted" and top not in declared:
                continue  # rule 1: a field vLLM does not declare is ignored, whatever its value
            if kind == "accepted" and detail == "null" and "." not in key:
                continue  # rule 2: null for a field vLLM declares Optional means its default
            left.append(f"{kind} {key}: {detail[:160]} <- {request[:400]}")
    left += [f"5xx {status}: {body} <- {request[:400]}" for status, body, request in tally.server_errors
             if not _covered(exceptions, operation, "5xx", _message(body))]
    left += [f"error shape {status}: {body} <- {request[:400]}" for status, body, request in tally.bad_error_shape
             if not _covered(exceptions, operation, "shape", status)]
    return left


OPENAI_EXCEPTIONS: dict[tuple[str, str, str], str] = {
    ('POST /v1/chat/completions', 'refused', 'tools.[*].type'):
        "vLLM's chat tools are function tools only (`type` 'function'); a custom tool is a 400 that names the value it takes",
    ('POST /v1/chat/completions', 'refused', 'top_logprobs'):
        'vLLM refuses `top_logprobs` without `logprobs: true`',
    ('POST /v1/chat/completions', 'refused', 'stream_options'):
        'vLLM refuses `stream_options` without `stream: true`',
    ('POST /v1/chat/completions', 'refused', 'tool_choice'):
        'vLLM refuses a named `tool_choice` whose function is not in `tools`',
    ('POST /v1/chat/completions', 'refused', 'max_tokens'):
        "vLLM's sampling parameters need at least 1 token (the document sets no minimum)",
    ('POST /v1/chat/completions', 'refused', 'max_completion_tokens'):
        'as `max_tokens`: at least 1',
    ('POST /v1/chat/completions', 'refused', 'tools.[*].function.name'):
        'aisim refuses an empty function name: a tool call must name its function',
    ('POST /v1/chat/completions', 'refused', 'messages'):
        "the prompt and the token cap exceed the model's context: vLLM's context-length 400",
    ('POST /v1/chat/completions', 'response', 'choices/*/logprobs*'):
        "stream chunks carry `logprobs: null`, as vLLM and OpenAI's service send them; the document's chunk schema does not allow null",
    ('POST /v1/chat/completions', 'accepted', 'messages.[*].content'):
        'an empty content array is accepted, as vLLM accepts it (the document asks for one part at least)',
    ('POST /v1/chat/completions', 'accepted', 'messages.[*].audio'):
        'fields of a message vLLM does not declare are ignored',
    ('POST /v1/completions', 'accepted', 'best_of'):
        'vLLM sets no maximum on `best_of` (the document: 20)',
    ('POST /v1/completions', 'refused', 'best_of'):
        'vLLM refuses `best_of` below `n`',
    ('POST /v1/completions', 'refused', 'stream_options'):
        'vLLM refuses `stream_options` without `stream: true`',
    ('POST /v1/completions', 'refused', 'prompt'):
        'an empty prompt and token ids outside the vocabulary (negative ones) are 400s, as in vLLM',
    ('POST /v1/completions', 'refused', 'max_tokens'):
        "vLLM's sampling parameters need at least 1 token",
    ('POST /v1/completions', 'refused', 'messages'):
        "the prompt and the token cap exceed the model's context: vLLM's context-length 400",
    ('POST /v1/completions', 'response', 'choices/*/finish_reason*'):
        "stream chunks before the last carry `finish_reason: null`, as vLLM and OpenAI's service send them",
    ('POST /v1/completions', 'response', 'choices/*/logprobs*'):
        'with `echo`, the first prompt token has no logprob: null in `token_logprobs` and `top_logprobs`, as vLLM answers',
    ('POST /v1/embeddings', 'refused', 'input'):
        "an empty string and token ids outside the vocabulary (negative ones) are 400s, as in vLLM and OpenAI's service",
    ('POST /v1/embeddings', 'refused', 'dimensions'):
        'more dimensions than the model has is a 400, as in vLLM',
    ('POST /v1/embeddings', 'response', 'data/*/embedding*'):
        "with `encoding_format: base64` the embedding is a base64 string, as OpenAI's service and vLLM send it; the document types it as an array only",
    ('POST /v1/chat/completions', 'accepted', 'stop'):
        "an empty `stop` array is accepted: it is vLLM's own default (the document asks for one string at least)",
    ('POST /v1/completions', 'accepted', 'stop'):
        "an empty `stop` array is accepted: it is vLLM's own default",
    ('POST /v1/responses', 'refused', 'prompt'):
        "the input and `max_output_tokens` exceed the model's context: vLLM's context-length 400",
    ('POST /v1/responses', 'refused', 'previous_response_id'):
        'a `previous_response_id` that the server does not hold is a 404, as in vLLM',
    ('POST /v1/responses', 'refused', 'tool_choice'):
        'a named `tool_choice` whose function is not in `tools` is a 400, as in vLLM',
    ('POST /v1/responses', 'response', 'response/tools/*'):
        'as `tools/*`, in the response a stream event carries',
    ('POST /v1/responses', 'response', 'response/tool_choice*'):
        'as `tool_choice*`, in the response a stream event carries',
    ('POST /v1/responses', 'response', 'response/text/*'):
        'as `text/*`, in the response a stream event carries',
    ('POST /v1/responses', 'response', 'tool_choice*'):
        'aisim checks the request fields it acts on and echoes the others into the response as sent',
    ('POST /v1/responses', 'response', 'text/*'):
        'aisim checks the request fields it acts on and echoes the others into the response as sent',
    ('POST /v1/responses', 'response', 'tools/*'):
        'aisim checks the request fields it acts on and echoes the others into the response as sent',
    ('POST /v1/responses', 'accepted', 'tools.[*].*'):
        "aisim checks a tool's type, a function tool's name and parameters; the other fields of a tool are echoed unchecked",
    ('POST /v1/responses', 'accepted', 'input.[*].*'):
        "aisim checks an input item's type and reads a message's role and content; other fields are not checked",
    ('POST /v1/responses', 'accepted', 'tool_choice.*'):
        "aisim reads a tool_choice's function name; its other fields are echoed unchecked",
    ('POST /v1/responses', 'accepted', 'text.*'):
        "aisim reads text.format's schema; the other fields of text are echoed unchecked",
    ('POST /v1/responses', 'accepted', 'reasoning*'):
        'aisim simulates no reasoning: the reasoning settings are not checked',
}
"""(operation, kind, key) -> why aisim, following vLLM (or OpenAI's own service), departs from the document there.
Each is listed in docs/openai-conformance.md (a test checks it). `kind`: `response` (a 200 body the response
schema rejects at `key`), `accepted` (a schema-invalid `key` answered 200), `refused` (a schema-valid request
refused with error param `key`)."""


def kserve_error_shape(body: Json) -> bool:
    """KServe v2's error body: `{"error": str}` (`inference_error_response`)."""
    return isinstance(body, dict) and isinstance(body.get("error"), str)


def _tensor(name: str, datatype: str, shape: list[int], rng: random.Random) -> dict[str, Json]:
    count = 1
    for size in shape:
        count *= size
    if datatype == "BYTES":
        data: list[Json] = [f"s{rng.randint(0, 99)}" for _ in range(count)]
    elif datatype.startswith("FP"):
        data = [round(rng.uniform(-1, 1), 3) for _ in range(count)]
    else:
        data = [rng.randint(0, 100) for _ in range(count)]
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


TRITON_SIGNATURES = {
    "resnet50": [("input", "FP32", [3, 4, 4])],
    "simple": [("INPUT0", "INT32", [16]), ("TEXT", "BYTES", [2])],
}
"""The inputs of tests/scenarios/serve/triton.yaml's models (a batch dimension first)."""


def _addressed(model: str) -> Callable[[dict[str, Json], random.Random], bool | None]:
    def fix(body: dict[str, Json], rng: random.Random) -> bool:
        if rng.random() < 0.3:  # the generated tensors as they are: a 400 for the model, never a 5xx
            return False
        batch = rng.randint(1, 4)
        body["inputs"] = [_tensor(name, kind, [batch, *shape], rng) for name, kind, shape in TRITON_SIGNATURES[model]]
        outputs = body.get("outputs")
        if isinstance(outputs, list):
            body["outputs"] = [o for o in outputs if isinstance(o, dict) and o.get("name") in ("output", "OUTPUT0", "LABELS")]
        if isinstance(body.get("parameters"), dict):
            body["parameters"] = {}  # (Triton's request parameters are its own: binary_data_output, ...)
        return True
    return fix


KSERVE_OPERATIONS = [
    Operation("GET /v2/health/live", "GET", "/v2/health/live", None, None, error_shape=kserve_error_shape),
    Operation("GET /v2/health/ready", "GET", "/v2/health/ready", None, None, error_shape=kserve_error_shape),
    Operation("GET /v2", "GET", "/v2", None, "metadata_server_response", error_shape=kserve_error_shape),
    Operation("GET /v2/models/{m}/versions/{v}", "GET", "/v2/models/resnet50/versions/1", None,
              "metadata_model_response", error_shape=kserve_error_shape),
    Operation("GET /v2/models/{m}/versions/{v}/ready", "GET", "/v2/models/resnet50/versions/1/ready", None, None,
              error_shape=kserve_error_shape),
    *(Operation(f"POST /v2/models/{model}/versions/1/infer", "POST", f"/v2/models/{model}/versions/1/infer",
                "inference_request", "inference_response", None, _addressed(model), kserve_error_shape)
      for model in TRITON_SIGNATURES),
]
"""The operations of KServe's document the Triton personality serves (the document writes the server metadata
path `/v2/`; Triton serves `/v2`)."""

KSERVE_EXCEPTIONS: dict[tuple[str, str, str], str] = {
    ("POST /v2/models/", "5xx", "Unable to parse '*"):
        "a field of the wrong JSON type is Triton's 500 (its JSON reader's internal error), as Triton answers it",
    ("POST /v2/models/", "5xx", "Failed to parse 'data' field: shape does not match true shape"):
        "data whose element count differs from the shape's is Triton's 500, as Triton answers it",
    ("GET /v2/health/ready", "shape", "400"):
        "a server with a model that failed to load is not ready: Triton's 400 with an empty body",
    ("POST /v2/models/", "refused", "error"):
        "Triton checks a request's tensors against the model's inputs (names, datatypes, shapes, count): a request the "
        "document allows but the model does not take, such as no inputs, is a 400",
    ("POST /v2/models/", "5xx", "failed to parse the request JSON buffer*"):
        "a body that is not a JSON object is Triton's 500, as Triton answers it",
}
"""As OPENAI_EXCEPTIONS, for the Triton personality against KServe's document."""
