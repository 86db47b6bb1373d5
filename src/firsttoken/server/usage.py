"""The upstream's own usage counts, onto the request's timeline (for the journey, spend and limits)."""

from __future__ import annotations

import re
from typing import Any

from firsttoken.journey.timeline import Timeline

_COMPLETION_TOKENS = b'"completion_tokens":'
_PROMPT_TOKENS = b'"prompt_tokens":'
_CACHED_TOKENS = b'"cached_tokens":'  # in prompt_tokens_details: input the provider's prompt cache served
_NUMBER = re.compile(rb"\s*(\d{1,12})")


def note_usage(timeline: Timeline, answer: bytes) -> None:
    """The usage counts of a whole answer (OpenAI's shape)."""
    timeline.output_tokens = usage_count(answer, _COMPLETION_TOKENS)
    timeline.input_tokens = usage_count(answer, _PROMPT_TOKENS)
    timeline.cached_tokens = usage_count(answer, _CACHED_TOKENS)


def note_stream_usage(timeline: Timeline, usage: dict[str, Any] | None) -> None:
    """The usage counts of a stream's usage chunk (None when it sent none)."""
    usage = usage or {}
    output, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    timeline.output_tokens = output if isinstance(output, int) else None
    timeline.input_tokens = prompt if isinstance(prompt, int) else None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    timeline.cached_tokens = cached if isinstance(cached, int) else None


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
