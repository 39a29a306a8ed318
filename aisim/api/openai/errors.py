"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with the real statuses.

Message texts and codes follow the OpenAI API (openai/openai-openapi `openapi.yaml`; openai/openai-python
`src/openai/_exceptions.py`), because clients classify errors by substring ("This model's maximum context length is",
`context_length_exceeded`, `invalid_api_key`, `model_not_found`, `rate_limit_exceeded`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...scenario.faults import API_ERRORS


@dataclass
class ErrorAnswer(Exception):
    """An error answer: HTTP status, OpenAI error body fields and extra headers."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None = None, code: str | None = None) -> ErrorAnswer:
    """400 invalid_request_error."""
    return ErrorAnswer(400, message, "invalid_request_error", param, code)


def vllm_error(status: int, message: str, kind: str, param: str | None = None) -> ErrorAnswer:
    """vLLM's error body: a Python-style type and the HTTP status as an integer code."""
    error = ErrorAnswer(status, message, kind, param)
    error.code = status  # type: ignore[assignment]
    return error


def model_not_found(model: str) -> ErrorAnswer:
    return ErrorAnswer(404, f"The model `{model}` does not exist or you do not have access to it.",
                       "invalid_request_error", None, "model_not_found")


def context_length(limit: int, prompt: int, completion: int, param: str = "messages") -> ErrorAnswer:
    return invalid(
        f"This model's maximum context length is {limit} tokens. However, you requested {prompt + completion} tokens "
        f"({prompt} in the messages, {completion} in the completion). Please reduce the length of the messages or "
        "completion.",
        param, "context_length_exceeded",
    )


def invalid_api_key(key: str | None) -> ErrorAnswer:
    if not key:
        return ErrorAnswer(401, "You didn't provide an API key. You need to provide your API key in an Authorization "
                             "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                        "invalid_request_error", None, None)
    shown = key[:3] + "*" * 8 + key[-4:] if len(key) > 8 else "*" * len(key)
    return ErrorAnswer(401, f"Incorrect API key provided: {shown}. You can find your API key at "
                         "https://platform.openai.com/account/api-keys.", "invalid_request_error", None, "invalid_api_key")


DEFAULT_MESSAGES = {
    "rate_limit": "Rate limit reached for {model} on requests per min (RPM). Please try again in {retry}.",
    "invalid_api_key": "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
    "context_length_exceeded": "This model's maximum context length is exceeded. Please reduce the length of the messages.",
    "bad_request": "Invalid request.",
    "model_not_found": "The model `{model}` does not exist or you do not have access to it.",
    "server_error": "The server had an error while processing your request. Sorry about that!",
    "service_unavailable": "That model is currently overloaded with other requests. You can retry your request, or "
                           "contact us through our help center at help.openai.com if the error persists.",
}


def named(error: str, model: str, status: int | None = None, message: str | None = None,
          retry_after_ns: int | None = None) -> ErrorAnswer:
    """The error a fault of kind `api_error` names (see `aisim.scenario.faults.API_ERRORS`)."""
    default_status, code, kind = API_ERRORS[error]
    retry = f"{(retry_after_ns or 1_000_000_000) / 1e6:.0f}ms"
    text = message or DEFAULT_MESSAGES[error].format(model=model, retry=retry)
    headers: dict[str, str] = {}
    if error == "rate_limit" or (status or default_status) == 429:
        headers.update(retry_headers(retry_after_ns or 1_000_000_000))
    param = "messages" if error == "context_length_exceeded" else None
    return ErrorAnswer(status or default_status, text, kind or "invalid_request_error", param,
                       None if error in ("server_error", "service_unavailable", "bad_request") else code, headers)


def retry_headers(wait_ns: int) -> dict[str, str]:
    """`retry-after` (whole seconds, at least 1) and `retry-after-ms`, which the SDKs prefer."""
    seconds = max(1, -(-wait_ns // 1_000_000_000))
    return {"retry-after": str(seconds), "retry-after-ms": str(max(1, wait_ns // 1_000_000))}
