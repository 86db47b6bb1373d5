"""OpenAI's Responses API, as the region speaks it: the same engine and answers as chat completions,
with the Responses request (input items, instructions, flat function tools, `text.format`,
`max_output_tokens`, `reasoning.effort`) and its output items and typed stream events.

A request is read by turning it into the chat completion it amounts to (input items into messages,
function calls and their outputs into tool calls and tool messages), so that the tokens, the kind of
request, the tools' choice and the answer are the chat format's own. With `store` (the default) the
region keeps the response, so that `previous_response_id` can continue it: its input and output are
put in front of the new input, as the API does, from a bounded memory of recent responses.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import orjson

from firsttoken.sim.text import Answer, split_by_call
from firsttoken.sim.tools import Call
from firsttoken.sim.wire import Ask, BadRequest, PromptCache, positive_int
from firsttoken.sim.wire_openai import OpenAIChat

_ids = itertools.count(1)
STORED = 10_000  # responses kept for previous_response_id, the oldest forgotten first
DEFAULT_MAX_OUTPUT = 4096


class Responses:
    call_prefix = "call_sim"
    reasons_by_default = True

    def __init__(self) -> None:
        self.chat = OpenAIChat()
        self.stored: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()  # id → its input and output items

    def parse(self, body: Any, models: list[str]) -> Ask:
        if not isinstance(body, dict):
            raise BadRequest(400, "The request body must be a JSON object.")
        items = self._items(body)
        chat: dict[str, Any] = {"model": body.get("model"), "messages": messages_of(items, body.get("instructions")),
                                "stream": bool(body.get("stream")), "stream_options": {"include_usage": True}}
        limit = body.get("max_output_tokens")
        chat["max_tokens"] = DEFAULT_MAX_OUTPUT if limit is None else positive_int(limit, "max_output_tokens")
        tools = [chat_tool(t, i) for i, t in enumerate(_list(body.get("tools") or [], "tools"))]
        if any(tools):
            chat["tools"] = [tool for tool in tools if tool is not None]
            chat["tool_choice"] = chat_tool_choice(body.get("tool_choice", "auto"))
            chat["parallel_tool_calls"] = body.get("parallel_tool_calls", True)
        fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            chat["response_format"] = {"type": "json_schema", "json_schema": {
                "name": fmt.get("name", "answer"), "schema": fmt.get("schema", {}), "strict": fmt.get("strict")}}
        elif isinstance(fmt, dict) and fmt.get("type") in ("json_object", "text"):
            chat["response_format"] = {"type": fmt["type"]}
        reasoning = body.get("reasoning")
        if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
            chat["reasoning_effort"] = reasoning["effort"]
        for key in ("seed", "ignore_eos"):
            if key in body:
                chat[key] = body[key]
        ask = self.chat.parse(chat, models)
        return replace(ask, include_usage=True, content={**ask.content, "responses": True},
                       store=body.get("store") is not False)

    def _items(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The conversation's items: a previous response's (when continued), then this input's."""
        value = body.get("input")
        if isinstance(value, str):
            value = [{"role": "user", "content": value}]
        items = _list(value, "input")
        if not items or not all(isinstance(i, dict) for i in items):
            raise BadRequest(400, "'input' must be a non-empty string or a list of input items.", "input")
        previous = body.get("previous_response_id")
        if previous is not None:
            if previous not in self.stored:
                raise BadRequest(404, f"Previous response with id '{previous}' not found.", "previous_response_id",
                                 "previous_response_not_found")
            self.stored.move_to_end(previous)
            items = self.stored[previous] + items
        return items

    def remember(self, response_id: str, items: list[dict[str, Any]]) -> None:
        self.stored[response_id] = items
        while len(self.stored) > STORED:
            self.stored.popitem(last=False)

    def renderer(self, ask: Ask, answers: list[Answer]) -> ResponsesRenderer:
        [answer] = answers  # Responses has no `n`
        return ResponsesRenderer(ask, answer, self)

    def error_body(self, status: int, message: str, param: str | None, code: str | None,
                   kind: str | None = None) -> bytes:
        return self.chat.error_body(status, message, param, code, kind)


def _list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise BadRequest(400, f"'{param}' must be a list.", param)
    return value


def messages_of(items: list[dict[str, Any]], instructions: Any) -> list[dict[str, Any]]:
    """Responses input items as chat messages: text of every part, function calls as an assistant's tool
    calls, their outputs as tool messages. Items the region has nothing to say about (reasoning) are dropped."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role", "user"), "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}}
            if messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else orjson.dumps(output).decode()})
    return messages


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def chat_tool(tool: Any, index: int) -> dict[str, Any] | None:
    """A function tool in chat's shape; None for the other kinds (web search, a shell, custom grammars),
    which agents send along and the region never calls."""
    if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
        raise BadRequest(400, f"tools[{index}]: expected a tool object with a 'type'.", f"tools[{index}]")
    if tool["type"] != "function":
        return None
    return {"type": "function", "function": {key: tool[key] for key in ("name", "description", "parameters")
                                             if key in tool}}


def chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


class ResponsesRenderer:
    """One response: its output items (a reasoning item, then the message or the function calls) and, for a
    stream, its typed events, each with its sequence number."""

    prompt_cache = PromptCache()

    def __init__(self, ask: Ask, answer: Answer, responses: Responses) -> None:
        self.ask, self.answer, self.responses = ask, answer, responses
        number = next(_ids)
        self.id = f"resp_sim{number:012d}"
        self.message_id = f"msg_sim{number:012d}"
        self.created_at = int(time.time())
        self._thinking = len(answer.reasoning)
        self._events = self._build_events()
        self._sequence = 0

    # The response object.

    def output(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if self._thinking:
            items.append({"type": "reasoning", "id": f"rs_sim{self.id[8:]}", "summary": []})
        if self.answer.calls:
            items += [{"type": "function_call", "id": f"fc_{call.id}", "call_id": call.id, "name": call.name,
                       "arguments": "".join(pieces), "status": "completed"}
                      for call, pieces in split_by_call(self.answer)]
        else:
            items.append(self._message("".join(self.answer.pieces), "completed"))
        return items

    def _message(self, text: str, status: str) -> dict[str, Any]:
        content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
        return {"type": "message", "id": self.message_id, "status": status, "role": "assistant", "content": content}

    def response(self, status: str) -> dict[str, Any]:
        done = status != "in_progress"
        incomplete = done and self.answer.finish == "length"
        cache = self.prompt_cache
        return {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": "incomplete" if incomplete else status, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "model": self.ask.model, "output": self.output() if done else [], "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "text": {"format": {"type": "text"}},
            "usage": {"input_tokens": self.ask.prompt_tokens, "input_tokens_details": {"cached_tokens": cache.read},
                      "output_tokens": self.answer.steps,
                      "output_tokens_details": {"reasoning_tokens": self._thinking},
                      "total_tokens": self.ask.prompt_tokens + self.answer.steps} if done else None,
        }

    def whole(self) -> bytes:
        self._remember()
        return orjson.dumps(self.response("completed"))

    def _remember(self) -> None:
        if not self.ask.store:
            return
        items = self.ask.content.get("messages") or []  # the chat messages this response answered
        self.responses.remember(self.id, [*_as_items(items), *self.output()])

    # The stream: events built once, numbered as they are sent.

    def _build_events(self) -> list[tuple[str, dict[str, Any], Call | None]]:
        """One entry per engine step: the kind and data of the event its token makes, and the call it
        starts (with the call's first token)."""
        events: list[tuple[str, dict[str, Any], Call | None]] = []
        index = 1 if self._thinking else 0  # the message's or first call's place in the output
        for _ in range(self._thinking):
            events.append(("", {}, None))  # thinking is not shown: its tokens take their time and say nothing
        if self.answer.calls:
            for number, (call, pieces) in enumerate(split_by_call(self.answer)):
                for i, piece in enumerate(pieces):
                    events.append(("response.function_call_arguments.delta", {
                        "item_id": f"fc_{call.id}", "output_index": index + number, "delta": piece},
                        call if i == 0 else None))
        else:
            for piece in self.answer.pieces:
                events.append(("response.output_text.delta", {"item_id": self.message_id, "output_index": index,
                                                              "content_index": 0, "delta": piece, "logprobs": []},
                               None))
        return events

    def _event(self, kind: str, data: dict[str, Any]) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    def opening(self) -> bytes:
        head = (self._event("response.created", {"response": self.response("in_progress")})
                + self._event("response.in_progress", {"response": self.response("in_progress")}))
        if self._thinking:
            reasoning = {"type": "reasoning", "id": f"rs_sim{self.id[8:]}", "summary": []}
            head += self._event("response.output_item.added", {"output_index": 0, "item": reasoning})
        return head + (self.piece(0) if self.answer.steps else b"")

    def piece(self, index: int) -> bytes:
        kind, data, call = self._events[index]
        out = b""
        if index == self._thinking and self._thinking:  # the thinking is over
            reasoning = {"type": "reasoning", "id": f"rs_sim{self.id[8:]}", "summary": []}
            out += self._event("response.output_item.done", {"output_index": 0, "item": reasoning})
        if not kind:
            return out
        if kind == "response.output_text.delta" and index == self._thinking:
            out += self._event("response.output_item.added", {"output_index": data["output_index"],
                                                              "item": self._message("", "in_progress")})
            out += self._event("response.content_part.added", {
                "item_id": self.message_id, "output_index": data["output_index"], "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []}})
        if call is not None:
            if data["output_index"] > (1 if self._thinking else 0):
                out += self._call_done(data["output_index"] - 1)
            out += self._event("response.output_item.added", {"output_index": data["output_index"], "item": {
                "type": "function_call", "id": data["item_id"], "call_id": call.id, "name": call.name,
                "arguments": "", "status": "in_progress"}})
        return out + self._event(kind, data)

    def _call_done(self, output_index: int) -> bytes:
        item = self.output()[output_index]
        return (self._event("response.function_call_arguments.done", {
                    "item_id": item["id"], "output_index": output_index, "arguments": item["arguments"]})
                + self._event("response.output_item.done", {"output_index": output_index, "item": item}))

    def closing(self, decode_ms: float) -> bytes:
        self._remember()
        first = 1 if self._thinking else 0
        out = b""
        if self.answer.calls:
            out += self._call_done(len(self.output()) - 1)
        else:
            text = "".join(self.answer.pieces)
            if not self.answer.pieces:  # nothing was said (a thought cut short): the message still opens
                out += self._event("response.output_item.added", {"output_index": first,
                                                                  "item": self._message("", "in_progress")})
            out += self._event("response.output_text.done", {"item_id": self.message_id, "output_index": first,
                                                             "content_index": 0, "text": text, "logprobs": []})
            out += self._event("response.content_part.done", {
                "item_id": self.message_id, "output_index": first, "content_index": 0,
                "part": {"type": "output_text", "text": text, "annotations": []}})
            out += self._event("response.output_item.done", {"output_index": first,
                                                             "item": self._message(text, "completed")})
        final = self.response("completed")
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return out + f": sim-timing decode;dur={decode_ms:.2f}\n\n".encode() + self._event(kind, {"response": final})


def _as_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages back as Responses input items, for a stored response's conversation."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "tool":
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id"),
                          "output": message.get("content")})
        elif message.get("tool_calls"):
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in message["tool_calls"]]
        elif message.get("role") != "system":  # instructions are not carried over (as the API does)
            items.append({"type": "message", "role": message.get("role"), "content": message.get("content")})
    return items

