"""The SSE splitter: however the bytes are cut into reads, the same events come out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from firsttoken.sse import MAX_EVENT_BYTES, EventSplitter, EventTooLarge, data_field

lines = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30)
events = st.lists(st.lists(lines.map(lambda t: "data: " + t) | lines.map(lambda t: ": " + t), min_size=1, max_size=3)
                  .map(lambda ls: "\n".join(ls).encode()), min_size=1, max_size=8)


@given(events=events, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=10),
       crlf=st.booleans())
def test_any_cutting_gives_the_same_events(events: list[bytes], cuts: list[int], crlf: bool) -> None:
    stream = b"".join(e + b"\n\n" for e in events)
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    points = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    splitter = EventSplitter()
    out = [event for piece in pieces for event in splitter.feed(piece)]
    assert out == events
    assert splitter.rest() == b""


def test_an_unterminated_last_event_is_kept_for_the_end() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: 1\n\ndata: 2") == [b"data: 1"]
    assert splitter.rest() == b"data: 2"


def test_data_field() -> None:
    assert data_field(b"data: {\"a\":1}") == b"{\"a\":1}"
    assert data_field(b"data:[DONE]") == b"[DONE]"
    assert data_field(b": keep-alive") is None
    assert data_field(b"event: message_start\ndata: {}") == b"{}"
    assert data_field(b"data: a\ndata: b") == b"a\nb"


def test_a_long_event_in_many_reads_comes_out_whole_and_one_past_the_bound_is_refused() -> None:
    splitter = EventSplitter()
    piece = b"x" * 65536
    reads = [b"data: " + piece, *[piece] * 15, b"\n", b"\ndata: next"]
    out = [event for read in reads for event in splitter.feed(read)]
    assert out == [b"data: " + piece * 16] and splitter.rest() == b"data: next"
    endless = EventSplitter()
    with pytest.raises(EventTooLarge):
        for _ in range(MAX_EVENT_BYTES // len(piece) + 2):
            endless.feed(piece)
