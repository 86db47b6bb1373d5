"""The upstream's own usage counts, read onto the request's timeline (for the journey, spend and limits).

Every upstream's usage reaches here in chat completions' shape: the Anthropic and Responses adapters
translate theirs (upstream/anthropic.py, upstream/responses.py), keeping what chat's shape has no field
for in `prompt_tokens_details` (`cache_write_tokens`: Anthropic's cache writes, priced apart, and of those
`cache_write_1h_tokens`, the ones kept an hour, priced higher)."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from firsttoken.journey.timeline import Timeline

_COMPLETION_TOKENS = b'"completion_tokens":'
_PROMPT_TOKENS = b'"prompt_tokens":'
_CACHED_TOKENS = b'"cached_tokens":'  # in prompt_tokens_details: input the provider's prompt cache served
_CACHE_WRITE_TOKENS = b'"cache_write_tokens":'  # in prompt_tokens_details: input written to that cache
_CACHE_WRITE_1H_TOKENS = b'"cache_write_1h_tokens":'  # …of which written to be kept an hour
_REASONING_TOKENS = b'"reasoning_tokens":'  # in completion_tokens_details: output spent thinking
_NUMBER = re.compile(rb"\s*(\d{1,12})")


class Tokens(NamedTuple):
    """One answer's token counts, as its upstream reported them. (A named tuple: made for every request,
    and a frozen dataclass took more than twice as long to make, 0.63 µs against 0.25.)"""

    input: int = 0  # the whole prompt, cached or not
    output: int = 0  # reasoning included
    cached_input: int = 0  # of the input, what the provider's prompt cache served
    cache_write: int = 0  # of the input, what was written to that cache
    reasoning: int = 0  # of the output
    cache_write_1h: int = 0  # of the cache writes, those kept an hour (Anthropic's 1-hour TTL)

    @classmethod
    def of(cls, timeline: Timeline) -> Tokens | None:
        """What the upstream said this request used; None when it said nothing."""
        if timeline.input_tokens is None and timeline.output_tokens is None:
            return None
        return cls(timeline.input_tokens or 0, timeline.output_tokens or 0, timeline.cached_tokens or 0,
                   timeline.cache_write_tokens or 0, timeline.reasoning_tokens or 0,
                   timeline.cache_write_1h_tokens or 0)

    @classmethod
    def in_answer(cls, answer: bytes) -> Tokens | None:
        """The counts in a kept answer (a completion, or a stream's events with its usage chunk)."""
        output, input_, cached, written, reasoning, written_1h = _answer_counts(answer)
        if input_ is None and output is None:
            return None
        return cls(input_ or 0, output or 0, cached or 0, written or 0, reasoning or 0, written_1h or 0)

    @property
    def total(self) -> int:
        return self.input + self.output


def note_usage(timeline: Timeline, answer: bytes) -> None:
    """The usage counts of a whole answer (OpenAI's shape)."""
    (timeline.output_tokens, timeline.input_tokens, timeline.cached_tokens, timeline.cache_write_tokens,
     timeline.reasoning_tokens, timeline.cache_write_1h_tokens) = _answer_counts(answer)


def _answer_counts(answer: bytes) -> tuple[int | None, ...]:
    """Output, input, cached input, cache write, reasoning and 1-hour cache write tokens, as the answer gives
    them."""
    return (usage_count(answer, _COMPLETION_TOKENS), usage_count(answer, _PROMPT_TOKENS),
            usage_count(answer, _CACHED_TOKENS), usage_count(answer, _CACHE_WRITE_TOKENS),
            usage_count(answer, _REASONING_TOKENS), usage_count(answer, _CACHE_WRITE_1H_TOKENS))


def note_stream_usage(timeline: Timeline, usage: dict[str, Any] | None) -> None:
    """The usage counts of a stream's usage chunk (None when it sent none)."""
    usage = usage or {}
    timeline.output_tokens = _count(usage, "completion_tokens")
    timeline.input_tokens = _count(usage, "prompt_tokens")
    prompt, answer = usage.get("prompt_tokens_details"), usage.get("completion_tokens_details")
    timeline.cached_tokens = _count(prompt, "cached_tokens")
    timeline.cache_write_tokens = _count(prompt, "cache_write_tokens")
    timeline.cache_write_1h_tokens = _count(prompt, "cache_write_1h_tokens")
    timeline.reasoning_tokens = _count(answer, "reasoning_tokens")


def _count(counts: Any, name: str) -> int | None:
    value = counts.get(name) if isinstance(counts, dict) else None
    return value if isinstance(value, int) else None


def usage_count(answer: bytes, field: bytes) -> int | None:
    """A usage count in an OpenAI-format answer, found without parsing it all (it can be large)."""
    at = answer.rfind(field)
    if at < 0:
        return None
    number = _NUMBER.match(answer, at + len(field))
    return int(number.group(1)) if number else None


def client_wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True
