"""One traced request: a real chat stream on a connection that is opened for it (cold) or reused (warm),
with every moment that the journey vocabulary names read off the clock as it happens.

The readings go into the gateway's own Timeline, so the phases and the verdict come from the same
arithmetic (journey/attribution.py) as every request through the gateway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import aiohttp
import orjson

from firsttoken.answers import is_token_bearing
from firsttoken.cache.outcome import CacheOutcome
from firsttoken.journey.server_timing import parse_server_timing
from firsttoken.journey.tcp_info import rtt_of
from firsttoken.journey.timeline import Timeline
from firsttoken.spend.usage import note_stream_usage
from firsttoken.sse import EventSplitter, data_field
from firsttoken.trace.endpoint import Endpoint
from firsttoken.upstream.connector import TimedConnector, protocol_of

_ANTHROPIC_DELTAS = ("text_delta", "thinking_delta", "input_json_delta")
# The timing an endpoint declares at the end of a stream: the gateway's and the simulated region's.
_TIMING_COMMENT = re.compile(rb"^: ?(?:server|sim)-timing (.+)$", re.MULTILINE)


class TraceError(Exception):
    """The endpoint could not be traced (unreachable, refused, not a chat stream); the message says why."""


@dataclass
class Run:
    timeline: Timeline
    gaps_ms: list[float] = field(default_factory=list)  # between reads that carried tokens
    declared: dict[str, float] = field(default_factory=dict)  # the endpoint's own Server-Timing and comments
    error: str | None = None


def session() -> aiohttp.ClientSession:
    """One connection at a time, so every run after the first can reuse it; names resolved afresh for the
    cold one (no DNS cache), as a new process would."""
    connector = TimedConnector(limit=1, use_dns_cache=False, force_close=False)
    return aiohttp.ClientSession(connector=connector, auto_decompress=True,
                                 timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120))


async def probe(client: aiohttp.ClientSession, target: Endpoint, body: dict[str, Any]) -> Run:
    connector = client.connector
    assert isinstance(connector, TimedConnector)
    timeline = Timeline()
    timeline.stream, timeline.model = True, str(body.get("model", ""))
    run = Run(timeline)
    payload = orjson.dumps(body)
    timeline.received = timeline.sent = perf_counter()
    try:
        response = await client.post(target.chat_url, data=payload, headers=target.headers(), allow_redirects=False)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise unreachable(target, target.chat_url, exc) from exc
    async with response:
        timeline.first_byte = perf_counter()
        timeline.status = response.status
        timeline.opened(connector.handshake(response))
        timeline.upstream_said(response.headers.get("Server-Timing"))
        run.declared.update(timeline.declared)
        timeline.request_id = response.headers.get("x-request-id", "")
        if cache := response.headers.get("x-firsttoken-cache"):  # a firsttoken gateway: what its cache did
            timeline.cache, timeline.similarity = CacheOutcome.read(cache)
        transport = getattr(protocol_of(response), "transport", None)
        if response.status != 200:
            run.error = target.redact(_error_message(await response.read(), response.status))
            timeline.last_byte = perf_counter()
            return run
        await _read_stream(response, run, target)
        timeline.last_byte = perf_counter()
        # Read after the stream: by now the kernel has sampled every round trip of it, and its minimum is
        # the path's, without the queueing behind a burst of tokens.
        sock = transport.get_extra_info("socket") if transport is not None else None
        timeline.upstream_rtt = rtt_of(sock)
    return run


def unreachable(target: Endpoint, url: str, exc: BaseException) -> TraceError:
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return TraceError(f"{url}: the server's certificate is not trusted ({exc.certificate_error}); for a "
                          f"private CA, point SSL_CERT_FILE at its certificate")
    return TraceError(target.redact(f"could not reach {url}: {type(exc).__name__}: {exc}"))


async def _read_stream(response: aiohttp.ClientResponse, run: Run, target: Endpoint) -> None:
    timeline = run.timeline
    splitter = EventSplitter()
    async for data in response.content.iter_any():
        now = perf_counter()
        tokens = False
        for event in splitter.feed(data):
            if event.startswith(b":"):
                if match := _TIMING_COMMENT.match(event):
                    run.declared.update(parse_server_timing(match[1].decode(errors="replace")))
                continue
            payload = data_field(event)
            if payload is None or payload == b"[DONE]":
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                continue
            if isinstance(chunk, dict) and "error" in chunk:
                run.error = target.redact(_error_message(payload, 200))
            tokens |= _note(chunk, timeline, target.api)
        if tokens:
            if not timeline.first_token:
                timeline.first_token = now
            else:
                run.gaps_ms.append((now - (timeline.last_token or timeline.first_token)) * 1000.0)
                timeline.tokens_at(now)
    if not timeline.first_token and run.error is None:
        run.error = "the stream ended without a single token"


def _note(chunk: Any, timeline: Timeline, api: str) -> bool:
    """Count this event's tokens and usage; True when it carries a token."""
    if not isinstance(chunk, dict):
        return False
    if api == "anthropic":
        kind = chunk.get("type")
        usage = (chunk.get("message") or {}).get("usage") if kind == "message_start" else chunk.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("input_tokens"), int):
                timeline.input_tokens = usage["input_tokens"]
            if isinstance(usage.get("cache_read_input_tokens"), int):
                timeline.cached_tokens = usage["cache_read_input_tokens"]
            if kind == "message_delta" and isinstance(usage.get("output_tokens"), int):
                timeline.output_tokens = usage["output_tokens"]
        bearing = kind == "content_block_delta" and (chunk.get("delta") or {}).get("type") in _ANTHROPIC_DELTAS
    else:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            note_stream_usage(timeline, usage)
        bearing = is_token_bearing(chunk)
    if bearing:
        timeline.token_events += 1
    return bearing


def _error_message(body: bytes, status: int) -> str:
    try:
        error = orjson.loads(body).get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (orjson.JSONDecodeError, AttributeError):
        message = None
    text = str(message) if message else body.decode(errors="replace").strip()[:300] or "no body"
    return f"HTTP {status}: {text}" if status != 200 else f"error event: {text}"
