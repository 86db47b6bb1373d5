"""The relay's handling of events, read by read, without a network: what reaches the client."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from firsttoken.alarms import Alarms
from firsttoken.journey.timeline import Timeline
from firsttoken.redact import Redactor
from firsttoken.relay import BROKEN, SLICE, TOO_LARGE, Relay, Source
from firsttoken.sse import EventSplitter
from support.loop_turns import LoopTurns


def chunk(delta: dict, usage: dict | None = None, choices: bool = True, finish: str | None = None) -> bytes:
    body = {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [], "usage": usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


FINISH = chunk({}, finish="stop")
KEY = "sk-upstream-secret-DO-NOT-LEAK-4242"


class Stream:
    """What the relay reads from: an aiohttp-like `content` giving the reads in order."""

    def __init__(self, reads: list[bytes]) -> None:
        self.content = self
        self._reads = list(reads)

    async def readany(self) -> bytes:
        return self._reads.pop(0) if self._reads else b""


class Written:
    """A sink that keeps what the relay writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.timeline = Timeline()
        self.capture = None

    async def write(self, data: bytes, last: bool = False) -> None:
        self.written.append(data)


async def relay(reads: list[bytes], strip_usage: bool, stream: Stream | None = None,
                redactor: Redactor | None = None) -> tuple[list[bytes], Relay]:
    sink = Written()
    alarms = Alarms()
    alarms.start()
    try:
        r = Relay(stream or Stream(reads), sink, Source("test", 5, redactor=redactor), strip_usage=strip_usage,
                  alarms=alarms, heartbeat=alarms.heartbeat(60, lambda: None), first_token_deadline=alarms.now() + 5)
        await r.run()
    finally:
        await alarms.close()
    return sink.written, r


USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


@pytest.mark.parametrize("strip", [True, False])
async def test_reads_are_forwarded_whole_and_usage_follows_the_client(strip: bool) -> None:
    reads = [chunk({"role": "assistant", "content": ""}, None), chunk({"content": "Hel"}),
             chunk({"content": "lo"}) + chunk({"content": "!"}),
             FINISH + chunk({}, USAGE, choices=False) + b"data: [DONE]\n\n"]
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
            await asyncio.sleep(0.001)  # every read comes later than the one before
            times.append(time.perf_counter())
            return await super().readany()

    written, r = await relay(reads, strip_usage=True, stream=Paced(reads))
    assert r.timeline.token_events == 2  # "a" and "b"; neither finish chunk
    # Each token is stamped when its read is handled: after that read came, before the next one did.
    assert times[0] <= r.timeline.first_token < times[1]
    assert times[1] <= r.timeline.last_token < times[2]  # not the lone finish chunk's read
    assert b"".join(written).count(b"\"finish_reason\":\"stop\"") == 2


async def test_a_token_that_says_done_is_not_the_end() -> None:
    reads = [chunk({"content": "a"}), chunk({"content": "[DONE]"}), FINISH + b"data: [DONE]\n\n"]
    written, r = await relay(reads, strip_usage=True)
    assert written[1] == reads[1] and r.result.clean


async def test_an_error_event_after_tokens_is_noted() -> None:
    reads = [chunk({"content": "a"}), b'data: {"error": {"message": "overloaded"}}\n\n']
    written, r = await relay(reads, strip_usage=True)
    assert r.result.error == "overloaded" and not r.result.clean
    assert written[-1].endswith(b"data: [DONE]\n\n")


def test_splitter_and_relay_agree_on_event_bodies() -> None:
    assert EventSplitter().feed(chunk({"content": "x"})) == [chunk({"content": "x"})[:-2]]


def error_events(written: list[bytes]) -> list[dict]:
    events = [json.loads(e[6:]) for e in b"".join(written).split(b"\n\n") if e.startswith(b"data: {")]
    return [event["error"] for event in events if "error" in event]


async def test_a_stream_closed_without_done_says_it_was_cut() -> None:
    """The upstream's connection ended cleanly after two tokens: the client must not take it for a whole answer."""
    written, r = await relay([chunk({"content": "a"}), chunk({"content": "b"})], strip_usage=True)
    assert not r.result.clean and r.result.code == BROKEN
    [error] = error_events(written)
    assert error["code"] == BROKEN and "[DONE] never came" in error["message"]
    assert written[-1].endswith(b"data: [DONE]\n\n")  # the client's stream still closes properly
    assert r.timeline.error_code == BROKEN


async def test_done_without_a_finish_reason_says_the_answer_may_be_cut() -> None:
    written, r = await relay([chunk({"content": "a"}), b"data: [DONE]\n\n"], strip_usage=True)
    assert not r.result.clean and [e["code"] for e in error_events(written)] == [BROKEN]


async def test_an_empty_stream_is_not_clean() -> None:
    written, r = await relay([b"data: [DONE]\n\n"], strip_usage=True)
    assert not r.result.clean and len(error_events(written)) == 1


async def test_an_upstream_error_event_is_not_doubled() -> None:
    written, r = await relay([chunk({"content": "a"}), b'data: {"error": {"message": "overloaded"}}\n\n'],
                             strip_usage=True)
    assert [e["message"] for e in error_events(written)] == ["overloaded"]


@pytest.mark.parametrize("quoted", [KEY, KEY[:14] + "...", KEY[:-4]])
async def test_a_key_quoted_in_an_error_event_never_reaches_the_client(quoted: str) -> None:
    error = json.dumps({"error": {"message": f"Incorrect API key provided: {quoted}", "type": "auth"}}).encode()
    event = b"data: " + error + b"\n\n"
    half = len(event) // 2 + 10  # the key cut across two reads
    written, r = await relay([chunk({"content": "a"}), event[:half], event[half:]], strip_usage=True,
                             redactor=Redactor([KEY]))
    sent = b"".join(written)
    assert KEY[:10].encode() not in sent and b"[redacted]" in sent
    assert KEY[:10] not in (r.result.error or "") and KEY[:10] not in r.timeline.error


@pytest.mark.parametrize("done", [b"id: 9\ndata: [DONE]\n\n", b"data: [DONE] \n\n", b"data:[DONE]\n\n"])
async def test_done_however_written_is_the_end(done: bytes) -> None:
    """A client ends its stream at any data that begins with [DONE]: the relay must see the end there too,
    or the error event that says the answer was cut would come after the client stopped reading."""
    written, r = await relay([chunk({"content": "a"}), done], strip_usage=True)
    sent = b"".join(written)
    assert sent.count(b"[DONE]") == 1 and sent.endswith(b"data: [DONE]\n\n")
    assert [e["code"] for e in error_events(written)] == [BROKEN]  # no finish reason came


async def test_an_empty_finish_reason_is_none() -> None:
    written, r = await relay([chunk({"content": "a"}), chunk({}, finish="") + b"data: [DONE]\n\n"], strip_usage=True)
    assert not r.result.clean and len(error_events(written)) == 1


async def test_a_named_error_event_becomes_openais_error_event() -> None:
    reads = [chunk({"content": "a"}), FINISH, b'event: error\ndata: {"message": "overloaded"}\n\n', b"data: [DONE]\n\n"]
    written, r = await relay(reads, strip_usage=True)
    assert [e["message"] for e in error_events(written)] == ["overloaded"] and not r.result.clean
    assert b"event: error" not in b"".join(written)


async def test_bytes_that_are_not_events_end_the_stream_before_any_token() -> None:
    written, r = await relay([b"\x1f\x8b\x08\x00binary\n\n", chunk({"content": "a"})], strip_usage=True)
    sent = b"".join(written)
    assert b"\x1f\x8b" not in sent and [e["code"] for e in error_events(written)] == [BROKEN]


async def test_an_event_cut_off_by_the_streams_end_is_dropped_unless_whole() -> None:
    """SSE clients drop an unterminated event; a cut one passed on would reach the SDK as unparseable data."""
    whole = chunk({"content": " and the rest"})
    cut = whole[: whole.index(b"rest") + 4]
    written, r = await relay([chunk({"content": "Hel"}), cut], strip_usage=True)
    assert b"and the rest" not in b"".join(written) and r.result.code == BROKEN
    written, r = await relay([chunk({"content": "Hel"}), FINISH + b"data: [DONE]"], strip_usage=True)
    assert r.result.clean  # a whole last event without its blank line is still the end


async def test_an_event_past_the_bound_ends_the_stream_with_an_error() -> None:
    piece = b"x" * (1024 * 1024)
    reads = [chunk({"content": "Hel"}), b'data: {"choices": [{"delta": {"content": "', *[piece] * 9]
    written, r = await relay(reads, strip_usage=True)
    assert r.result.code == TOO_LARGE and not r.result.clean
    assert b"".join(written).endswith(b"data: [DONE]\n\n")


async def test_a_read_of_thousands_of_events_goes_in_slices_with_the_loop_running_between() -> None:
    tokens = [chunk({"content": f" w{i}"}) for i in range(3 * SLICE)]
    read = chunk({"role": "assistant", "content": ""}) + b"".join(tokens) + FINISH + b"data: [DONE]\n\n"
    async with LoopTurns() as other:
        written, r = await relay([read], strip_usage=False)
    assert b"".join(written).startswith(read[:-len(b"data: [DONE]\n\n")])  # every event, in order
    assert r.result.clean and r.timeline.token_events == 3 * SLICE
    assert len(written) >= 3 and other.turns >= 3  # one write a slice, and the loop ran between them
