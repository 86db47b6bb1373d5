"""The simulated model's words: a tokenizer of its own and deterministic text.

The region is not a language model, so it defines its own tokens: in prompts a word or a punctuation
mark, in answers a word of the corpus with its punctuation (one engine step writes one of them).
Usage counts are exact under that definition, and the same request always gets the same answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from firsttoken.sim.tools import Call, pieces_of

_TOKEN = re.compile(r"\w+|[^\w\s]")

CORPUS = (
    "The request left Lagos on a submarine cable, crossed the ocean in a few dozen milliseconds, and waited "
    "in a queue in front of a busy GPU. The model read every weight once for each token it wrote, so the "
    "answer came back one word at a time, as fast as memory bandwidth allowed. A gateway near the user kept "
    "the connection warm, streamed each token the moment it arrived, and measured where the time went: "
    "distance, handshakes, queue, prefill and generation."
).split(" ")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def words(text: str) -> list[str]:
    """The text as the region's tokens: words and punctuation marks."""
    return _TOKEN.findall(text)


def text_of(content: Any) -> str:
    """A message's text: a string, or the text of its blocks."""
    if isinstance(content, list):
        return " ".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return str(content or "")


def prompt_tokens(messages: Any) -> int:
    """Tokens in a chat's messages: their text, plus four per message for the role and separators."""
    return max(len(prompt_token_list(messages)), 1)


def prompt_token_list(messages: Any, system: str = "") -> list[str]:
    """The prompt as the engine reads it: per message (the system prompt first, when there is one) four
    framing tokens around its text's tokens."""
    turns = [("system", system)] if system else []
    turns += [(str(m.get("role")), text_of(m.get("content"))) for m in (messages if isinstance(messages, list) else [])
              if isinstance(m, dict)]
    tokens: list[str] = []
    for role, content in turns:
        tokens += ["<|start|>", role, "<|message|>", *words(content), "<|end|>"]
    return tokens


@dataclass(frozen=True)
class Answer:
    pieces: list[str]  # one per token
    finish: str  # "length" (cut at max_tokens) | "stop" (ended on its own, or at a stop sequence) | "tool_calls"
    stop_sequence: str | None = None  # the one that ended it
    calls: list[Call] = field(default_factory=list)  # the tool calls the pieces spell, one after the other
    reasoning: list[str] = field(default_factory=list)  # the thinking before the answer, one piece per token

    @property
    def steps(self) -> int:
        """Engine steps to produce it: its reasoning tokens, then its answer's."""
        return len(self.reasoning) + len(self.pieces)


THINKING = ("First, what is being asked, and what do I know about it? The answer should follow from the "
            "request itself; let me check each part before I write it down.").split(" ")


def thought(reasoning_tokens: int, max_tokens: int, then: Answer) -> Answer:
    """`then`, thought about first for `reasoning_tokens` tokens, all within max_tokens (the thinking
    counts against it, so a long one leaves the answer short, or empty and cut: `length`)."""
    reasoning = [THINKING[i % len(THINKING)] if i == 0 else " " + THINKING[i % len(THINKING)]
                 for i in range(min(reasoning_tokens, max_tokens))]
    room = max_tokens - len(reasoning)
    if len(then.pieces) <= room:
        return Answer(then.pieces, then.finish, then.stop_sequence, then.calls, reasoning)
    return Answer(then.pieces[:room], "length", None, then.calls, reasoning)


def tool_answer(calls: list[Call], max_tokens: int) -> Answer:
    """An answer that calls tools: their arguments' tokens, one call after the other, cut at max_tokens."""
    pieces = [piece for call in calls for piece in call.pieces]
    if len(pieces) > max_tokens:
        return Answer(pieces[:max_tokens], "length", calls=calls)
    return Answer(pieces, "tool_calls", calls=calls)


def json_answer(value: Any, max_tokens: int) -> Answer:
    """An answer whose text is `value` as JSON (structured output), cut at max_tokens."""
    pieces = pieces_of(orjson.dumps(value).decode())
    if len(pieces) > max_tokens:
        return Answer(pieces[:max_tokens], "length")
    return Answer(pieces, "stop")


def split_by_call(answer: Answer) -> list[tuple[Call, list[str]]]:
    """Each call with the pieces of it the answer holds (fewer than its own when max_tokens cut it)."""
    out, start = [], 0
    for call in answer.calls:
        if start >= len(answer.pieces):
            break
        out.append((call, answer.pieces[start:start + len(call.pieces)]))
        start += len(call.pieces)
    return out


def answer(max_tokens: int, stop: list[str], natural: int | None = None) -> Answer:
    """The answer: `natural` tokens long when it ends on its own (None: it runs on), cut at `max_tokens`,
    and before the first stop sequence it would contain.

    Linear in the answer's length: each new piece is searched together with only as much of the text
    before it as a stop sequence could straddle."""
    ends = natural is not None and natural <= max_tokens
    length = natural if ends and natural is not None else max_tokens
    pieces: list[str] = []
    reach = max((len(s) for s in stop), default=0)
    tail = ""  # the last `reach` characters of the text so far
    for i in range(length):
        word = CORPUS[i % len(CORPUS)]
        if ends and i == length - 1 and word[-1].isalnum():
            word += "."  # an answer that ends on its own ends a sentence
        piece = word if i == 0 else " " + word
        if stop:
            window = tail + piece
            hits = [(at, s) for s in stop if (at := window.find(s)) >= 0]
            if hits:
                at, sequence = min(hits)
                cut = len(tail) - at  # characters of the earlier text that belong to the stop sequence
                if cut > 0:  # it began in earlier pieces: take those characters back
                    while cut > 0 and pieces:
                        last = pieces.pop()
                        if len(last) > cut:
                            pieces.append(last[:-cut])
                        cut -= len(last)
                else:
                    rest = piece[:at - len(tail)]
                    if rest:
                        pieces.append(rest)
                return Answer(pieces, "stop", sequence)
            tail = window[-reach:] if reach > 1 else ""
        pieces.append(piece)
    return Answer(pieces, "stop" if ends else "length")
