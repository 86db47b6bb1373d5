"""The relay: one pass over an upstream stream, each event forwarded to the client the moment it arrives.

It works on bytes: it finds event boundaries, notes the first token-bearing event (parsing JSON only
until then), drops the usage chunk the client did not ask for, and closes every stream with the
`: server-timing` comment and `data: [DONE]`. Until the first token it sends an SSE comment every
`heartbeat_s` so proxies and mobile networks keep an idle stream open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any, TypeVar

import aiohttp
import orjson

from firsttoken.journey.timeline import Timeline
from firsttoken.sse import DONE, HEARTBEAT, EventSplitter, data_field, error_event
from firsttoken.upstream.adapter import StreamTranslator

log = logging.getLogger("firsttoken.relay")

Write = Callable[[bytes], Awaitable[None]]
T = TypeVar("T")

_TOKEN_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls", "refusal", "function_call")


def is_token_bearing(chunk: Any) -> bool:
    """A chunk carrying content, reasoning or a tool-call delta; the role-only first chunk is not."""
    if not isinstance(chunk, dict):
        return False
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(delta.get(f) for f in _TOKEN_FIELDS):
            return True
        if choice.get("text"):  # legacy completions chunks
            return True
    return False


async def wait_with_heartbeat(task: asyncio.Future[T], heartbeat_s: float, deadline: float,
                              beat: Callable[[], Awaitable[None]]) -> T:
    """Await `task`, calling `beat` every `heartbeat_s` until it is done; TimeoutError past `deadline`
    (loop time). The task is cancelled if this wait is abandoned."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError
            done, _ = await asyncio.wait((task,), timeout=min(heartbeat_s, remaining))
            if done:
                return task.result()
            if loop.time() < deadline:
                await beat()
    except BaseException:
        task.cancel()
        raise


@dataclass(slots=True)
class RelayResult:
    clean: bool = False          # ended with [DONE] from the upstream, no error seen
    error: str | None = None
    usage: dict[str, Any] | None = None


class Relay:
    """Moves one upstream response's events to the client."""

    def __init__(self, response: aiohttp.ClientResponse, write: Write, timeline: Timeline, *,
                 translator: StreamTranslator | None, strip_usage: bool, heartbeat_s: float,
                 first_token_deadline: float, idle_s: float, upstream: str) -> None:
        self.response = response
        self.write = write
        self.timeline = timeline
        self.translator = translator
        self.strip_usage = strip_usage
        self.heartbeat_s = heartbeat_s
        self.first_token_deadline = first_token_deadline
        self.idle_s = idle_s
        self.upstream = upstream
        self.result = RelayResult()
        self._done = False

    async def run(self) -> RelayResult:
        splitter = EventSplitter()
        content = self.response.content
        loop = asyncio.get_running_loop()
        try:
            # Until the first token: reads raced against the heartbeat.
            while not self.timeline.first_token:
                read = loop.create_task(content.readany())
                data = await wait_with_heartbeat(read, self.heartbeat_s, self.first_token_deadline,
                                                 self._heartbeat)
                if not data:
                    break
                if await self._feed(splitter.feed(data)):
                    return self.result
            # After it: plain reads, each within the idle timeout.
            if self.timeline.first_token:
                async with asyncio.timeout(self.idle_s) as idle:
                    while data := await content.readany():
                        if await self._feed(splitter.feed(data)):
                            return self.result
                        idle.reschedule(loop.time() + self.idle_s)
            await self._end_of_stream(splitter)
        except TimeoutError:
            waited = "the first token" if not self.timeline.first_token else "the next chunk"
            await self._fail(f"upstream {self.upstream} timed out waiting for {waited}", "upstream_timeout")
        except (aiohttp.ClientError, ConnectionError) as exc:
            await self._fail(f"upstream {self.upstream} broke the stream: {type(exc).__name__}",
                             "upstream_stream_broken")
        return self.result

    async def _heartbeat(self) -> None:
        await self.write(HEARTBEAT)

    async def _feed(self, events: list[bytes]) -> bool:
        """Handle upstream events in order; True once the stream is finished."""
        for event in events:
            if self.translator is None:
                if await self._handle(event):
                    return True
                continue
            for translated in self.translator.feed(event):
                if await self._handle(translated.rstrip(b"\n")):
                    return True
        return False

    async def _handle(self, event: bytes) -> bool:
        """One OpenAI-format event (without its blank line). True when it ended the stream."""
        timeline = self.timeline
        if event == b"data: [DONE]" or event == b"data:[DONE]":
            self.result.clean = self.result.error is None
            await self._close()
            return True
        if not timeline.first_token:
            payload = data_field(event)
            if payload is not None:
                chunk = _loads(payload)
                if isinstance(chunk, dict) and "error" in chunk:
                    self._note_error(chunk)
                elif is_token_bearing(chunk):
                    timeline.first_token = perf_counter()
        elif b'"error"' in event:
            chunk = _loads(data_field(event) or b"")
            if isinstance(chunk, dict) and "error" in chunk:
                self._note_error(chunk)
        if b'"usage"' in event and b'"usage":null' not in event and b'"usage": null' not in event:
            chunk = _loads(data_field(event) or b"")
            if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                self.result.usage = chunk["usage"]
                if self.strip_usage and not chunk.get("choices"):
                    return False
        if timeline.first_token:
            timeline.token_events += 1
        await self.write(event + b"\n\n")
        return False

    def _note_error(self, chunk: dict[str, Any]) -> None:
        error = chunk.get("error")
        self.result.error = str(error.get("message") if isinstance(error, dict) else error)

    async def _end_of_stream(self, splitter: EventSplitter) -> None:
        """The upstream closed without `[DONE]`: flush what it owed, then close the client's stream."""
        rest = splitter.rest()
        if rest and await self._feed([rest]):
            return
        if self.translator is not None:
            for event in self.translator.finish():
                if await self._handle(event.rstrip(b"\n")):
                    return
        await self._close()

    async def _fail(self, message: str, code: str) -> None:
        log.warning("%s", message)
        self.result.error = message
        self.result.clean = False
        await self.write(error_event({"error": {"message": message, "type": "upstream_error",
                                                "param": None, "code": code}}))
        await self._close()

    async def _close(self) -> None:
        if self._done:
            return
        self._done = True
        await self.write(self.timeline.closing_comment())
        await self.write(DONE)


def _loads(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
