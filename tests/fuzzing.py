"""The fuzz harness: mutated requests for both HTTP personalities, sent over real sockets, and what a
hostile client must never see (tests/test_fuzz_http.py, and the longer bench/fuzz_http.py).

Requests are drawn by hypothesis from valid templates, each mutated: a value replaced by another JSON
value of any type (integers of thousands of digits, deep nesting, lone surrogates, non-ASCII digits,
huge sizes), keys dropped or added, bodies cut or not JSON at all, headers that lie. The harness runs
the server in this process (`running_server`) and catches every traceback it logs. Its checks:
no answer is a 500 without a real server's reason, nothing is logged with a traceback, no request
outlives its time bound, `/health` answers while the bad requests run, and the model lists
(`/v1/models`, `/v2/repository/index`) are what they were: a bad request changed nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from aisim.testing import running_server

from .conftest import TEST_SCENARIOS

TIME_BOUND_S = 30.0
"""A request whose whole answer takes longer than this is a hang (the fuzz servers run the clock at `SPEED`,
and their models' contexts are 2,048 tokens: the longest legitimate answer takes a few seconds)."""

SPEED = 50.0
"""The fuzz servers' clock speed: a mutated `max_tokens` may ask for thousands of tokens."""


@dataclass(frozen=True)
class Raw:
    """A JSON fragment written as it is (what `json.dumps` cannot write: 5,000-digit integers, `NaN`, deep
    nesting, lone surrogates)."""

    text: str


def dump(value: Any) -> str:
    """JSON text of `value`, with `Raw` fragments verbatim."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(str(k)) + ":" + dump(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)


NASTY: list[Any] = [
    Raw("1" + "0" * 5000), Raw("-" + "9" * 4400), Raw("1" + "0" * 400), Raw("1e999"), Raw("-1e400"), Raw("NaN"),
    Raw("Infinity"), Raw("[" * 5000 + "]" * 5000), Raw('{"a":' * 3000 + "1" + "}" * 3000), Raw('"\\ud800"'),
    Raw("1" + "0" * 30), 2**63, 2**64, -(2**63) - 1, -1, 0, 1.5, -0.0, 1e308, "١٢", "¹", "", "x" * 5000, "\x00",
    "../../etc/passwd", "%s%n", [], {}, [[]], {"": None}, True, False, None,
    "3KiB", "1MiB", "64GiB", "0B", "-1s", "0ms", "1e9/s", "0/s", "99999h", ["2MiB", "1MiB"], [0], "caching", "buddy",
    "slab", "lognormal", "poisson", "trace", "H100-SXM", "llama-3-8b", 1e300, 2**31, "fp8", "mxfp4", "awq",
    "modelopt_fp4", "concurrency", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b", "B300", "RTX-PRO-6000", "/",
    "../../../aisim/scenario/configs/deepseek-ai--DeepSeek-V3_config.json", "/dev/null", "/nonexistent/config.json",
]
"""Values that broke parsers and handlers somewhere (and scenario values near the engine's own limits)."""

KEYS = ["model", "messages", "prompt", "max_tokens", "n", "stream", "tokens", "lora_name", "lora_path",
        "base_model_name", "response_format", "schema", "type", "properties", "items", "minLength", "maxLength",
        "minItems", "maxItems", "pattern", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "required",
        "inputs", "outputs", "shape", "datatype", "data", "parameters", "name", "ready", "log_verbose_level",
        "binary_data", "classification", "config", "gpu", "field", "value", "duration", "code", "content", "role",
        "allocator", "minBlock", "maxSplitSize", "sizeClasses", "slabSize", "roundupPower2Divisions", "count",
        "rate", "until", "interval", "maxModelLen", "gpuMemoryUtilization", "kind", "profile", "family", "stages",
        "timer", "gap", "promptSet", "timeout", "systemPrompts", "multiTurn", "entrypoint", "plan", "survive",
        "slo", "search", "replicas", "tensorParallel", "connections", "maxOpen", "maxHeaderSize", "shutdownGrace",
        "quantization", "dataParallel", "enableExpertParallel", "clients", "requests", "thinkTime", "kvCacheDtype"]

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.integers(-3, 300),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12), st.sampled_from(NASTY),
)
values = st.recursive(leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=4)),
    max_leaves=8)


@st.composite
def mutated(draw: st.DrawFn, value: Any, rate: int = 4) -> Any:
    """`value` with about one part in `rate` replaced, dropped, added or kept."""
    if draw(st.integers(0, rate * 3)) == 0:
        return draw(values)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            choice = draw(st.integers(0, rate))
            if choice == 0:
                continue
            out[key] = draw(mutated(item, rate)) if choice < 3 else item
        if draw(st.integers(0, rate)) == 0:
            out[draw(st.sampled_from(KEYS))] = draw(values)
        return out
    if isinstance(value, list):
        items = [draw(mutated(item, rate)) for item in value if draw(st.integers(0, rate))]
        if draw(st.integers(0, rate)) == 0:
            items += items[:1] * draw(st.integers(1, 3)) or [draw(values)]
        return items
    return value


@dataclass(frozen=True)
class Case:
    """One request: method, path, headers and body bytes."""

    method: str
    path: str
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def changes_state(self) -> bool:
        """Whether a successful answer may change what the model lists show (LoRA, repository calls)."""
        return any(part in self.path for part in ("lora_adapter", "/repository/", "/load", "/unload"))


@st.composite
def body_case(draw: st.DrawFn, path: str, template: Any, headers: tuple[tuple[str, str], ...] = ()) -> Case:
    """A POST of a mutated template; sometimes its text is cut short or is not JSON at all."""
    text = dump(draw(mutated(template)))
    damage = draw(st.integers(0, 19))
    if damage == 0:
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif damage == 1:
        text = draw(st.sampled_from(["", "null", "[]", "1", '"x"', "{", "\xff", "[" * 100_000, "{}" * 3]))
    data = text.encode("utf-8", "surrogatepass")
    return Case("POST", path, data, headers + (("Content-Type", "application/json"),))


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 20},
                                           "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                                           "age": {"type": "integer", "minimum": 0}, "kind": {"enum": ["a", "b"]}},
          "required": ["name"]}
USER = [{"role": "user", "content": "hello there"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

OPENAI_TEMPLATES: list[tuple[str, Any]] = [
    ("/v1/chat/completions", {"model": "quick", "messages": USER, "max_tokens": 8, "stream": False, "n": 1,
                              "stop": ["\n"], "seed": 3, "temperature": 0.5, "logprobs": True, "top_logprobs": 2,
                              "stream_options": None}),
    ("/v1/chat/completions", {"model": "llama", "messages": USER, "max_tokens": 16, "stream": True,
                              "stream_options": {"include_usage": True, "continuous_usage_stats": True}}),
    ("/v1/chat/completions", {"model": "quick", "messages": USER, "max_tokens": 32, "response_format": {
        "type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}}),
    ("/v1/chat/completions", {"model": "llama", "messages": USER, "max_tokens": 24, "response_format": {
        "type": "json_object"}, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    ("/v1/completions", {"model": "quick", "prompt": "once upon", "max_tokens": 8, "logprobs": 2, "echo": True,
                         "n": 2, "best_of": 2, "suffix": "end"}),
    ("/v1/completions", {"model": "llama", "prompt": [[1, 2, 3], [4, 5]], "max_tokens": 4, "stream": True}),
    ("/v1/embeddings", {"model": "embedder", "input": ["a b c", "d"], "encoding_format": "base64", "dimensions": 8}),
    ("/v1/responses", {"model": "quick", "input": "hi", "max_output_tokens": 16, "instructions": "be brief",
                       "text": {"format": {"type": "json_schema", "name": "p", "schema": SCHEMA}}, "tools": [
                           {"type": "function", "name": "f", "parameters": {"type": "object"}}], "store": True}),
    ("/v1/responses", {"model": "llama", "input": [{"role": "user", "content": "hi"}], "stream": True,
                       "previous_response_id": "resp_1"}),
    ("/tokenize", {"model": "llama", "prompt": "hello world", "return_token_strs": True}),
    ("/tokenize", {"model": "llama", "messages": USER, "tools": TOOLS, "add_generation_prompt": False}),
    ("/detokenize", {"model": "llama", "tokens": [9906, 1917]}),
    ("/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": "/adapters/sql", "base_model_name": "llama"}),
    ("/v1/unload_lora_adapter", {"lora_name": "sql"}),
    ("/v1/messages", {"model": "llama", "max_tokens": 16, "messages": USER, "system": "be brief", "stream": False,
                      "stop_sequences": ["\n"], "temperature": 0.5, "top_k": 5, "metadata": {"user_id": "u"},
                      "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto"}}),
    ("/v1/messages", {"model": "quick", "max_tokens": 8, "stream": True, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]}]}),
    ("/v1/messages/count_tokens", {"model": "llama", "messages": USER, "system": [{"type": "text", "text": "x"}]}),
    ("/admin/dcgm/inject", {"gpu": "g", "field": "DCGM_FI_DEV_GPU_TEMP", "value": 90, "duration": "1s"}),
    ("/admin/dcgm/clear", {"gpu": 0, "field": "DCGM_FI_DEV_GPU_TEMP"}),
    ("/admin/xid", {"gpu": "g", "code": 31}),
]

OPENAI_GETS = ["/health", "/ping", "/load", "/version", "/metrics", "/v1/models", "/v1/models/quick",
               "/v1/models/%C2%B9", "/v1/responses/resp_x", "/admin/events?count=2&interval=0.01",
               "/admin/events?count=%C2%B9", "/admin/dcgm/inject", "/nothing",
               "/v1/messages"]

SIMPLE = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
                     {"name": "TEXT", "datatype": "BYTES", "shape": [1, 2], "data": ["a", "b"]}],
          "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}, {"name": "LABELS"}],
          "parameters": {"priority": 1}, "id": "r1"}
RESNET = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 4, 4], "data": [0.5] * 48}],
          "outputs": [{"name": "output", "parameters": {"classification": 3}}]}
CONFIG = json.dumps({"max_batch_size": 4, "instance_group": [{"count": 1, "kind": "KIND_GPU"}],
                     "dynamic_batching": {"max_queue_delay_microseconds": 100}})

KSERVE_TEMPLATES: list[tuple[str, Any]] = [
    ("/v2/models/simple/infer", SIMPLE),
    ("/v2/models/simple/versions/1/infer", SIMPLE),
    ("/v2/models/resnet50/infer", RESNET),
    ("/v2/repository/index", {"ready": True}),
    ("/v2/repository/models/simple/load", {"parameters": {"config": CONFIG}}),
    ("/v2/repository/models/nothing/unload", {"parameters": {"unload_dependents": True}}),
    ("/v2/models/simple/infer", {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {
        "shared_memory_region": "r1", "shared_memory_byte_size": 64, "shared_memory_offset": 0}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "r1", "shared_memory_byte_size": 64}}]}),
    ("/v2/systemsharedmemory/region/r1/register", {"key": "/aisim-fuzz-no-such-region", "offset": 0, "byte_size": 64}),
    ("/v2/systemsharedmemory/region/r1/unregister", {}),
    ("/v2/cudasharedmemory/region/r1/register", {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64}),
    ("/v2/logging", {"log_info": True, "log_verbose_level": 1, "log_format": "ISO8601"}),
    ("/v2/trace/setting", {"trace_level": ["TIMESTAMPS"], "trace_rate": "10", "trace_count": "-1"}),
    ("/v2/models/simple/trace/setting", {"trace_rate": "1", "log_frequency": "0"}),
]

KSERVE_GETS = ["/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/simple", "/v2/models/simple/versions/1",
               "/v2/models/simple/versions/99999999999999999999/ready", "/v2/models/simple/config",
               "/v2/models/stats", "/v2/models/resnet50/stats", "/v2/logging", "/v2/trace/setting",
               "/v2/models/%C2%B9", "/v2/models/simple/versions/1/trace/setting", "/v2/nothing",
               "/v2/systemsharedmemory/status", "/v2/systemsharedmemory/region/r1/status", "/v2/cudasharedmemory/status"]


@st.composite
def binary_case(draw: st.DrawFn) -> Case:
    """A binary-tensor infer request (`Inference-Header-Content-Length`) with a lying header, or compressed."""
    header = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
                                     "parameters": {"binary_data_size": 64}},
                                    {"name": "TEXT", "datatype": "BYTES", "shape": [1, 2], "data": ["a", "b"]}]})
    header = dump(draw(mutated(json.loads(header))))
    tensor = bytes(range(64))
    body = header.encode("utf-8", "surrogatepass") + tensor[: draw(st.integers(0, 64))]
    length = draw(st.sampled_from([str(len(header)), "0", "-1", "¹", "١٢", "+12", "99999999", "abc", "",
                                   str(len(header) + 7), "1" + "0" * 5000]))
    headers = [("Inference-Header-Content-Length", length), ("Content-Type", "application/octet-stream")]
    encoding = draw(st.sampled_from([None, "gzip", "deflate", "br", "gzip, deflate", "identity"]))
    if encoding is not None:
        headers.append(("Content-Encoding", encoding))
        if draw(st.booleans()):
            body = gzip.compress(body) if encoding == "gzip" else zlib.compress(body) if encoding == "deflate" else body
    return Case("POST", "/v2/models/simple/infer", body, tuple(headers))


def cases(templates: list[tuple[str, Any]], gets: list[str]) -> st.SearchStrategy[Case]:
    """Every kind of request of one personality."""
    posts = [body_case(path, template) for path, template in templates]
    return st.one_of(*posts, st.sampled_from(gets).map(lambda path: Case("GET", path)),
                     st.sampled_from(gets).map(lambda path: Case("POST", path, b"{}")))


openai_cases = cases(OPENAI_TEMPLATES, OPENAI_GETS)
kserve_cases = st.one_of(cases(KSERVE_TEMPLATES, KSERVE_GETS), binary_case())

PERSONALITIES: dict[str, tuple[Path, st.SearchStrategy[Case], str]] = {
    "openai": (TEST_SCENARIOS / "serve" / "fuzz-openai.yaml", openai_cases, "/health"),
    "kserve": (TEST_SCENARIOS / "serve" / "triton.yaml", kserve_cases, "/v2/health/live"),
}
"""Each personality's fuzz server scenario, its requests and its health path."""


def fuzz_settings(examples: int) -> settings:
    """Seeded (`derandomize`), generation only: the checks record what they find and never raise, so there
    is nothing to shrink and a run costs what its examples cost."""
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))


class LogCatcher(logging.Handler):
    """Every log record with a traceback, or at ERROR and above, from any logger of this process but the
    access log (which logs each 5xx answer at ERROR)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.name != "tornado.access" and (record.exc_info or record.levelno >= logging.ERROR):
            with self.guard:
                self.records.append(record)

    def tracebacks(self) -> list[str]:
        with self.guard:
            return [self.format(r) for r in self.records]

    @contextlib.contextmanager
    def installed(self) -> Iterator[LogCatcher]:
        root = logging.getLogger()
        root.addHandler(self)
        try:
            yield self
        finally:
            root.removeHandler(self)


@dataclass
class Tally:
    """What the fuzzing saw: statuses, tracebacks, hangs, the slowest `/health` and the broken invariants."""

    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    hangs: list[Case] = field(default_factory=list)
    dropped: list[tuple[Case, str]] = field(default_factory=list)
    """Requests whose connection the server closed without an answer (status 0 in `statuses`)."""
    unexplained_500: list[tuple[Case, str]] = field(default_factory=list)
    changed: list[tuple[Case, str]] = field(default_factory=list)
    slowest_health_s: float = 0.0
    slowest_s: float = 0.0

    def summary(self, tracebacks: int) -> str:
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))
        return (f"{self.sent} requests; statuses {{{statuses}}}; tracebacks {tracebacks}; hangs {len(self.hangs)}; "
                f"500s without a reason {len(self.unexplained_500)}; state changed by a failed request "
                f"{len(self.changed)}; slowest request {self.slowest_s * 1e3:.0f} ms; slowest /health meanwhile "
                f"{self.slowest_health_s * 1e3:.1f} ms")


def real_500(body: bytes) -> bool:
    """A 500 a real server sends: Triton's JSON-parse and tensor errors, vLLM's engine errors, all with a
    message of their own; not Tornado's page for an uncaught exception."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return False
    message = error.get("message") if isinstance(error, dict) else error
    return isinstance(message, str) and message not in ("Internal Server Error", "")


async def send(client: httpx.AsyncClient, case: Case, tally: Tally) -> httpx.Response | None:
    """One request; None for a hang. The answer is read whole (streams included)."""
    start = time.perf_counter()
    try:  # the bound is on the whole answer: a stream that keeps trickling tokens is no exception
        response = await asyncio.wait_for(client.request(case.method, case.path, content=case.body, headers=[
            (k, v.encode()) for k, v in case.headers], timeout=TIME_BOUND_S), TIME_BOUND_S)
    except (TimeoutError, httpx.TimeoutException):
        tally.hangs.append(case)
        return None
    except httpx.TransportError as error:  # the server closed the connection: a fault, or a refused body
        tally.statuses[0] += 1
        tally.dropped.append((case, repr(error)))
        return None
    finally:
        tally.sent += 1
        tally.slowest_s = max(tally.slowest_s, time.perf_counter() - start)
    tally.statuses[response.status_code] += 1
    if response.status_code == 500 and not real_500(response.content):
        tally.unexplained_500.append((case, response.text[:300]))
    return response


async def listing(client: httpx.AsyncClient, personality: str) -> str:
    """What a bad request must not change: the model list, as its text."""
    if personality == "openai":
        response = await client.get("/v1/models", timeout=TIME_BOUND_S)
        models = response.json()["data"] if response.status_code == 200 else response.text
        return json.dumps([m["id"] for m in models] if isinstance(models, list) else models)
    response = await client.post("/v2/repository/index", content=b"{}", timeout=TIME_BOUND_S)
    return response.text


async def run_batch(url: str, personality: str, batch: list[Case], tally: Tally) -> None:
    """Send `batch`: the requests that cannot change state at once, with `/health` timed meanwhile; then the
    others one by one, each checked to have changed nothing unless it succeeded."""
    health = PERSONALITIES[personality][2]
    async with httpx.AsyncClient(base_url=url) as client:
        before = await listing(client, personality)
        quiet = [c for c in batch if not c.changes_state]

        async def probe() -> None:
            for _ in range(3):
                start = time.perf_counter()
                await client.get(health, timeout=TIME_BOUND_S)
                tally.slowest_health_s = max(tally.slowest_health_s, time.perf_counter() - start)
                await asyncio.sleep(0.005)

        await asyncio.gather(probe(), *(send(client, c, tally) for c in quiet))
        after = await listing(client, personality)
        if after != before:
            tally.changed.append((quiet[0] if quiet else Case("GET", "-"), f"{before} -> {after}"))
        for case in batch:
            if not case.changes_state:
                continue
            before = await listing(client, personality)
            response = await send(client, case, tally)
            after = await listing(client, personality)
            if (response is None or response.status_code >= 300) and after != before:
                tally.changed.append((case, f"{before} -> {after}"))
            if '"error"' in after and personality == "openai":
                tally.changed.append((case, after))


def fuzz_personality(personality: str, batches: int, size: int, tally: Tally,
                     before: Callable[[str], None] | None = None) -> None:
    """`batches` seeded batches of `size` requests against the personality's fuzz server, into `tally`;
    `before(url)` runs once the server is up (a baseline measurement, say)."""
    scenario, strategy, _ = PERSONALITIES[personality]
    with running_server(scenario, speed=SPEED) as url:
        if before is not None:
            before(url)

        @fuzz_settings(batches)
        @given(st.lists(strategy, min_size=size, max_size=size))
        def run(batch: list[Case]) -> None:
            asyncio.run(run_batch(url, personality, batch, tally))  # records, never raises

        run()
