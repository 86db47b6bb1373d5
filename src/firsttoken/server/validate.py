"""Request validation: the fields the gateway itself relies on, and the types of the well-known ones.

Everything else passes through untouched (the upstream judges its own extensions), but a field the
OpenAI API defines with the wrong type is caught here, named, and answered with 400 before it
crosses an ocean.
"""

from __future__ import annotations

from typing import Any

import orjson

from firsttoken.errors import bad_request

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

_NUMBER = (int, float)
# field → (accepted types, description for the message); None is always accepted (OpenAI's default)
_TYPED_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "stream": ((bool,), "a boolean"),
    "stream_options": ((dict,), "an object such as {\"include_usage\": true}"),
    "max_tokens": ((int,), "an integer"),
    "max_completion_tokens": ((int,), "an integer"),
    "n": ((int,), "an integer"),
    "temperature": (_NUMBER, "a number"),
    "top_p": (_NUMBER, "a number"),
    "presence_penalty": (_NUMBER, "a number"),
    "frequency_penalty": (_NUMBER, "a number"),
    "seed": ((int,), "an integer"),
    "logprobs": ((bool,), "a boolean"),
    "top_logprobs": ((int,), "an integer"),
    "stop": ((str, list), "a string or a list of strings"),
    "tools": ((list,), "a list of tools"),
    "tool_choice": ((str, dict), "a string or an object"),
    "parallel_tool_calls": ((bool,), "a boolean"),
    "response_format": ((dict,), "an object such as {\"type\": \"json_object\"}"),
    "logit_bias": ((dict,), "an object"),
    "user": ((str,), "a string"),
    "metadata": ((dict,), "an object"),
    "store": ((bool,), "a boolean"),
}


def parse_json_object(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise bad_request("The request body is empty; send a JSON object such as "
                          "{\"model\": \"...\", \"messages\": [...]}.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"The request body is not valid JSON ({exc}); send a JSON object.",
                          code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object, not "
                          f"{type(body).__name__}.", code="invalid_json")
    return body


def model_name(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise bad_request("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("'model' must be a non-empty string naming a model or alias.", param="model",
                          code="invalid_type")
    if len(model) > 256 or not model.isprintable():  # it travels on in headers and URLs
        raise bad_request("'model' must be at most 256 printable characters.", param="model",
                          code="invalid_value")
    return model


def chat_request(body: dict[str, Any]) -> tuple[str, bool]:
    """Check a chat completion request; returns (model, stream)."""
    model = model_name(body)
    messages = body.get("messages")
    if messages is None:
        raise bad_request("Missing required parameter: 'messages'.", param="messages",
                          code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of messages.", param="messages", code="invalid_type")
    for i, message in enumerate(messages):
        _message(message, i)
    for field, (types, description) in _TYPED_FIELDS.items():
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise bad_request(f"'{field}' must be {description}, got {type(value).__name__}.",
                              param=field, code="invalid_type")
    stream_options = body.get("stream_options")
    if stream_options is not None and not body.get("stream"):
        raise bad_request("'stream_options' is only allowed when 'stream' is true.", param="stream_options")
    return model, bool(body.get("stream"))


def _message(message: Any, i: int) -> None:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise bad_request(f"'{where}' must be an object with 'role' and 'content'.", param=where, code="invalid_type")
    role = message.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise bad_request(f"'{where}.role' must be one of {', '.join(sorted(_ROLES))}; got {role!r}.",
                          param=f"{where}.role", code="invalid_value")
    content = message.get("content")
    if content is None:
        if role == "assistant" or role == "function":
            return
        raise bad_request(f"Missing required parameter: '{where}.content'.", param=f"{where}.content",
                          code="missing_required_parameter")
    if not isinstance(content, (str, list)):
        raise bad_request(f"'{where}.content' must be a string or a list of content parts.",
                          param=f"{where}.content", code="invalid_type")


def embeddings_request(body: dict[str, Any]) -> str:
    model = model_name(body)
    value = body.get("input")
    if value is None:
        raise bad_request("Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    if not isinstance(value, (str, list)) or (isinstance(value, list) and not value):
        raise bad_request("'input' must be a string or a non-empty list of strings or token ids.",
                          param="input", code="invalid_type")
    return model
