"""The client formats' translations, piece by piece: Messages and Responses requests read into chat's form,
chat streams and answers written back as each format's own events and objects, a Responses stream read
as chat chunks, and the store that keeps responses."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from firsttoken.errors import GatewayError
from firsttoken.formats import messages_request, responses_request
from firsttoken.formats.messages_answer import MessagesEvents, error_object, message
from firsttoken.formats.response_store import ResponseStore
from firsttoken.formats.responses_answer import Draft, ResponseEvents
from firsttoken.upstream.responses import ResponsesStream


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + orjson.dumps({"id": "chatcmpl-1", "model": "m", "choices": choices, **extra}) + b"\n\n"


USAGE = chunk(usage={"prompt_tokens": 30, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 20}})
DONE = b": server-timing ttft;dur=1\n\ndata: [DONE]\n\n"
CALLS = [chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                "function": {"name": "weather", "arguments": ""}}]}),
         chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
         chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "Lagos"}'}}]}),
         chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                "function": {"name": "time", "arguments": "{}"}}]})]
STREAM = [chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "hm"}),
          chunk({"content": "Let me"}), chunk({"content": " look."}), *CALLS, chunk({}, "tool_calls"), USAGE, DONE]


def events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for raw in data.split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in raw.split(b"\n") if line and not line.startswith(b":"))
        if lines:
            out.append((lines[b"event"].decode(), orjson.loads(lines[b"data"])))
    return out


# --- Messages ---------------------------------------------------------------------------------------

def test_a_chat_stream_as_messages_events() -> None:
    writer = MessagesEvents()
    written = b"".join(writer.write(piece) for piece in STREAM)
    assert written.endswith(b'data: {"type":"message_stop"}\n\n: server-timing ttft;dur=1\n\n')  # the timing last
    seen = events(written)
    assert [name for name, _ in seen] == [
        "message_start",
        "content_block_start", "content_block_delta", "content_block_stop",  # thinking
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",  # text
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",  # weather
        "content_block_start", "content_block_delta",  # time: its arguments arrive with its start
        "content_block_stop", "message_delta", "message_stop"]
    blocks = [data["content_block"] for name, data in seen if name == "content_block_start"]
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use", "tool_use"]
    assert blocks[2] == {"type": "tool_use", "id": "call_a", "name": "weather", "input": {}}
    assert [data["index"] for name, data in seen if name == "content_block_start"] == [0, 1, 2, 3]
    delta = seen[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"] == {"input_tokens": 10, "output_tokens": 9, "cache_read_input_tokens": 20}


def test_a_failure_mid_stream_is_one_error_event_and_the_end() -> None:
    writer = MessagesEvents()
    out = writer.write(chunk({"content": "Hel"}))
    out += writer.write(b'data: {"error": {"message": "cut", "type": "upstream_error", "code": "x"}}\n\n' + DONE)
    names = [name for name, _ in events(out)]
    assert names[-1] == "error" and "message_stop" not in names
    assert events(out)[-1][1] == {"type": "error", "error": {"type": "api_error", "message": "cut"}}
    assert MessagesEvents().write(chunk({"content": "no finish"}) + DONE).endswith(
        b'"message":"the stream ended without a stop reason"}}\n\n')


def test_native_events_pass_through_untouched() -> None:
    native = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":' \
             b'"signature_delta","signature":"abc"}}\n\n'
    writer = MessagesEvents()
    assert writer.write(native) == native
    assert writer.write(b'event: message_stop\ndata: {"type":"message_stop"}\n\n' + DONE) == \
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n: server-timing ttft;dur=1\n\n'


def test_a_whole_completion_as_a_message() -> None:
    said = message({"id": "chatcmpl-9", "model": "m", "choices": [{"finish_reason": "length", "message": {
        "content": "Hi", "reasoning_content": "think", "tool_calls": [
            {"id": "c1", "function": {"name": "f", "arguments": "{broken"}}]}}], "usage": {"prompt_tokens": 5}})
    assert said["id"] == "msg_chatcmpl-9" and said["stop_reason"] == "max_tokens"
    assert [b["type"] for b in said["content"]] == ["thinking", "text", "tool_use"]
    assert said["content"][2]["input"] == {"arguments": "{broken"}  # kept where the client can see it
    assert said["usage"]["input_tokens"] == 5


def test_errors_in_anthropics_shape_follow_the_status() -> None:
    assert error_object(GatewayError(404, "no model"))["error"] == {"type": "not_found_error", "message": "no model"}
    assert error_object(GatewayError(502, "down", "upstream_error"))["error"]["type"] == "api_error"
    assert error_object(GatewayError(429, "slow", "requests"))["error"]["type"] == "rate_limit_error"


def test_a_messages_request_as_chat() -> None:
    body = {"model": "m", "max_tokens": 100, "stream": True, "stop_sequences": ["END"],
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "thinking": {"type": "enabled", "budget_tokens": 4096}, "metadata": {"user_id": "u1"},
            "tools": [{"name": "weather", "input_schema": {"type": "object"}},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                             {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                          "data": "AAA"}}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "x", "signature": "s"},
                                                  {"type": "tool_use", "id": "t1", "name": "weather",
                                                   "input": {"city": "Lagos"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                              "content": [{"type": "text", "text": "timeout"}]},
                                             {"type": "text", "text": "Try again."}]}]}
    assert messages_request.check(body) == ("m", True)
    chat = messages_request.chat_request(body, skipped := [])
    assert skipped == []
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Lagos"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "Error: timeout"},
        {"role": "user", "content": "Try again."}]
    assert [t["function"]["name"] for t in chat["tools"]] == ["weather"]  # the server tool is not offered
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["reasoning_effort"] == "medium" and chat["stop"] == ["END"] and chat["user"] == "u1"
    assert chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("body, param", [
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
])
def test_a_messages_request_without_what_it_needs_is_a_400(body: dict[str, Any], param: str) -> None:
    with pytest.raises(GatewayError) as refused:
        messages_request.check(body)
    assert refused.value.status == 400 and refused.value.param == param


def test_what_chat_cannot_carry_is_left_out_and_said_why() -> None:
    """A server tool's call and result in the history: an Anthropic upstream takes them, a chat one cannot."""
    body = {"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "Search for Lagos."},
        {"role": "assistant", "content": [{"type": "text", "text": "Searching."},
                                          {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}]},
        {"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "https://x/y.pdf"}},
                                     {"type": "text", "text": "And this?"}]}]}
    skipped: list[GatewayError] = []
    chat = messages_request.chat_request(body, skipped)
    assert [e.param for e in skipped] == ["messages[1].content[1].type", "messages[2].content[0].source"]
    assert chat["messages"] == [{"role": "user", "content": "Search for Lagos."},
                                {"role": "assistant", "content": "Searching."},
                                {"role": "user", "content": "And this?"}]


# --- Responses --------------------------------------------------------------------------------------

def test_a_text_reply_and_its_tool_call_are_one_assistant_turn() -> None:
    items = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": "I'll look."},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
             {"type": "item_reference", "id": "msg_1"}]
    skipped: list[GatewayError] = []
    chat = responses_request.chat_request({"model": "m", "parallel_tool_calls": True}, items, skipped)
    assert chat["messages"][1] == {"role": "assistant", "content": "I'll look.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    assert "parallel_tool_calls" not in chat  # no tools: a chat upstream would refuse it
    assert [e.code for e in skipped] == ["unsupported_value"]


@pytest.mark.parametrize("role", [[], {}, 3, None])
def test_a_role_that_is_no_string_is_a_400(role: Any) -> None:
    body = {"model": "m", "input": [{"type": "message", "role": role, "content": "x"}]}
    with pytest.raises(GatewayError) as refused:
        responses_request.chat_request(body, responses_request.input_items(body), [])
    assert refused.value.status == 400 and refused.value.param == "input[0].role"


def test_a_responses_request_as_chat() -> None:
    body = {"model": "m", "instructions": "Be brief.", "max_output_tokens": 50, "stream": True,
            "reasoning": {"effort": "low", "summary": "auto"}, "prompt_cache_key": "k",
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": True}},
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}},
                      {"type": "web_search"}, {"type": "namespace", "name": "n", "tools": []}],
            "tool_choice": {"type": "function", "name": "f"}, "input": "ignored: items are given"}
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
             {"type": "reasoning", "id": "rs_1", "encrypted_content": "opaque"},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "one"},
             {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]}]
    chat = responses_request.chat_request(body, items, [])
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"}]
    assert [t["function"]["name"] for t in chat["tools"]] == ["f"]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"},
                                                                              "strict": True}}
    assert chat["reasoning_effort"] == "low" and chat["max_tokens"] == 50 and chat["prompt_cache_key"] == "k"


def test_a_chat_stream_as_responses_events() -> None:
    kept: list[tuple[str, list]] = []
    draft = Draft({"model": "m", "instructions": "Be brief."}, lambda rid, output: kept.append((rid, output)))
    writer = ResponseEvents(draft)
    written = b"".join(writer.write(piece) for piece in STREAM)
    assert written.endswith(b"}}\n\n: server-timing ttft;dur=1\n\n")  # response.completed, then the timing
    seen = events(written)
    names = [name for name, _ in seen]
    assert names[:2] == ["response.created", "response.in_progress"] and names[-1] == "response.completed"
    assert [data["sequence_number"] for _, data in seen] == list(range(len(seen)))
    final = seen[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call", "function_call"]
    assert final["output"][1]["content"][0]["text"] == "Let me look."
    assert final["output"][2]["arguments"] == '{"city": "Lagos"}' and final["output"][3]["call_id"] == "call_b"
    assert final["usage"]["input_tokens"] == 30 and final["instructions"] == "Be brief."
    assert kept == [(draft.id, final["output"])]
    assert names.count("response.output_item.added") == names.count("response.output_item.done") == 4


def test_a_response_cut_by_its_limit_is_incomplete_and_a_failure_is_failed() -> None:
    writer = ResponseEvents(Draft({"model": "m"}, None))
    seen = events(writer.write(chunk({"content": "Hi"}) + chunk({}, "length") + USAGE + DONE))
    assert seen[-1][0] == "response.incomplete"
    assert seen[-1][1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    writer = ResponseEvents(Draft({"model": "m"}, None))
    seen = events(writer.write(chunk({"content": "Hi"})
                               + b'data: {"error": {"message": "cut", "code": "upstream_stream_broken"}}\n\n' + DONE))
    assert [name for name, _ in seen][-2:] == ["error", "response.failed"]
    assert seen[-1][1]["response"]["error"] == {"code": "upstream_stream_broken", "message": "cut"}


def test_a_responses_stream_read_as_chat_chunks() -> None:
    reader = ResponsesStream(True, "up")

    def feed(kind: str, **data: Any) -> list[dict[str, Any]]:
        out = reader.feed(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}))
        return [orjson.loads(piece[6:]) if not piece.startswith(b"data: [DONE]") else "DONE" for piece in out]

    assert feed("response.created", response={"id": "resp_1", "model": "m"})[0]["choices"][0]["delta"]["role"]
    assert feed("response.output_text.delta", delta="Hi")[0]["choices"][0]["delta"] == {"content": "Hi"}
    added = feed("response.output_item.added", item={"type": "function_call", "id": "fc_1", "call_id": "c1",
                                                     "name": "f"})
    assert added[0]["choices"][0]["delta"]["tool_calls"][0]["id"] == "c1"
    assert feed("response.function_call_arguments.delta", item_id="fc_1", delta="{}")[0]["choices"][0]["delta"] == \
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}
    end = feed("response.completed", response={"status": "completed", "output": [{"type": "function_call"}],
                                               "usage": {"input_tokens": 3, "output_tokens": 2}})
    assert end[0]["choices"][0]["finish_reason"] == "tool_calls" and end[1]["usage"]["prompt_tokens"] == 3
    assert end[2] == "DONE" and reader.finish() == []


def test_kept_responses_are_per_tenant_bounded_and_expire(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "responses.db", max_responses=100, max_age_s=3600)
    store.put("a", "resp_1", [{"type": "message", "role": "user", "content": "hi"}])
    assert store.get("a", "resp_1") == [{"type": "message", "role": "user", "content": "hi"}]
    assert store.get("b", "resp_1") is None
    for number in range(150):
        store.put("a", f"resp_x{number}", [])
    store.prune()
    assert len(store) == 100 and store.get("a", "resp_x149") == [] and store.get("a", "resp_1") is None
    expired = ResponseStore(tmp_path / "old.db", max_responses=100, max_age_s=0.01)
    expired.put("a", "resp_2", [])
    time.sleep(0.05)
    assert expired.get("a", "resp_2") is None
    assert (tmp_path / "responses.db").stat().st_mode & 0o077 == 0  # every tenant's conversations: ours alone


def test_a_conversation_is_kept_a_turn_a_row_and_read_back_whole(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "responses.db", max_responses=100, max_age_s=3600)
    store.put("a", "resp_1", [{"n": 1}, {"n": 2}])
    store.put("a", "resp_2", [{"n": 3}], parent="resp_1")
    store.put("a", "resp_3", [{"n": 4}, {"n": 5}], parent="resp_2")
    assert store.get("a", "resp_3") == [{"n": n} for n in range(1, 6)]
    assert store.get("a", "resp_2") == [{"n": n} for n in range(1, 4)]
    store.put("b", "resp_4", [{"n": 6}], parent="resp_3")  # another tenant cannot graft onto a's conversation
    assert store.get("b", "resp_4") is None
    store.db.execute("DELETE FROM responses WHERE id = 'resp_1'")  # a turn gone: the rest cannot be continued
    assert store.get("a", "resp_3") is None


def test_interleaved_tool_call_arguments_all_reach_their_calls() -> None:
    interleaved = [chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{\"x\":"}}]}),
                   chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
                   chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
                   chunk({}, "tool_calls"), DONE]
    writer = ResponseEvents(Draft({"model": "m"}, None))
    final = events(b"".join(writer.write(piece) for piece in interleaved))[-1][1]["response"]
    assert [(item["call_id"], item["arguments"]) for item in final["output"]] == [("a", '{"x": 1}'), ("b", "{}")]


def test_a_response_that_cannot_be_kept_is_still_answered(caplog: pytest.LogCaptureFixture) -> None:
    def broken(response_id: str, output: list) -> None:
        raise OSError("disk full")

    writer = ResponseEvents(Draft({"model": "m"}, broken))
    seen = events(writer.write(chunk({"content": "Hi"}) + chunk({}, "stop") + DONE))
    assert seen[-1][0] == "response.completed" and "could not keep response" in caplog.text


def test_a_store_from_before_parents_gains_the_column(tmp_path: Path) -> None:
    old = sqlite3.connect(tmp_path / "old.db")
    old.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created REAL NOT NULL, "
                "items BLOB NOT NULL)")
    old.close()
    store = ResponseStore(tmp_path / "old.db", 100, 3600)
    store.put("a", "resp_1", [{"n": 1}])
    store.put("a", "resp_2", [{"n": 2}], parent="resp_1")
    assert store.get("a", "resp_2") == [{"n": 1}, {"n": 2}]
