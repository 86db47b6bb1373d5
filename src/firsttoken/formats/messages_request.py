"""An Anthropic Messages request checked, and rewritten as the chat completion that asks the same thing.

The chat form is what the gateway reasons with (sizing, limits, the semantic cache's prompt) and what an
OpenAI-compatible upstream is sent. An Anthropic upstream is sent the Messages request itself
(upstream/anthropic.py, `native_messages`), so nothing here needs to survive a round trip: fields with no
chat meaning (`cache_control`, thinking signatures, `container`) are left out of the chat form only.

A block that a chat upstream cannot take at all (a server tool's call and result in the history, a
document by URL, a search result) does not refuse the request: an Anthropic target takes it as it came.
It is left out of the chat form and recorded (`skipped`); only a chat target refuses it (ChatRequest.build).

What a chat upstream cannot do is decided here, once:
- Anthropic's server tools (web search, code execution) and its schema-less client tools (bash, text
  editor, computer) have no definition a chat model could call: they are not offered to it, and the
  answer comes without them (docs/contracts.md, "Messages in").
- Earlier thinking blocks are not sent back: chat upstreams take no reasoning in their history.
- A thinking budget becomes a `reasoning_effort`; adaptive thinking and `output_config.effort` leave the
  effort to the model.
"""

from __future__ import annotations

from typing import Any

import orjson

from firsttoken.errors import GatewayError, bad_request
from firsttoken.server.validate import model_name, positive_count, typed_fields

Json = dict[str, Any]

_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
# Thinking budgets (tokens) and the reasoning effort a chat upstream is asked for in their place: the
# bounds are the midpoints between the budgets that upstream/anthropic.py gives each effort.
_EFFORTS = ((2_560, "low"), (10_240, "medium"))


def check(body: Json) -> tuple[str, bool]:
    """(model, stream) of a Messages request; a 400 naming the field when one Anthropic requires is missing
    or of the wrong type."""
    model = model_name(body)
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise bad_request("Missing required parameter: 'max_tokens'.", param="max_tokens",
                          code="missing_required_parameter")
    count = positive_count(max_tokens)
    if count is None:
        raise bad_request("'max_tokens' must be a positive integer.", param="max_tokens", code="invalid_type")
    body["max_tokens"] = count
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of messages.", param="messages", code="invalid_type")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean.", param="stream", code="invalid_type")
    typed_fields(body, ("temperature", "top_p"))  # passed on to chat upstreams as they are
    return model, stream


def chat_request(body: Json, skipped: list[GatewayError]) -> Json:
    """The chat completion body that asks what this (checked) Messages request asks; why each block left
    out of it could not be carried goes into `skipped`."""
    messages: list[Json] = []
    system = _system(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for i, message in enumerate(body["messages"]):
        messages += _turn(message, f"messages[{i}]", skipped)
    if not messages:
        skipped.append(bad_request("'messages' hold nothing a chat model reads (thinking and server tools' blocks "
                                   "are left out for it); send a text block.", param="messages",
                                   code="invalid_value"))
    out: Json = {"model": body["model"], "messages": messages, "max_tokens": body["max_tokens"]}
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    if stop := body.get("stop_sequences"):
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise bad_request("'stop_sequences' must be a list of strings.", param="stop_sequences")
        out["stop"] = stop
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}  # a Messages stream always tells its usage
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        out["user"] = metadata["user_id"]
    _tools(out, body)
    if effort := _effort(body.get("thinking")):
        out["reasoning_effort"] = effort
    return out


def _system(system: Any) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if isinstance(system, list):
        return "\n\n".join(_text_of(block, f"system[{i}]") for i, block in enumerate(system))
    raise bad_request("'system' must be a string or a list of text blocks.", param="system", code="invalid_type")


def _text_of(block: Any, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise bad_request(f"'{where}' must be a text block: {{\"type\": \"text\", \"text\": \"...\"}}.", param=where)
    return str(block["text"])


def _turn(message: Any, where: str, skipped: list[GatewayError]) -> list[Json]:
    """One Messages turn as chat messages: a user turn's tool results become tool messages (first, as
    Anthropic puts them first), an assistant turn's tool_use blocks its tool calls."""
    if not isinstance(message, dict):
        raise bad_request(f"'{where}' must be an object with 'role' and 'content'.", param=where)
    role, content = message.get("role"), message.get("content")
    if role == "system":  # a system message mid-conversation (Claude Code's mid-conversation-system beta)
        return [{"role": "system", "content": _system(content)}]
    if role not in ("user", "assistant"):
        raise bad_request(f"'{where}.role' must be user, assistant or system; got {role!r}.", param=f"{where}.role",
                          code="invalid_value")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"'{where}.content' must be a string or a list of content blocks.",
                          param=f"{where}.content")
    parts: list[Json] = []
    results: list[Json] = []
    calls: list[Json] = []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": _text_of(block, at)})
        elif kind in ("image", "document") and role == "user":
            if (part := _media(block, at, skipped)) is not None:
                parts.append(part)
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(block, at))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_call(block, at))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # see the module's docstring
        elif kind is None:
            raise bad_request(f"'{at}' must be a content block with a 'type'.", param=at)
        else:
            skipped.append(bad_request(
                f"'{at}.type' {kind!r} cannot be sent to this model's upstream from a {role} turn; it takes text, "
                f"image, document and tool_result blocks from users, text, thinking and tool_use blocks from the "
                f"assistant.", param=f"{at}.type", code="invalid_value"))
    turn: list[Json] = results
    if role == "assistant":
        text = "".join(part["text"] for part in parts)
        reply: Json = {"role": "assistant", "content": text or None}
        if calls:
            reply["tool_calls"] = calls
        if text or calls:
            turn.append(reply)
    elif parts:
        plain = all(part["type"] == "text" for part in parts)
        turn.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts) if plain else parts})
    return turn


def _media(block: Json, where: str, skipped: list[GatewayError]) -> Json | None:
    """An image or a document as a chat content part: base64 data as a data URL, a URL as it is, a plain
    text document as its text."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64" and isinstance(source, dict):
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        if block["type"] == "image":
            return {"type": "image_url", "image_url": {"url": url}}
        return {"type": "file", "file": {"filename": str(block.get("title") or "document"), "file_data": url}}
    if kind == "url" and isinstance(source, dict) and block["type"] == "image":
        return {"type": "image_url", "image_url": {"url": source.get("url")}}
    if kind == "text" and isinstance(source, dict) and isinstance(source.get("data"), str):
        return {"type": "text", "text": source["data"]}
    skipped.append(bad_request(f"'{where}.source' of type {kind!r} cannot be sent to this model's upstream; use "
                               f"base64 data{', a URL' if block['type'] == 'image' else ' or text'}.",
                               param=f"{where}.source", code="invalid_value"))
    return None


def _tool_result(block: Json, where: str) -> Json:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request(f"'{where}.tool_use_id' is required.", param=f"{where}.tool_use_id")
    content = block.get("content")
    if isinstance(content, list):  # a chat tool message carries text; images in a result have no place there
        content = "\n\n".join(str(part.get("text", "")) for part in content
                              if isinstance(part, dict) and part.get("type") == "text")
    text = content if isinstance(content, str) else ""
    if block.get("is_error") and not text.startswith("Error"):
        text = f"Error: {text}"  # the flag has no chat field: the model reads it in the text
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _tool_call(block: Json, where: str) -> Json:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise bad_request(f"'{where}' needs an 'id' and a 'name'.", param=where)
    arguments = block.get("input") if block.get("input") is not None else {}
    return {"id": block["id"], "type": "function",
            "function": {"name": block["name"], "arguments": orjson.dumps(arguments).decode()}}


def _tools(out: Json, body: Json) -> None:
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise bad_request("'tools' must be a list of tools.", param="tools", code="invalid_type")
    functions = [_function(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    offered = [function for function in functions if function is not None]
    if offered:
        out["tools"] = offered
    choice = body.get("tool_choice")
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool" and isinstance(choice, dict) and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif isinstance(kind, str) and kind in _TOOL_CHOICES:
        out["tool_choice"] = _TOOL_CHOICES[kind]
    else:
        raise bad_request("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or "
                          "{\"type\": \"tool\", \"name\": ...}.", param="tool_choice", code="invalid_value")
    if not offered:
        out.pop("tool_choice")  # nothing left to choose from: a chat upstream would refuse the choice
    elif isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False


def _function(tool: Any, where: str) -> Json | None:
    """A custom tool as a chat function; None for Anthropic's own tools (module docstring)."""
    if not isinstance(tool, dict):
        raise bad_request(f"'{where}' must be a tool object.", param=where)
    if tool.get("type") not in (None, "custom"):
        return None
    if not isinstance(tool.get("name"), str):
        raise bad_request(f"'{where}.name' is required.", param=f"{where}.name")
    function: Json = {"name": tool["name"],
                      "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _effort(thinking: Any) -> str | None:
    """The reasoning effort that thinking with a budget asks for. Adaptive thinking leaves it to the model
    (Claude Code always asks for it): a chat model's own default is the same choice, and a model that does
    not reason would refuse any effort (as OpenAI's do)."""
    if thinking is None:
        return None
    if not isinstance(thinking, dict):
        raise bad_request("'thinking' must be an object such as {\"type\": \"enabled\", \"budget_tokens\": 4096}.",
                          param="thinking", code="invalid_type")
    budget = thinking.get("budget_tokens")
    if thinking.get("type") != "enabled" or not isinstance(budget, int) or isinstance(budget, bool):
        return None
    return next((effort for bound, effort in _EFFORTS if budget < bound), "high")
