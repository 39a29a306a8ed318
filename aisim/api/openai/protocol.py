"""Request bodies of the OpenAI endpoints, validated the way the real API answers mistakes.

Unknown fields are accepted and ignored, as vLLM does (benchmarks send `ignore_eos`,
`continuous_usage_stats`, `repetition_penalty`, `guided_json`, ...). A mistake becomes a 400
with OpenAI's message style: "Missing required parameter: 'messages'." (`missing_required_parameter`),
"Invalid type for 'n': expected an integer, but got a string instead." (`invalid_type`),
"Invalid 'n': integer below minimum value. ..." (`integer_below_min_value`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    model_validator,
)

from .errors import ErrorAnswer, invalid


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")

    nullable: ClassVar[frozenset[str]] = frozenset()
    """Fields whose `null` means "the default": vLLM declares them Optional and the OpenAI spec nullable
    (clients such as guidellm send explicit nulls). `parse` drops them before validation."""


def ignore_eos(body: BaseModel) -> bool:
    """vLLM's `ignore_eos` extension (an extra field of any generating request): generate to the token cap."""
    return bool((body.model_extra or {}).get("ignore_eos"))


class Message(_Body):
    """A chat message; content is a string or a list of parts."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def dump(self) -> dict[str, Any]:
        """`model_dump(exclude_none=True)` (what the tokenizer's chat template reads), made at once for the
        common message: a role and its text, nothing else (pydantic's serializer costs 2 us a message)."""
        if (type(self.content) is str and self.name is None and self.tool_calls is None and self.tool_call_id is None
                and not self.model_extra):
            return {"role": self.role, "content": self.content}
        return self.model_dump(exclude_none=True)

    def text(self) -> str:
        """The message's text (text parts joined; images and audio carry no text)."""
        if isinstance(self.content, str):
            return self.content
        parts = self.content or []
        return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _check_roles(messages: list[Message]) -> None:
    """The fields each role requires (OpenAI's OpenAPI spec, openai/openai-openapi `openapi.yaml`:
    `CreateChatCompletionRequest`): content for all but an assistant's, a `tool_call_id` for a tool result, a `name` for
    a function result. (Checked by the request, not by each message: one loop costs less than a validator call per
    message.)"""
    for index, message in enumerate(messages):
        if message.content is not None and message.role in _CONTENT_ONLY:
            continue  # the common case, in one test
        where = f"messages.[{index}]"
        if message.role == "tool" and message.tool_call_id is None:
            raise ValueError(f"{where}.tool_call_id|Missing parameter 'tool_call_id': messages with role 'tool' must "
                             "have a 'tool_call_id'.")
        if message.role == "function" and message.name is None:
            raise ValueError(f"{where}.name|Missing required parameter: '{where}.name'.|missing_required_parameter")
        if message.content is None and message.role not in ("assistant", "function"):  # both nullable in the spec
            raise ValueError(f"{where}.content|Missing required parameter: '{where}.content'.|missing_required_parameter")


_CONTENT_ONLY = frozenset({"system", "developer", "user", "assistant"})
"""Roles that need nothing but content."""


class StreamOptions(_Body):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class Function(_Body):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Body):
    type: Literal["function"] = "function"
    function: Function


MAX_EMBEDDING_INPUTS = 2048
"""Inputs of one embeddings request (an array of strings or of token arrays), per the spec."""

Stop = str | Annotated[list[str], Field(max_length=4)] | None


class _Sampling(_Body):
    nullable = frozenset({"stream"})

    model: str
    n: StrictInt = Field(1, ge=1, le=128)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: Stop = None
    seed: StrictInt | None = None
    temperature: StrictFloat | None = Field(None, ge=0, le=2)
    top_p: StrictFloat | None = Field(None, ge=0, le=1)
    presence_penalty: StrictFloat | None = Field(None, ge=-2, le=2)
    frequency_penalty: StrictFloat | None = Field(None, ge=-2, le=2)
    user: str | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    priority: int = 0

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> _Sampling:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options|Stream options can only be defined when `stream=True`.")
        return self

    @property
    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        """vLLM's `continuous_usage_stats`: a cumulative `usage` on every chunk (only with `include_usage`)."""
        return self.include_usage and bool(self.stream_options and self.stream_options.continuous_usage_stats)


class ChatRequest(_Sampling):
    """`POST /v1/chat/completions`."""

    nullable = frozenset({"stream", "n", "logprobs", "parallel_tool_calls"})

    messages: list[Message] = Field(min_length=1)
    max_tokens: StrictInt | None = Field(None, ge=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatRequest:
        _check_roles(self.messages)
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs|`top_logprobs` can only be set when `logprobs` is true.")
        if isinstance(self.tool_choice, dict):
            function = self.tool_choice.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            if not self.tools or not isinstance(name, str) or name not in {t.function.name for t in self.tools}:
                raise ValueError(f"tool_choice|Invalid value for 'tool_choice': no function named '{name}' in 'tools'.")
        if self.response_format is not None:
            kind = self.response_format.get("type")
            if kind not in ("text", "json_object", "json_schema"):
                raise ValueError(f"response_format.type|Invalid value: '{kind}'. Supported values are: 'text', "
                                 "'json_object', and 'json_schema'.")
            spec = self.response_format.get("json_schema")
            if kind == "json_schema":
                if not isinstance(spec, dict):
                    raise ValueError("response_format.json_schema|Missing required parameter: "
                                     "'response_format.json_schema'.")
                if not isinstance(spec.get("schema", {}), (dict, bool)):
                    raise ValueError("response_format.json_schema.schema|Invalid type for "
                                     "'response_format.json_schema.schema': expected an object.")
        return self

    @property
    def token_cap(self) -> int | None:
        """`max_completion_tokens`, else the deprecated `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    """`POST /v1/completions` (vLLM's `n` is not Optional here: null stays a 400)."""

    nullable = frozenset({"stream", "echo"})

    prompt: str | list[str] | list[StrictInt] | list[list[StrictInt]]
    max_tokens: StrictInt | None = Field(16, ge=1)
    logprobs: StrictInt | None = Field(None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: StrictInt | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _best_of_is_not_streamed(self) -> CompletionRequest:
        if self.prompt == [] or (isinstance(self.prompt, list) and any(p == [] for p in self.prompt)):
            raise ValueError("prompt|Invalid 'prompt': the prompt is empty. Expected a string, an array of strings or a "
                             "non-empty array of token ids.|invalid_value")
        if self.stream and self.best_of is not None and self.best_of > 1:
            raise ValueError("best_of|Invalid 'best_of': results cannot be streamed when best_of is greater than 1.")
        if self.best_of is not None and self.best_of < self.n:
            raise ValueError(f"best_of|Invalid 'best_of': best_of ({self.best_of}) must be greater than or equal to "
                             f"n ({self.n}).")
        return self


class EmbeddingRequest(_Body):
    """`POST /v1/embeddings`."""

    model: str
    input: str | list[str] | list[StrictInt] | list[list[StrictInt]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = Field(None, ge=1)
    user: str | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> EmbeddingRequest:
        if self.input == "" or self.input == []:
            raise ValueError("input|'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.")
        if isinstance(self.input, list) and len(self.input) > MAX_EMBEDDING_INPUTS and not isinstance(self.input[0], int):
            raise ValueError(f"input|Invalid 'input': array too long. Expected an array with maximum length "
                             f"{MAX_EMBEDDING_INPUTS}, but got an array with length {len(self.input)} instead."
                             "|array_above_max_length")
        return self


RESPONSE_TOOL_TYPES = frozenset({
    "apply_patch", "code_interpreter", "computer", "computer_use_preview", "custom", "file_search", "function",
    "image_generation", "local_shell", "mcp", "namespace", "shell", "tool_search", "web_search", "web_search_2025_08_26",
    "web_search_preview", "web_search_preview_2025_03_11"})
"""The `type`s of OpenAI's `Tool` union (its OpenAPI document, 2.3.0): anything else is a 400, as vLLM's typed
`tools` answers it."""

INPUT_ITEM_TYPES = frozenset({
    "apply_patch_call", "apply_patch_call_output", "code_interpreter_call", "compaction", "compaction_trigger",
    "computer_call", "computer_call_output", "custom_tool_call", "custom_tool_call_output", "file_search_call",
    "function_call", "function_call_output", "image_generation_call", "item_reference", "local_shell_call",
    "local_shell_call_output", "mcp_approval_request", "mcp_approval_response", "mcp_call", "mcp_list_tools", "message",
    "reasoning", "shell_call", "shell_call_output", "tool_search_call", "tool_search_output", "web_search_call"})
"""The `type`s of OpenAI's `InputItem` union: an input item of another type is a 400."""


class ResponseRequest(_Body):
    """`POST /v1/responses` (a flat tool shape, `text.format` for structured output)."""

    nullable = frozenset({"stream", "parallel_tool_calls", "store", "metadata"})

    model: str
    input: str | list[dict[str, Any]] = ""
    instructions: str | None = None
    max_output_tokens: StrictInt | None = Field(None, ge=1)
    stream: bool = False
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    text: dict[str, Any] | None = None
    temperature: StrictFloat | None = Field(None, ge=0, le=2)
    top_p: StrictFloat | None = Field(None, ge=0, le=1)
    seed: StrictInt | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    store: bool = True
    user: str | None = None
    previous_response_id: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None

    @model_validator(mode="after")
    def _typed_parts(self) -> ResponseRequest:
        """The parts kept as plain objects (echoed back as sent) still have the types the handler reads, and a type
        OpenAI's document names."""
        for index, item in enumerate(self.input if isinstance(self.input, list) else []):
            kind = item.get("type")
            if kind is None and "role" not in item and "id" not in item:
                raise ValueError(f"input.[{index}]|Missing required parameter: 'input[{index}].type'."
                                 "|missing_required_parameter")
            if kind is not None and not isinstance(kind, str):
                raise ValueError(f"input.[{index}].type|Invalid type for 'input[{index}].type': expected a string.")
            if kind is not None and kind not in INPUT_ITEM_TYPES:
                raise ValueError(f"input.[{index}].type|Invalid value: {_quoted(kind)}. Supported values are: "
                                 f"{_choices(INPUT_ITEM_TYPES)}.|invalid_value")
        for index, tool in enumerate(self.tools):
            if tool.get("type") is None:
                raise ValueError(f"tools.[{index}].type|Missing required parameter: 'tools[{index}].type'."
                                 "|missing_required_parameter")
            if isinstance(tool["type"], str) and tool["type"] not in RESPONSE_TOOL_TYPES:
                raise ValueError(f"tools.[{index}].type|Invalid value: {_quoted(tool['type'])}. Supported values are: "
                                 f"{_choices(RESPONSE_TOOL_TYPES)}.|invalid_value")
            if tool["type"] == "function" and not isinstance(tool.get("name"), str):
                raise ValueError(f"tools.[{index}].name|Missing required parameter: 'tools[{index}].name'."
                                 "|missing_required_parameter")
            for key, kind, word in (("type", str, "a string"), ("name", str, "a string"), ("parameters", dict, "an object")):
                if tool.get(key) is not None and not isinstance(tool[key], kind):
                    raise ValueError(f"tools.[{index}].{key}|Invalid type for 'tools[{index}].{key}': expected {word}.")
        fmt = (self.text or {}).get("format")
        if fmt is not None and not isinstance(fmt, dict):
            raise ValueError("text.format|Invalid type for 'text.format': expected an object.")
        if isinstance(fmt, dict) and not isinstance(fmt.get("schema", {}), (dict, bool)):
            raise ValueError("text.format.schema|Invalid type for 'text.format.schema': expected an object.")  # noqa: TRY004 (pydantic wraps ValueError only)
        if isinstance(self.tool_choice, dict) and self.tool_choice.get("type") == "function":
            name = self.tool_choice["name"]
            if not isinstance(name, str) or name not in {t.get("name") for t in self.tools if t.get("type") == "function"}:
                raise ValueError(f"tool_choice|Invalid value for 'tool_choice': no function named '{name}' in 'tools'.")
        return self


class TokenizeRequest(_Body):
    """vLLM's `POST /tokenize`: a `prompt`, or chat `messages` (with `tools`) under the chat template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    tools: list[Tool] | None = None
    add_generation_prompt: bool = True
    return_token_strs: bool = False

    @model_validator(mode="after")
    def _roles(self) -> TokenizeRequest:
        _check_roles(self.messages or [])
        return self


class DetokenizeRequest(_Body):
    """vLLM's `POST /detokenize`."""

    model: str | None = None
    tokens: list[StrictInt]


class LoraRequest(_Body):
    """vLLM's `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter` (`base_model_name` is aisim's: which
    served model the adapter belongs to, the first when absent)."""

    lora_name: str | None = None
    lora_path: str | None = None
    base_model_name: str | None = None


def _quoted(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else repr(value)


def _choices(values: frozenset[str]) -> str:
    """`'a', 'b', and 'c'`: OpenAI's way of listing the values a field takes."""
    ordered = [f"'{v}'" for v in sorted(values)]
    return ", ".join(ordered[:-1]) + f", and {ordered[-1]}" if len(ordered) > 1 else ordered[0]


Body = TypeVar("Body", bound=BaseModel)

_BRANCH = re.compile(r"str|int|float|bool|none|[a-z-]+\[.*\]")
"""The names pydantic gives union branches and validators in an error's `loc` (`str`, `list[str]`,
`function-after[...]`): not fields, so not in OpenAI's `param` (`messages.[0].content`, `stop`)."""

_TYPE_WORDS = {"string": "a string", "int": "an integer", "float": "a number", "bool": "a boolean",
               "list": "an array", "dict": "an object", "model": "an object", "literal": "one of the allowed values"}


def parse(kind: type[Body], data: Any) -> Body:
    """Validate a JSON body; the first mistake becomes the 400 OpenAI would send."""
    if not isinstance(data, dict):
        raise invalid("The request body must be a JSON object.", None)
    nullable: frozenset[str] = getattr(kind, "nullable", frozenset())
    if nullable and None in data.values():  # (a plain scan here: a pydantic validator costs more per request)
        data = {k: v for k, v in data.items() if v is not None or k not in nullable}
    options = data.get("stream_options")
    if isinstance(options, dict) and None in options.values():  # both of its fields are nullable
        data = {**data, "stream_options": {k: v for k, v in options.items() if v is not None}}
    try:
        return kind.model_validate(data)
    except ValidationError as error:
        raise _explain(error, data) from None


def _explain(error: ValidationError, data: dict[str, Any]) -> ErrorAnswer:
    first = error.errors(include_url=False)[0]
    loc = [f"[{part}]" if isinstance(part, int) else part for part in first["loc"] if not _BRANCH.fullmatch(str(part))]
    param = ".".join(loc) or None
    kind = first["type"]
    if kind == "missing":
        if param == "model":
            return invalid("you must provide a model parameter", None)
        return invalid(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")
    if kind == "value_error" and "|" in str(first.get("ctx", {}).get("error", "")):
        # "param|message[|code]" from a validator; its param is relative to where the validator ran
        where, message, *code = str(first["ctx"]["error"]).split("|", 2)
        return invalid(message, ".".join([*loc, where]), *code)
    value = first.get("input")
    if kind in ("greater_than_equal", "greater_than"):
        limit = first["ctx"].get("ge", first["ctx"].get("gt"))
        return invalid(f"Invalid '{param}': {_noun(value)} below minimum value. Expected a value >= {limit}, but got "
                       f"{value!r} instead.", param, f"{_noun(value)}_below_min_value")
    if kind in ("less_than_equal", "less_than"):
        limit = first["ctx"].get("le", first["ctx"].get("lt"))
        return invalid(f"Invalid '{param}': {_noun(value)} above maximum value. Expected a value <= {limit}, but got "
                       f"{value!r} instead.", param, f"{_noun(value)}_above_max_value")
    if kind in ("too_short", "too_long"):
        return invalid(f"Invalid '{param}': {first['msg'].lower()}.", param, "array_too_short" if kind == "too_short"
                       else "array_above_max_length")
    if kind == "literal_error" and isinstance(value, str):
        expected = str(first.get("ctx", {}).get("expected", "")).replace(" or ", ", and ")
        return invalid(f"Invalid value: '{value}'. Supported values are: {expected}.", param, "invalid_value")
    if kind.endswith(("_type", "_parsing")) or kind == "literal_error" or kind.startswith("model_"):
        expected = _TYPE_WORDS.get(kind.split("_")[0], "a valid value")
        return invalid(f"Invalid type for '{param}': expected {expected}, but got {_json_type(value)} instead.",
                       param, "invalid_type")
    return invalid(f"Invalid '{param}': {first['msg']}.", param, "invalid_value")


def _noun(value: Any) -> str:
    return "integer" if isinstance(value, int) else "decimal"


def _json_type(value: Any) -> str:
    kinds = ((bool, "a boolean"), (int, "an integer"), (float, "a decimal"), (str, "a string"), (list, "an array"),
             (dict, "an object"))
    return next((word for kind, word in kinds if isinstance(value, kind)), "null")
