"""An OpenAI Responses request checked, and rewritten as the chat completion that asks the same thing.

The conversation is the previous response's items (when `previous_response_id` continues one the gateway
kept) followed by this request's `input`; `instructions` lead it as a system message (a previous
response's instructions are not carried over, as the API does).

A part or item that a chat upstream cannot take at all (a file or an image by `file_id`, an
`item_reference`) does not refuse the request: an upstream that speaks Responses takes it as it came. It is
left out of the chat form and recorded (`skipped`); only a chat target refuses it (ChatRequest.build).

What a chat upstream cannot do is decided here, once:
- Only `function` tools have a definition a chat model can call. Hosted tools (`web_search`,
  `file_search`, `code_interpreter`, `image_generation`, `mcp`, `computer_use_preview`) run inside
  OpenAI, and `custom`, `local_shell` and `namespace` tools have no JSON schema: none is offered to the
  model, and the answer comes without them (docs/contracts.md, "Responses in").
- Reasoning items (and their encrypted content) are not sent back: chat upstreams take no reasoning in
  their history.
"""

from __future__ import annotations

from typing import Any

import orjson

from firsttoken.errors import GatewayError, bad_request
from firsttoken.server.validate import model_name, positive_count, typed_fields

Json = dict[str, Any]

DEFAULT_MAX_OUTPUT = 4096  # what a chat upstream would otherwise default to varies: a bound of our own
_ROLES = frozenset({"user", "assistant", "system", "developer"})
_PASSED = ("temperature", "top_p", "parallel_tool_calls", "prompt_cache_key", "safety_identifier", "service_tier",
           "user", "seed", "top_logprobs")


def check(body: Json) -> tuple[str, bool]:
    """(model, stream) of a Responses request; a 400 naming the field when it is not one."""
    model = model_name(body)
    value = body.get("input")
    if value is None:
        raise bad_request("Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    if not isinstance(value, (str, list)) or not value:
        raise bad_request("'input' must be a non-empty string or a list of input items.", param="input",
                          code="invalid_type")
    limit = body.get("max_output_tokens")
    if limit is not None:
        count = positive_count(limit)
        if count is None:
            raise bad_request("'max_output_tokens' must be a positive integer.", param="max_output_tokens",
                              code="invalid_value")
        body["max_output_tokens"] = count
    if body.get("background") is True:
        raise bad_request("'background' responses are not supported by this gateway; stream the response instead.",
                          param="background", code="unsupported_value")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean.", param="stream", code="invalid_type")
    typed_fields(body, ("temperature", "top_p", "seed", "top_logprobs"))  # passed on to chat upstreams as they are
    return model, stream


def input_items(body: Json) -> list[Json]:
    """This request's own items (a string input is one user message)."""
    value = body["input"]
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise bad_request(f"'input[{i}]' must be an input item object.", param=f"input[{i}]", code="invalid_type")
    return list(value)


def chat_request(body: Json, items: list[Json], skipped: list[GatewayError]) -> Json:
    """The chat completion body that asks what this (checked) Responses request asks, over `items`: the
    whole conversation; why each part left out of it could not be carried goes into `skipped`."""
    messages: list[Json] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for i, item in enumerate(items):
        _add_item(messages, item, f"input[{i}]", skipped)
    if not messages:
        skipped.append(bad_request("'input' holds nothing a chat model reads (reasoning items and hosted tools' "
                                   "calls are left out for it); send a message, or 'instructions'.",
                                   param="input", code="invalid_value"))
    limit = body.get("max_output_tokens")
    out: Json = {"model": body["model"], "messages": messages,
                 "max_tokens": limit if limit is not None else DEFAULT_MAX_OUTPUT}
    for key in _PASSED:
        if body.get(key) is not None:
            out[key] = body[key]
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}  # response.completed always tells the usage
    _tools(out, body)
    if body.get("top_logprobs") is not None:
        out["logprobs"] = True
    text = body.get("text")
    if isinstance(text, dict) and isinstance(text.get("format"), dict):
        out["response_format"] = _response_format(text["format"])
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") not in (None, "none"):
        out["reasoning_effort"] = reasoning["effort"]
    return out


def _add_item(messages: list[Json], item: Json, where: str, skipped: list[GatewayError]) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise bad_request(f"'{where}.role' must be one of user, assistant, system, developer; got {role!r}.",
                              param=f"{where}.role", code="invalid_value")
        content = _content(item.get("content"), f"{where}.content", skipped)
        if role == "assistant" and not isinstance(content, str):
            content = "".join(part.get("text", "") for part in content)
        messages.append({"role": role, "content": content})
    elif kind == "function_call":
        if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
            raise bad_request(f"'{where}' needs a 'call_id' and a 'name'.", param=where)
        call = {"id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": str(item.get("arguments") or "")}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":  # the text before it, or parallel calls: one turn
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise bad_request(f"'{where}.call_id' is required.", param=f"{where}.call_id")
        output = item.get("output")
        if isinstance(output, list):
            output = "".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
        messages.append({"role": "tool", "tool_call_id": item["call_id"],
                         "content": output if isinstance(output, str) else orjson.dumps(output).decode()})
    elif kind == "item_reference":
        skipped.append(bad_request(f"'{where}': item references can be sent only to an upstream that speaks "
                                   f"Responses; send the item itself, or continue with 'previous_response_id'.",
                                   param=where, code="unsupported_value"))
    # reasoning and hosted tools' calls: see the module's docstring


def _content(content: Any, where: str, skipped: list[GatewayError]) -> str | list[Json]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"'{where}' must be a string or a list of content parts.", param=where)
    parts: list[Json] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        at = f"{where}[{j}]"
        if kind in ("input_text", "output_text", "text", "refusal") and isinstance(part, dict):
            text = part.get("refusal" if kind == "refusal" else "text")
            parts.append({"type": "text", "text": str(text or "")})
        elif kind == "input_image" and isinstance(part, dict) and isinstance(part.get("image_url"), str):
            image: Json = {"url": part["image_url"]}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file" and isinstance(part, dict) and isinstance(part.get("file_data"), str):
            parts.append({"type": "file", "file": {"filename": str(part.get("filename") or "file"),
                                                   "file_data": part["file_data"]}})
        else:
            skipped.append(bad_request(f"'{at}' of type {kind!r} cannot be sent to this model's upstream; use "
                                       f"input_text, input_image with an image_url, or input_file with file_data.",
                                       param=at, code="invalid_value"))
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def _tools(out: Json, body: Json) -> None:
    tools = body.get("tools")
    if tools is None:
        out.pop("parallel_tool_calls", None)  # chat upstreams refuse it without tools
        return
    if not isinstance(tools, list):
        raise bad_request("'tools' must be a list of tools.", param="tools", code="invalid_type")
    functions = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise bad_request(f"'tools[{i}]' must be a tool object with a 'type'.", param=f"tools[{i}]")
        if tool["type"] != "function":
            continue  # see the module's docstring
        if not isinstance(tool.get("name"), str):
            raise bad_request(f"'tools[{i}].name' is required.", param=f"tools[{i}].name")
        function: Json = {"name": tool["name"],
                          "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        for key in ("description", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        functions.append({"type": "function", "function": function})
    if not functions:
        out.pop("parallel_tool_calls", None)  # chat upstreams refuse it without tools
        return
    out["tools"] = functions
    choice = body.get("tool_choice")
    if isinstance(choice, str) and choice in ("auto", "none", "required"):
        out["tool_choice"] = choice
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif choice is not None and not isinstance(choice, dict):
        raise bad_request("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                          "\"name\": ...}.", param="tool_choice", code="invalid_value")


def _response_format(fmt: Json) -> Json:
    kind = fmt.get("type")
    if kind == "json_schema":
        schema: Json = {"name": fmt.get("name") or "answer", "schema": fmt.get("schema") or {}}
        if fmt.get("strict") is not None:
            schema["strict"] = fmt["strict"]
        if fmt.get("description"):
            schema["description"] = fmt["description"]
        return {"type": "json_schema", "json_schema": schema}
    if kind in ("text", "json_object"):
        return {"type": kind}
    raise bad_request("'text.format.type' must be text, json_object or json_schema.", param="text.format.type",
                      code="invalid_value")
