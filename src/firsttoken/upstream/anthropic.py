"""Anthropic's Messages API behind the OpenAI chat-completions wire format.

Requests are rewritten into Messages requests: system prompts hoisted to `system`, tool calls and
tool results turned into content blocks, and same-role turns merged because Anthropic requires
user and assistant to alternate. Answers and stream events are rewritten into chat.completion
objects and chunks. `url` is like https://api.anthropic.com/v1.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson

from firsttoken.config import Upstream
from firsttoken.errors import bad_gateway, bad_request
from firsttoken.sse import BROKEN, DONE, data_event, data_field
from firsttoken.upstream.adapter import Adapter, UpstreamRequest

Json = dict[str, Any]

DEFAULT_API_VERSION = "2023-06-01"
# A Messages client's headers that shape its request, passed on with it.
_CLIENT_HEADERS = {b"anthropic-version": "anthropic-version", b"anthropic-beta": "anthropic-beta"}
DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; OpenAI clients usually leave it out
THINKING_BUDGETS = {"minimal": 1024, "low": 1024, "medium": 4096, "high": 16384}  # 1024 is Anthropic's floor
TOOL_CHOICES = {"auto": "auto", "required": "any", "none": "none"}
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                  "tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "stop",
                  "model_context_window_exceeded": "length"}


class AnthropicAdapter(Adapter):
    api = "anthropic"

    def __init__(self, name: str, settings: Upstream) -> None:
        super().__init__(name, settings)
        auth = {"anthropic-version": settings.api_version or DEFAULT_API_VERSION}
        if self._secret:
            auth["x-api-key"] = self._secret
        self._json_headers = self._headers(auth)
        self._auth = {**settings.headers, **auth}

    def chat(self, body: Json, model: str, stream: bool) -> UpstreamRequest:
        payload = messages_request(body, model, stream)
        return UpstreamRequest(f"{self.settings.url}/messages", self._json_headers, orjson.dumps(payload))

    def native(self, body: Json, model: str, stream: bool,
               client_headers: Sequence[tuple[bytes, bytes]]) -> UpstreamRequest:
        """A Messages request passed through: cache_control, thinking and its signatures, server tools, all as
        the client wrote them; its anthropic-version and anthropic-beta headers too (the body is written for
        them)."""
        headers = dict(self._json_headers)
        for name, value in client_headers:
            if name in _CLIENT_HEADERS:
                headers[_CLIENT_HEADERS[name]] = value.decode("latin-1")
        payload = {**body, "model": model, "messages": _signed_only(body.get("messages"))}
        return UpstreamRequest(f"{self.settings.url}/messages", headers, orjson.dumps(payload), native=True)

    def count_tokens(self, body: Json, model: str, client_headers: Sequence[tuple[bytes, bytes]]) -> UpstreamRequest:
        """A Messages request to count, passed through as `native` is."""
        request = self.native(body, model, False, client_headers)
        return UpstreamRequest(f"{self.settings.url}/messages/count_tokens", request.headers, request.data, True)

    def chat_response(self, body: bytes) -> bytes:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            message = None
        if not isinstance(message, dict) or message.get("type") != "message":
            raise bad_gateway(f"upstream {self.name} answered with something that is not a Messages "
                              f"response: {self.scrub(body)[:200].decode('utf-8', 'replace')}",
                              code="upstream_bad_response")
        return orjson.dumps(completion(message))

    def stream_translator(self, include_usage: bool, native: bool = False) -> AnthropicStream:
        return AnthropicStream(include_usage, self.name)  # a native stream is Messages events too

    def speaks(self, client_format: str) -> bool:
        return client_format == "messages"

    def probe(self) -> tuple[str, dict[str, str]]:
        return f"{self.settings.url}/models", self._auth


def _signed_only(messages: Any) -> Any:
    """The conversation without thinking blocks that carry no signature: the gateway's own, from an answer
    it translated or replayed (formats/messages_answer.py). Anthropic refuses them; it takes the turn
    without them."""
    if not isinstance(messages, list):
        return messages
    out = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(_unsigned(block) for block in content):
            message = {**message, "content": [block for block in content if not _unsigned(block)]}
        out.append(message)
    return out


def _unsigned(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "thinking" and not block.get("signature")


# --- requests: OpenAI chat completion → Anthropic Messages ----------------------------------------

def messages_request(body: Json, model: str, stream: bool) -> Json:
    """The Messages request for a chat completion body; OpenAI-only fields are dropped, as Anthropic
    rejects fields it does not know."""
    system, messages = _conversation(body.get("messages"))
    requested = _max_tokens(body)
    out: Json = {"model": model, "messages": messages, "max_tokens": requested or DEFAULT_MAX_TOKENS}
    if system:
        out["system"] = system
    for key in ("temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            out[key] = body[key]
    if stop := _stop(body.get("stop")):
        out["stop_sequences"] = stop
    if stream:
        out["stream"] = True
    if isinstance(body.get("user"), str) and body["user"]:
        out["metadata"] = {"user_id": body["user"]}
    _add_tools(out, body)
    if thinking := _thinking(body):
        out["thinking"] = thinking
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int) and out["max_tokens"] <= budget:
            # Anthropic counts thinking inside max_tokens and wants room left for the answer: the
            # client's limit is taken to be the answer's, and thinking comes on top of it.
            out["max_tokens"] = budget + (requested or DEFAULT_MAX_TOKENS)
    return out


def _conversation(messages: Any) -> tuple[str, list[Json]]:
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of messages.", param="messages")
    system: list[str] = []
    turns: list[Json] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(f"'{where}' must be an object with 'role' and 'content'.", param=where)
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text_only(message.get("content"), f"{where}.content"))
            continue
        if role == "user":
            blocks = _content_blocks(message.get("content"), f"{where}.content")
        elif role == "assistant":
            blocks = _content_blocks(message.get("content"), f"{where}.content")
            blocks += _tool_uses(message.get("tool_calls"), f"{where}.tool_calls")
        elif role == "tool":
            role, blocks = "user", [_tool_result(message, where)]  # Anthropic carries results in user turns
        else:
            raise bad_request(f"'{where}.role' {role!r} cannot be sent to an Anthropic upstream; use system, "
                              f"developer, user, assistant or tool.", param=f"{where}.role", code="invalid_value")
        if not blocks:
            continue  # Anthropic rejects empty turns; an assistant turn of only "" carries nothing
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":  # Anthropic wants tool results ahead of anything else in their turn
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
        if len(turn["content"]) == 1 and turn["content"][0]["type"] == "text":
            turn["content"] = turn["content"][0]["text"]  # the plain form, as clients usually wrote it
    return "\n\n".join(text for text in system if text), turns


def _content_blocks(content: Any, where: str) -> list[Json]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []  # empty text blocks are rejected
    if not isinstance(content, list):
        raise bad_request(f"'{where}' must be a string or a list of content parts.", param=where)
    blocks = (_part(part, f"{where}[{j}]") for j, part in enumerate(content))
    return [block for block in blocks if block is not None]


def _part(part: Any, where: str) -> Json | None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("text", "refusal"):  # an assistant's earlier refusal goes back as the text it was
        text = part.get(kind)
        if not isinstance(text, str):
            raise bad_request(f"'{where}.{kind}' must be a string.", param=f"{where}.{kind}")
        return {"type": "text", "text": text} if text else None
    if kind == "image_url":
        return _image(part.get("image_url"), f"{where}.image_url")
    raise bad_request(f"'{where}.type' {kind!r} cannot be sent to an Anthropic upstream; use text or image_url "
                      f"parts.", param=f"{where}.type", code="invalid_value")


def _image(image: Any, where: str) -> Json:
    url = image.get("url") if isinstance(image, dict) else image
    if isinstance(url, str) and url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        media_type, *params = header.split(";")
        if comma and media_type and params[-1:] == ["base64"]:
            return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    elif isinstance(url, str) and url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise bad_request(f"'{where}.url' must be an http(s) URL or a base64 data URL such as "
                      f"data:image/png;base64,....", param=f"{where}.url", code="invalid_value")


def _text_only(content: Any, where: str) -> str:
    blocks = _content_blocks(content, where)
    if any(block["type"] != "text" for block in blocks):
        raise bad_request(f"'{where}' of a system message may hold only text.", param=where)
    return "".join(block["text"] for block in blocks)


def _tool_uses(calls: Any, where: str) -> list[Json]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise bad_request(f"'{where}' must be a list of tool calls.", param=where)
    blocks = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                or not isinstance(call.get("id"), str):
            raise bad_request(f"'{at}' needs an 'id' and a 'function' with a 'name'.", param=at)
        blocks.append({"type": "tool_use", "id": call["id"], "name": function["name"],
                       "input": _arguments(function.get("arguments"), f"{at}.function.arguments")})
    return blocks


def _arguments(arguments: Any, where: str) -> Json:
    """OpenAI carries arguments as a JSON string; Anthropic wants the object itself."""
    value = arguments
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            raise bad_request(f"'{where}' is not valid JSON; send the arguments as a JSON object string.",
                              param=where, code="invalid_value") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"'{where}' must be a JSON object.", param=where, code="invalid_value")
    return value


def _tool_result(message: Json, where: str) -> Json:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request(f"'{where}.tool_call_id' is required on tool messages.", param=f"{where}.tool_call_id")
    block: Json = {"type": "tool_result", "tool_use_id": call_id}
    content = message.get("content")
    if isinstance(content, str):
        if content:
            block["content"] = content
    elif blocks := _content_blocks(content, f"{where}.content"):
        block["content"] = blocks
    return block


def _add_tools(out: Json, body: Json) -> None:
    tools = body.get("tools")
    if not tools:
        return  # a tool_choice without tools means nothing to Anthropic, which would reject it
    if not isinstance(tools, list):
        raise bad_request("'tools' must be a list of tools.", param="tools")
    out["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    choice = _tool_choice(body.get("tool_choice"))
    if body.get("parallel_tool_calls") is False and (choice is None or choice["type"] != "none"):
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        out["tool_choice"] = choice


def _tool(tool: Any, where: str) -> Json:
    function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise bad_request(f"'{where}' must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}; "
                          f"Anthropic upstreams take only function tools.", param=where)
    out: Json = {"name": function["name"]}
    if function.get("description"):
        out["description"] = function["description"]
    out["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
    return out


def _tool_choice(choice: Any) -> Json | None:
    if choice is None:
        return None
    if isinstance(choice, str) and choice in TOOL_CHOICES:
        return {"type": TOOL_CHOICES[choice]}
    function = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return {"type": "tool", "name": function["name"]}
    raise bad_request("'tool_choice' must be \"auto\", \"required\", \"none\" or "
                      "{\"type\": \"function\", \"function\": {\"name\": ...}}.", param="tool_choice",
                      code="invalid_value")


def _max_tokens(body: Json) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):  # the newer name wins, as at OpenAI
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise bad_request(f"'{key}' must be a positive integer.", param=key, code="invalid_value")
        return value
    return None


def _stop(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise bad_request("'stop' must be a string or a list of strings.", param="stop")
    return [s for s in stop if s]


def _thinking(body: Json) -> Json | None:
    """Anthropic's own `thinking` field passes as written; OpenAI's reasoning_effort picks a budget."""
    thinking = body.get("thinking")
    if thinking is not None:
        if not isinstance(thinking, dict) or not isinstance(thinking.get("type"), str):
            raise bad_request("'thinking' must be an object such as {\"type\": \"enabled\", \"budget_tokens\": "
                              "4096}.", param="thinking")
        budget = thinking.get("budget_tokens")
        if thinking["type"] == "enabled" and (not isinstance(budget, int) or isinstance(budget, bool)):
            raise bad_request("'thinking.budget_tokens' must be an integer (1024 or more).",
                              param="thinking.budget_tokens")
        return thinking
    effort = body.get("reasoning_effort")
    if effort is None or effort == "none":
        return None
    if effort not in THINKING_BUDGETS:
        raise bad_request(f"'reasoning_effort' must be one of none, {', '.join(THINKING_BUDGETS)}; got {effort!r}.",
                          param="reasoning_effort", code="invalid_value")
    return {"type": "enabled", "budget_tokens": THINKING_BUDGETS[effort]}


# --- answers: Anthropic Messages → OpenAI chat completion -----------------------------------------

def completion(message: Json) -> Json:
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[Json] = []
    for block in message.get("content") or []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text.append(block.get("text") or "")
        elif kind == "thinking":
            reasoning.append(block.get("thinking") or "")
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"), "arguments": arguments}})
    reply: Json = {"role": "assistant", "content": "".join(text) if text else None}
    if calls:
        reply["tool_calls"] = calls
    if reasoning:
        reply["reasoning_content"] = "".join(reasoning)
    return {"id": message.get("id") or "", "object": "chat.completion", "created": int(time.time()),
            "model": message.get("model") or "",
            "choices": [{"index": 0, "message": reply, "logprobs": None,
                         "finish_reason": finish_reason(message.get("stop_reason"))}],
            "usage": usage(message.get("usage") or {})}


def finish_reason(stop_reason: Any) -> str:
    return FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def usage(raw: Json) -> Json:
    """OpenAI counts every prompt token, cached or not; Anthropic reports the three kinds apart."""
    def count(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) else 0
    cached = count("cache_read_input_tokens")
    prompt = count("input_tokens") + count("cache_creation_input_tokens") + cached
    completion_tokens = count("output_tokens")
    # Cache writes have no field in chat's shape and cost more than other input: kept beside cached_tokens,
    # and those kept an hour (`cache_creation`'s breakdown by TTL), which cost more again, apart.
    details = {"cached_tokens": cached, "cache_write_tokens": count("cache_creation_input_tokens")}
    by_ttl = raw.get("cache_creation")
    hour = by_ttl.get("ephemeral_1h_input_tokens") if isinstance(by_ttl, dict) else None
    if isinstance(hour, int) and hour > 0:
        details["cache_write_1h_tokens"] = hour
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens, "prompt_tokens_details": details}


# --- streams: Anthropic SSE events → OpenAI chunks ------------------------------------------------

class AnthropicStream:
    """One stream's translation state: the id and model from message_start, tool numbering, usage."""

    def __init__(self, include_usage: bool, upstream: str = "anthropic") -> None:
        self.include_usage = include_usage
        self.upstream = upstream
        self.id = ""
        self.model = ""
        self.created = int(time.time())
        self.usage: Json = {}
        self.tools: dict[int, int] = {}  # content block index → OpenAI tool_calls index
        self.done = False

    def feed(self, event: bytes) -> list[bytes]:
        if self.done:
            return []
        if b"\r" in event:  # the splitter normalises line endings, but a translator must not rely on it
            event = event.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        data = data_field(event)
        if data is None:
            return []  # comments and bare event lines carry nothing
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict):
            return self._fail(f"upstream {self.upstream} sent a stream event that is not a JSON object", code=BROKEN)
        handler = getattr(self, f"_on_{payload.get('type')}", None)
        return handler(payload) if handler else []  # ping, content_block_stop and newer events carry nothing

    def finish(self) -> list[bytes]:
        if self.done:
            return []
        return self._fail(f"upstream {self.upstream} ended the stream early (before message_stop)", code=BROKEN)

    def _chunk(self, delta: Json, finish: str | None = None) -> bytes:
        return self._envelope(choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])

    def _envelope(self, **fields: Any) -> bytes:
        return data_event({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                           "model": self.model, **fields})

    def _fail(self, message: str, kind: str = "upstream_error", code: str | None = None) -> list[bytes]:
        """The stream's failure as an error chunk: the upstream's own (no code), or a stream that broke (BROKEN)."""
        self.done = True
        return [data_event({"error": {"message": message, "type": kind, "param": None, "code": code}}), DONE]

    def _count(self, raw: Any) -> None:
        if isinstance(raw, dict):  # message_delta repeats counts cumulatively; nulls mean "not reported"
            self.usage.update({k: v for k, v in raw.items() if v is not None})

    def _on_message_start(self, payload: Json) -> list[bytes]:
        message = payload.get("message") or {}
        self.id = message.get("id") or self.id
        self.model = message.get("model") or self.model
        self._count(message.get("usage"))
        return [self._chunk({"role": "assistant", "content": ""})]

    def _on_content_block_start(self, payload: Json) -> list[bytes]:
        block = payload.get("content_block") or {}
        kind = block.get("type")
        if kind == "tool_use":
            index = self.tools[payload.get("index", -1)] = len(self.tools)
            call = {"index": index, "id": block.get("id"), "type": "function",
                    "function": {"name": block.get("name"), "arguments": ""}}
            return [self._chunk({"tool_calls": [call]})]
        if kind == "text" and block.get("text"):
            return [self._chunk({"content": block["text"]})]
        if kind == "thinking" and block.get("thinking"):
            return [self._chunk({"reasoning_content": block["thinking"]})]
        return []

    def _on_content_block_delta(self, payload: Json) -> list[bytes]:
        delta = payload.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            return [self._chunk({"content": delta["text"]})]
        if kind == "thinking_delta" and delta.get("thinking"):
            return [self._chunk({"reasoning_content": delta["thinking"]})]
        index = self.tools.get(payload.get("index", -1))
        if kind == "input_json_delta" and index is not None and delta.get("partial_json"):
            return [self._chunk({"tool_calls": [{"index": index, "function": {"arguments": delta["partial_json"]}}]})]
        return []  # signature_delta, citations_delta: nothing OpenAI clients can take

    def _on_message_delta(self, payload: Json) -> list[bytes]:
        self._count(payload.get("usage"))
        return [self._chunk({}, finish_reason((payload.get("delta") or {}).get("stop_reason")))]

    def _on_message_stop(self, _payload: Json) -> list[bytes]:
        self.done = True
        if not self.include_usage:
            return [DONE]
        return [self._envelope(choices=[], usage=usage(self.usage)), DONE]

    def _on_error(self, payload: Json) -> list[bytes]:
        error = payload.get("error") or {}
        return self._fail(str(error.get("message") or f"upstream {self.upstream} reported an error"),
                          str(error.get("type") or "upstream_error"))

