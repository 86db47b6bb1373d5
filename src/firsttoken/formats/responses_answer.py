"""Answers in OpenAI's Responses format, from the chat completions the gateway relays and keeps.

`Draft` is one response being answered: its id, the request's settings it echoes, and what becomes of it
once complete (kept for `previous_response_id`). `Draft.whole` turns a whole chat.completion into a
response object; `ResponseEvents` turns a chat stream, as the gateway writes it to a client, into the typed
Responses events in their real order: response.created and response.in_progress; per output item
(reasoning, message, function call) output_item.added, its content part's added, deltas and done, and
output_item.done; then response.completed (or response.incomplete when the answer hit its limit). Every
event carries its `sequence_number`.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from firsttoken.errors import GatewayError
from firsttoken.sse import CLOSING, data_field, event_name

Json = dict[str, Any]
log = logging.getLogger("firsttoken.responses")

_DONE = b"[DONE]"
_ECHOED = ("instructions", "max_output_tokens", "parallel_tool_calls", "previous_response_id", "temperature",
           "tool_choice", "tools", "top_p", "truncation", "metadata", "prompt_cache_key", "safety_identifier",
           "service_tier", "user")
_DEFAULTS: Json = {"instructions": None, "max_output_tokens": None, "parallel_tool_calls": True,
                   "previous_response_id": None, "temperature": 1.0, "tool_choice": "auto", "tools": [],
                   "top_p": 1.0, "truncation": "disabled", "metadata": {}}
_ids = itertools.count(1)
_PREFIX = os.urandom(6).hex()  # ids unique across processes and restarts without a syscall each

Keep = Callable[[str, list[Json]], None]  # (response id, its output items): a complete response, to keep


def new_id(kind: str) -> str:
    return f"{kind}_{_PREFIX}{next(_ids):010x}"


class Draft:
    """One response: what it echoes of its request, and where it goes once complete."""

    def __init__(self, request: Json, keep: Keep | None) -> None:
        self.id = new_id("resp")
        self.created_at = int(time.time())
        self.model = str(request.get("model") or "")
        self.echo: Json = {**_DEFAULTS, **{key: request[key] for key in _ECHOED if request.get(key) is not None}}
        self.echo["store"] = request.get("store") is not False
        self.echo["text"] = request.get("text") if isinstance(request.get("text"), dict) else {
            "format": {"type": "text"}}
        reasoning = request.get("reasoning")
        self.echo["reasoning"] = reasoning if isinstance(reasoning, dict) else {"effort": None, "summary": None}
        self.keep = keep  # None: not to be kept (store: false)

    def response(self, status: str, output: list[Json], usage: Json | None, error: Json | None = None) -> Json:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.id, "object": "response", "created_at": self.created_at, "status": status,
                "error": error, "incomplete_details": incomplete, "model": self.model, "output": output,
                "usage": usage, **self.echo}

    def kept(self, response: Any) -> None:
        """An upstream's own complete response (one that speaks Responses), kept under its id."""
        if (isinstance(response, dict) and response.get("status") in ("completed", "incomplete")
                and isinstance(response.get("id"), str) and isinstance(response.get("output"), list)):
            self._keep(response["id"], response["output"])

    def finished(self, status: str, output: list[Json], usage: Json | None) -> Json:
        """The complete response; kept, when it may be, for a later `previous_response_id`."""
        if status in ("completed", "incomplete"):
            self._keep(self.id, output)
        return self.response(status, output, usage)

    def _keep(self, response_id: str, output: list[Json]) -> None:
        if self.keep is None:
            return
        try:
            self.keep(response_id, output)
        except Exception:  # the answer reaches its client all the same; only continuing it will not work
            log.exception("could not keep response %s", response_id)

    def whole(self, answer: bytes) -> bytes:
        completion = orjson.loads(answer)
        choice = (completion.get("choices") or [{}])[0]
        said = choice.get("message") or {}
        output: list[Json] = []
        reasoning = said.get("reasoning_content") or said.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            output.append(reasoning_item(new_id("rs"), reasoning))
        text = "".join(said[field] for field in ("content", "refusal") if isinstance(said.get(field), str))
        if text or not said.get("tool_calls"):
            output.append(message_item(new_id("msg"), text, "completed"))
        for call in said.get("tool_calls") or []:
            function = call.get("function") or {}
            output.append(call_item(call.get("id") or new_id("call"), function.get("name") or "",
                                    function.get("arguments") or "", "completed"))
        self.model = str(completion.get("model") or self.model)
        status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
        return orjson.dumps(self.finished(status, output, usage(completion.get("usage"))))


def reasoning_item(item_id: str, text: str) -> Json:
    return {"type": "reasoning", "id": item_id, "summary": [], "content": [{"type": "reasoning_text", "text": text}]}


def message_item(item_id: str, text: str, status: str) -> Json:
    content = [output_text(text)] if status == "completed" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def output_text(text: str) -> Json:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(call_id: str, name: str, arguments: str, status: str) -> Json:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def usage(chat_usage: Any) -> Json | None:
    if not isinstance(chat_usage, dict):
        return None
    prompt = chat_usage.get("prompt_tokens") or 0
    output = chat_usage.get("completion_tokens") or 0
    prompt_details = chat_usage.get("prompt_tokens_details") or {}
    output_details = chat_usage.get("completion_tokens_details") or {}
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": prompt_details.get("cached_tokens") or 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": output_details.get("reasoning_tokens") or 0},
            "total_tokens": chat_usage.get("total_tokens") or prompt + output}


def _payload(event: bytes) -> Json:
    """An event's data object ({} when it holds none)."""
    try:
        payload = orjson.loads(data_field(event) or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return payload if isinstance(payload, dict) else {}


def error_body(error: GatewayError) -> bytes:
    return error.to_bytes()  # Responses errors are OpenAI's, as on chat completions


class ResponseEvents:
    """One stream's chat events, written as Responses events (see the module's docstring)."""

    def __init__(self, draft: Draft) -> None:
        self.draft = draft
        self.sequence = 0
        self.started = False
        self.ended = False
        self.output: list[Json] = []  # the items so far, the open one last
        self.open: str | None = None  # the open item's kind: reasoning, message, function_call
        self.text: list[str] = []  # the open item's text (or arguments) so far
        self.calls: dict[int, int] = {}  # chat tool call index → its item's output index
        self.finish: str | None = None
        self.usage: Json | None = None
        self.passed: bytes | None = None  # the last event an upstream that speaks Responses sent as it was

    def write(self, data: bytes) -> bytes:
        out: list[bytes] = []
        for raw in data.split(b"\n\n"):
            if raw:
                self._event(raw, out)
        return b"".join(out)

    def _emit(self, out: list[bytes], kind: str, data: Json) -> None:
        payload = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        out.append(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n")

    def _event(self, raw: bytes, out: list[bytes]) -> None:
        if raw.startswith(b":"):  # a heartbeat or the closing timing comment: clients skip comments
            if raw.startswith(CLOSING) and self.finish is not None and not self.ended:
                self._complete(out)  # the response's end first: the timing comment closes the stream
            out.append(raw + b"\n\n")
            return
        name = event_name(raw)
        if name is not None:  # already a Responses event (a stream passed through)
            self._passed(name, raw)
            out.append(raw + b"\n\n")
            return
        payload = data_field(raw) or b""
        if payload.startswith(_DONE):
            if not self.ended:
                self._complete(out)
            return
        if self.ended:
            return
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(chunk, dict):
            return
        if chunk.get("error") is not None:
            self._fail(chunk["error"], out)
            return
        if chunk.get("model"):
            self.draft.model = str(chunk["model"])
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:  # Responses has no `n`
                self._start(out)
                self._delta(choice.get("delta") or {}, out)
                if choice.get("finish_reason"):
                    self.finish = choice["finish_reason"]

    def _passed(self, name: bytes, raw: bytes) -> None:
        """An upstream's own event: its end is the stream's, and a failure the gateway adds after it goes on
        from its sequence number, under its response's id."""
        self.started = True
        self.passed = raw
        if name == b"response.created" and isinstance(response := _payload(raw).get("response"), dict):
            self.draft.id = str(response.get("id") or self.draft.id)
        elif name in (b"response.completed", b"response.incomplete", b"response.failed", b"error"):
            self.ended = True
            if name in (b"response.completed", b"response.incomplete"):
                self.draft.kept(_payload(raw).get("response"))

    def _start(self, out: list[bytes]) -> None:
        if self.started:
            return
        self.started = True
        snapshot = self.draft.response("in_progress", [], None)
        self._emit(out, "response.created", {"response": snapshot})
        self._emit(out, "response.in_progress", {"response": snapshot})

    def _delta(self, delta: Json, out: list[bytes]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            if self.open != "reasoning":
                self._open(reasoning_item(new_id("rs"), ""), out)
                self.output[-1]["content"] = []
                self._emit(out, "response.content_part.added", {**self._at(), "part": {"type": "reasoning_text",
                                                                                        "text": ""}})
            self.text.append(reasoning)
            self._emit(out, "response.reasoning_text.delta", {**self._at(), "delta": reasoning})
        for field in ("content", "refusal"):
            text = delta.get(field)
            if isinstance(text, str) and text:
                if self.open != "message":
                    self._open(message_item(new_id("msg"), "", "in_progress"), out)
                    self._emit(out, "response.content_part.added", {**self._at(), "part": output_text("")})
                self.text.append(text)
                self._emit(out, "response.output_text.delta", {**self._at(), "delta": text, "logprobs": []})
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                self._tool_call(call, out)

    def _tool_call(self, call: Json, out: list[bytes]) -> None:
        number = call.get("index", 0)
        function = call.get("function") or {}
        if number not in self.calls:
            self._open(call_item(call.get("id") or new_id("call"), function.get("name") or "", "", "in_progress"),
                       out)
            self.calls[number] = len(self.output) - 1
        arguments = function.get("arguments")
        if not isinstance(arguments, str) or not arguments:
            return
        at = self.calls[number]
        item = self.output[at]
        if at == len(self.output) - 1:
            self.text.append(arguments)
        else:  # an earlier call's, interleaved (some servers stream parallel calls so): its item grows still
            item["arguments"] += arguments
        self._emit(out, "response.function_call_arguments.delta", {"item_id": item["id"], "output_index": at,
                                                                   "delta": arguments})

    def _at(self) -> Json:
        return {"item_id": self.output[-1]["id"], "output_index": len(self.output) - 1, "content_index": 0}

    def _open(self, item: Json, out: list[bytes]) -> None:
        self._close(out)
        self.output.append(item)
        self.open = item["type"]
        self._emit(out, "response.output_item.added", {"output_index": len(self.output) - 1, "item": item})

    def _close(self, out: list[bytes]) -> None:
        """The open item is done: its text whole, its part and itself marked done."""
        if self.open is None:
            return
        item, text = self.output[-1], "".join(self.text)
        index = len(self.output) - 1
        if self.open == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            self._emit(out, "response.reasoning_text.done", {**self._at(), "text": text})
            self._emit(out, "response.content_part.done", {**self._at(), "part": part})
            item["content"] = [part]
        elif self.open == "message":
            self._emit(out, "response.output_text.done", {**self._at(), "text": text, "logprobs": []})
            self._emit(out, "response.content_part.done", {**self._at(), "part": output_text(text)})
            item.update(status="completed", content=[output_text(text)])
        else:
            item.update(status="completed", arguments=text)
            self._emit(out, "response.function_call_arguments.done", {"item_id": item["id"], "output_index": index,
                                                                      "arguments": text})
        self._emit(out, "response.output_item.done", {"output_index": index, "item": item})
        self.open, self.text = None, []

    def _complete(self, out: list[bytes]) -> None:
        if self.finish is None:  # the gateway writes an error event before a [DONE] that ends nothing
            self._fail({"message": "the stream ended without a finish reason", "code": "upstream_stream_broken"}, out)
            return
        self._start(out)
        self._close(out)
        status = "incomplete" if self.finish == "length" else "completed"
        final = self.draft.finished(status, self.output, usage(self.usage))
        self._emit(out, f"response.{status}", {"response": final})
        self.ended = True

    def _fail(self, error: Any, out: list[bytes]) -> None:
        """The stream failed: the error event, then response.failed; nothing after."""
        details = error if isinstance(error, dict) else {"message": str(error)}
        code = str(details.get("code") or details.get("type") or "upstream_error")
        message = str(details.get("message") or "the upstream failed")
        if self.passed is not None:  # after the upstream's own events: numbered on from its last
            number = _payload(self.passed).get("sequence_number")
            self.sequence = number + 1 if isinstance(number, int) else self.sequence
        self._start(out)
        self._emit(out, "error", {"code": code, "message": message, "param": details.get("param")})
        self._emit(out, "response.failed", {"response": self.draft.response(
            "failed", self.output, usage(self.usage), {"code": str(code), "message": message})})
        self.ended = True
