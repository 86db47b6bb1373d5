"""The relay's handling of events, read by read, without a network: what reaches the client."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from firsttoken.alarms import Alarms
from firsttoken.journey.timeline import Timeline
from firsttoken.relay import Relay
from firsttoken.sse import EventSplitter


def chunk(delta: dict, usage: dict | None = None, choices: bool = True) -> bytes:
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}] if choices else [],
            "usage": usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Stream:
    """What the relay reads from: an aiohttp-like `content` giving the reads in order."""

    def __init__(self, reads: list[bytes]) -> None:
        self.content = self
        self._reads = list(reads)

    async def readany(self) -> bytes:
        return self._reads.pop(0) if self._reads else b""


async def relay(reads: list[bytes], strip_usage: bool, stream: Stream | None = None) -> tuple[list[bytes], Relay]:
    written: list[bytes] = []

    async def write(data: bytes, last: bool) -> None:
        written.append(data)

    alarms = Alarms()
    alarms.start()
    try:
        r = Relay(stream or Stream(reads), write, Timeline(), translator=None, strip_usage=strip_usage, alarms=alarms,
                  heartbeat=alarms.heartbeat(60, lambda: None), first_token_deadline=alarms.now() + 5,
                  idle_s=5, upstream="test")
        await r.run()
    finally:
        await alarms.close()
    return written, r


USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


@pytest.mark.parametrize("strip", [True, False])
async def test_reads_are_forwarded_whole_and_usage_follows_the_client(strip: bool) -> None:
    reads = [chunk({"role": "assistant", "content": ""}, None), chunk({"content": "Hel"}),
             chunk({"content": "lo"}) + chunk({"content": "!"}),
             chunk({}, USAGE, choices=False) + b"data: [DONE]\n\n"]
    written, r = await relay(reads, strip_usage=strip)
    assert written[:3] == reads[:3]  # byte for byte, one write per read
    last = written[3]
    assert (b'"usage": {' in last) is (not strip)
    assert last.endswith(b"data: [DONE]\n\n") and b": server-timing ttft;dur=" in last
    assert r.result.clean and r.result.usage == USAGE
    assert r.timeline.token_events == 3


async def test_the_finish_chunk_is_no_token_and_does_not_end_the_decode() -> None:
    finish = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    reads = [chunk({"content": "a"}), chunk({"content": "b"}) + finish.replace(b'"delta":{}', b'"delta": {}'),
             finish, b"data: [DONE]\n\n"]
    times: list[float] = []

    class Paced(Stream):
        async def readany(self) -> bytes:
            await asyncio.sleep(0.02)  # every read comes later than the one before
            times.append(time.perf_counter())
            return await super().readany()

    written, r = await relay(reads, strip_usage=True, stream=Paced(reads))
    assert r.timeline.token_events == 2  # "a" and "b"; neither finish chunk
    assert r.timeline.first_token == pytest.approx(times[0], abs=0.005)
    assert r.timeline.last_token == pytest.approx(times[1], abs=0.005)  # not the lone finish chunk's read
    assert b"".join(written).count(b"finish_reason") == 2


async def test_a_token_that_says_done_is_not_the_end() -> None:
    reads = [chunk({"content": "a"}), chunk({"content": "[DONE]"}), b"data: [DONE]\n\n"]
    written, r = await relay(reads, strip_usage=True)
    assert written[1] == reads[1] and r.result.clean


async def test_an_error_event_after_tokens_is_noted() -> None:
    reads = [chunk({"content": "a"}), b'data: {"error": {"message": "overloaded"}}\n\n']
    written, r = await relay(reads, strip_usage=True)
    assert r.result.error == "overloaded" and not r.result.clean
    assert written[-1].endswith(b"data: [DONE]\n\n")


def test_splitter_and_relay_agree_on_event_bodies() -> None:
    assert EventSplitter().feed(chunk({"content": "x"})) == [chunk({"content": "x"})[:-2]]
