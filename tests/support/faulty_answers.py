r"""Answers that are broken on purpose, for the test upstream: each model name here answers a chat request
(streamed or not) the way a misbehaving server or network does.

  not-json          200, text/plain that is not JSON (also to stream requests)
  html              200, an HTML page (a proxy's or a captive portal's)
  cut-json          200, a chat completion cut in half
  whole-for-stream  a valid whole chat completion, also to a stream request
  garbage-stream    a stream of events that do not parse, ending with [DONE]
  empty-stream      a stream of [DONE] alone
  no-done           a stream with tokens and a finish reason, then closed without [DONE]
  cut-stream        a stream with tokens, then closed cleanly (no finish reason, no [DONE])
  no-finish         a stream with tokens and [DONE], but no finish reason
  key-in-stream     a stream with a token, then an error event quoting the key it was sent, then [DONE]
  key-in-headers    429 whose rate-limit header and body quote the key (a prefix of it, in the body)
  key-in-answer     a whole answer whose text quotes the key and the Authorization header it got
  key-escaped       400 quoting the key in JSON escapes (\u002d for "-", \/ for "/"), also in-stream after a token
  key-urlencoded    400 quoting the key %-encoded, in a URL
  done-with-id      a stream with tokens, no finish reason, and a [DONE] event that also has an id: line
  empty-finish      a stream whose finish reason is ""
  event-error       a stream with tokens and a finish reason, then a named `event: error`, then [DONE]
  error-not-first   a stream with a token, then an error object whose first key is not "error"
  two-choices-one-cut  n=2: choice 0 finishes, choice 1 never does
  gzip-stream       a whole, valid stream, gzip-compressed although identity was asked for
  auth-in-error     401 quoting the credential of the Authorization header it got (a Bearer token, or Basic)
  key-split-stream  a stream whose text quotes the key four characters per event
  named-ping        a valid stream with a named `event: ping` in it
  finish-error      an answer whose finish reason says it failed ("error"), streamed or whole
  slow-finish-error the same, streamed a word at a time, held after the first at HELD (identical requests join it)
  key-split-in-two  a stream whose text quotes the key in two pieces: the first ends in its prefix
  error-beside      a whole answer with choices and an error object beside them
  index-list        a stream whose choice index is a list
  error-null        a valid stream whose every chunk carries "error": null
  drip-<ms>         a whole answer whose body comes a piece every <ms> (six pieces)
and one that is not broken at all, only held:
  held              a valid stream (or whole answer) of HELD_TEXT, held after its first word (whole: before
                    it) at HELD, for a test that needs a stream in flight for as long as it takes something else
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from support.gate import Gate

UPSTREAM_KEY = "sk-upstream-secret-DO-NOT-LEAK-4242"
HELD_TEXT = "held until let go"


HELD = Gate()


def completion(model: str, text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-faulty", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {"id": "chatcmpl-faulty", "object": "chat.completion.chunk", "created": int(time.time()),
               "model": "faulty", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


TOKENS = chunk({"role": "assistant", "content": ""}) + chunk({"content": "half"}) + chunk({"content": " an"})
DONE = b"data: [DONE]\n\n"


async def _stream(request: web.Request, body: bytes, eof: bool = True) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(body)
    if eof:
        await response.write_eof()
    return response


async def not_json(request: web.Request, model: str) -> web.StreamResponse:
    return web.Response(text="upstream temporarily unavailable, try later", content_type="text/plain")


async def html(request: web.Request, model: str) -> web.StreamResponse:
    return web.Response(text="<html><body><h1>Welcome to the airport Wi-Fi</h1></body></html>",
                        content_type="text/html")


async def cut_json(request: web.Request, model: str) -> web.StreamResponse:
    whole = json.dumps(completion(model, "the part that never arrives"))
    return web.Response(text=whole[: len(whole) // 2], content_type="application/json")


async def whole_for_stream(request: web.Request, model: str) -> web.StreamResponse:
    return web.json_response(completion(model, "a whole answer to a stream request"))


async def garbage_stream(request: web.Request, model: str) -> web.StreamResponse:
    return await _stream(request, b"data: {not json at all\n\ndata: <<<>>>\n\n" + DONE)


async def empty_stream(request: web.Request, model: str) -> web.StreamResponse:
    return await _stream(request, DONE)


async def no_done(request: web.Request, model: str) -> web.StreamResponse:
    return await _stream(request, TOKENS + chunk({}, "stop"))


async def cut_stream(request: web.Request, model: str) -> web.StreamResponse:
    return await _stream(request, TOKENS)


async def no_finish(request: web.Request, model: str) -> web.StreamResponse:
    return await _stream(request, TOKENS + DONE)


async def key_in_stream(request: web.Request, model: str) -> web.StreamResponse:
    error = {"error": {"message": f"Invalid authentication: the key {UPSTREAM_KEY} was revoked",
                       "type": "authentication_error", "param": None, "code": "invalid_api_key"}}
    return await _stream(request, TOKENS + b"data: " + json.dumps(error).encode() + b"\n\n" + DONE)


async def key_in_headers(request: web.Request, model: str) -> web.StreamResponse:
    body = {"error": {"message": f"Rate limit reached for key {UPSTREAM_KEY[:16]}... on requests",
                      "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"}}
    return web.json_response(body, status=429, headers={"Retry-After": "1",
                                                        "x-ratelimit-key": f"{UPSTREAM_KEY}; remaining=0"})


async def key_in_answer(request: web.Request, model: str) -> web.StreamResponse:
    return web.json_response(completion(model, f"your key is {UPSTREAM_KEY}; you sent "
                                               f"{request.headers.get('Authorization')}"))


def _escaped(text: str) -> str:
    """JSON text of `text` with every "-" written \u002d: the same string, spelled otherwise."""
    return json.dumps(text).replace("-", "\\u002d")


async def key_escaped(request: web.Request, model: str) -> web.StreamResponse:
    message = _escaped(f"Incorrect API key provided: {UPSTREAM_KEY}")
    error = f'{{"error": {{"message": {message}, "type": "invalid_request_error", "param": null, "code": null}}}}'
    if (await request.json()).get("stream"):
        return await _stream(request, TOKENS + b"data: " + error.encode() + b"\n\n" + DONE)
    return web.Response(text=error, status=400, content_type="application/json")


async def key_urlencoded(request: web.Request, model: str) -> web.StreamResponse:
    encoded = "".join(f"%{byte:02X}" for byte in UPSTREAM_KEY.encode())
    return web.json_response({"error": {"message": f"see https://provider.example/keys?k={encoded}",
                                        "type": "invalid_request_error", "param": None, "code": None}}, status=400)


async def done_with_id(request: web.Request, model: str) -> web.StreamResponse:
    return await _stream(request, TOKENS + b"id: 9\ndata: [DONE]\n\n")


async def empty_finish(request: web.Request, model: str) -> web.StreamResponse:
    return await _stream(request, TOKENS + chunk({}, "") + DONE)


async def event_error(request: web.Request, model: str) -> web.StreamResponse:
    return await _stream(request, TOKENS + chunk({}, "stop") + b'event: error\ndata: {"message": "overloaded"}\n\n'
                         + DONE)


async def error_not_first(request: web.Request, model: str) -> web.StreamResponse:
    error = {"id": "x", "error": {"message": "the model crashed", "type": "server_error", "code": "crashed"}}
    return await _stream(request, TOKENS + b"data: " + json.dumps(error).encode() + b"\n\n" + DONE)


async def two_choices_one_cut(request: web.Request, model: str) -> web.StreamResponse:
    def of(index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        payload = {"id": "chatcmpl-faulty", "object": "chat.completion.chunk", "created": 1, "model": model,
                   "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    return await _stream(request, of(0, {"content": "A"}) + of(1, {"content": "B"}) + of(0, {}, "stop") + DONE)


async def gzip_stream(request: web.Request, model: str) -> web.StreamResponse:
    whole = chunk({"role": "assistant", "content": ""}) + chunk({"content": "squeezed"}) + chunk({}, "stop") + DONE
    return web.Response(body=gzip.compress(whole), headers={"Content-Type": "text/event-stream",
                                                           "Content-Encoding": "gzip"})


async def auth_in_error(request: web.Request, model: str) -> web.StreamResponse:
    credential = request.headers.get("Authorization", "").partition(" ")[2]
    return web.json_response({"error": {"message": f"Incorrect API key provided: {credential}",
                                        "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}},
                             status=401)


async def key_split_stream(request: web.Request, model: str) -> web.StreamResponse:
    text = f"you sent {UPSTREAM_KEY} ok"
    pieces = b"".join(chunk({"content": text[i:i + 4]}) for i in range(0, len(text), 4))
    return await _stream(request, chunk({"role": "assistant", "content": ""}) + pieces + chunk({}, "stop") + DONE)


async def slow_finish_error(request: web.Request, model: str) -> web.StreamResponse:
    if not (await request.json()).get("stream"):
        return await finish_error(request, model)
    response = await _stream(request, chunk({"role": "assistant", "content": ""}) + chunk({"content": "a"}), eof=False)
    await HELD.passed()
    for word in (" slow", " answer", " that", " failed"):
        await response.write(chunk({"content": word}))
    await response.write(chunk({}, "error") + DONE)
    await response.write_eof()
    return response


async def key_split_in_two(request: web.Request, model: str) -> web.StreamResponse:
    text = f"key {UPSTREAM_KEY} end"
    half = len("key ") + 14
    return await _stream(request, chunk({"role": "assistant", "content": ""}) + chunk({"content": text[:half]})
                         + chunk({"content": text[half:]}) + chunk({}, "stop") + DONE)


async def named_ping(request: web.Request, model: str) -> web.StreamResponse:
    return await _stream(request, TOKENS + b'event: ping\ndata: {"type": "ping"}\n\n' + chunk({}, "stop") + DONE)


async def finish_error(request: web.Request, model: str) -> web.StreamResponse:
    if (await request.json()).get("stream"):
        return await _stream(request, TOKENS + chunk({}, "error") + DONE)
    failed = completion(model, "half an")
    failed["choices"][0]["finish_reason"] = "error"
    return web.json_response(failed)


async def error_beside(request: web.Request, model: str) -> web.StreamResponse:
    return web.json_response({**completion(model, "an answer"), "error": {"message": "the model crashed"}})


async def index_list(request: web.Request, model: str) -> web.StreamResponse:
    odd = json.dumps({"choices": [{"index": [0], "delta": {"content": "odd"}, "finish_reason": None}]}).encode()
    return await _stream(request, TOKENS + b"data: " + odd + b"\n\n" + chunk({}, "stop") + DONE)


async def error_null(request: web.Request, model: str) -> web.StreamResponse:
    def null_error(piece: bytes) -> bytes:
        return piece.replace(b'"choices"', b'"error": null, "choices"')

    return await _stream(request, null_error(TOKENS) + null_error(chunk({}, "stop")) + DONE)


async def drip(request: web.Request, model: str) -> web.StreamResponse:
    """The whole answer, a sixth at a time."""
    pause = int(model.split("-")[1]) / 1000
    whole = json.dumps(completion(model, "a slow but steady answer")).encode()
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    step = len(whole) // 6 + 1
    for start in range(0, len(whole), step):
        await asyncio.sleep(pause)
        await response.write(whole[start:start + step])
    await response.write_eof()
    return response


async def held(request: web.Request, model: str) -> web.StreamResponse:
    first, rest = HELD_TEXT.split(" ", 1)
    if not (await request.json()).get("stream"):
        await HELD.passed()
        return web.json_response(completion(model, HELD_TEXT))
    response = await _stream(request, chunk({"role": "assistant", "content": ""}) + chunk({"content": first}),
                             eof=False)
    await HELD.passed()
    await response.write(chunk({"content": " " + rest}) + chunk({}, "stop") + DONE)
    await response.write_eof()
    return response


Fault = Callable[[web.Request, str], Awaitable[web.StreamResponse]]
FAULTS: dict[str, Fault] = {
    "not-json": not_json, "html": html, "cut-json": cut_json, "whole-for-stream": whole_for_stream,
    "garbage-stream": garbage_stream, "empty-stream": empty_stream, "no-done": no_done, "cut-stream": cut_stream,
    "no-finish": no_finish, "key-in-stream": key_in_stream, "key-in-headers": key_in_headers,
    "key-in-answer": key_in_answer, "key-escaped": key_escaped, "key-urlencoded": key_urlencoded,
    "done-with-id": done_with_id, "empty-finish": empty_finish, "event-error": event_error,
    "error-not-first": error_not_first, "two-choices-one-cut": two_choices_one_cut, "gzip-stream": gzip_stream,
    "auth-in-error": auth_in_error, "key-split-stream": key_split_stream, "named-ping": named_ping,
    "finish-error": finish_error, "error-beside": error_beside, "index-list": index_list, "error-null": error_null,
    "slow-finish-error": slow_finish_error, "key-split-in-two": key_split_in_two, "held": held,
}


def fault(model: str) -> Fault | None:
    return drip if model.startswith("drip-") else FAULTS.get(model)
