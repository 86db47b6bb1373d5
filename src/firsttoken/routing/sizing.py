"""Task sizing: what kind of task a chat request is, so that the sizing alias (`auto`) sends it to the
smallest tier the config allows for that kind. Many requests (a classification, an extraction, a short
answer) need no frontier model, and a small one answers them well and much sooner.

Kinds: classification, extraction, short, chat, code, reasoning, long-form. Two judges, the first that
knows wins:
- rules: word patterns on the last user message (about ten regular expressions; microseconds);
- neighbours: with the semantic extra installed, the labelled examples nearest to it by the local
  embedding (MT-Bench's 80 questions, mapped to kinds, and a few of our own for the kinds MT-Bench lacks),
  a majority of the 5 nearest.
Neither: chat.

The rules are written here because no library classifies prompts by task offline; they err towards the
larger tier (code, reasoning and long-form are checked first).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from typing import Any

KINDS = ("classification", "extraction", "short", "chat", "code", "reasoning", "long-form")
# MT-Bench's categories as kinds: its writing and humanities questions ask for essays and posts, its stem
# questions for explanations (a chat), its roleplay for a conversation.
MT_BENCH_KINDS = {"writing": "long-form", "roleplay": "chat", "reasoning": "reasoning", "math": "reasoning",
                  "coding": "code", "extraction": "extraction", "stem": "chat", "humanities": "long-form"}
NEIGHBOURS = 5

_FLAGS = re.IGNORECASE | re.DOTALL
_RULES: list[tuple[str, re.Pattern[str]]] = [(kind, re.compile(pattern, _FLAGS)) for kind, pattern in (
    ("code", r"```|\b(?:def|class|function|import)\s+\w|#include|\bselect\b.{1,400}\bfrom\b|"
             r"\b(?:python|javascript|typescript|java|c\+\+|c#|rust|golang|kotlin|swift|sql|bash|regex|html|css)\b|"
             r"\b(?:code|program|script|function|algorithm|implement|debug|compile|refactor|unit test|stack trace|"
             r"traceback|api endpoint)\b"),
    ("extraction", r"^\W*(?:please\s+)?(?:extract|parse|pull|list all|find all|identify)\b|"
                   r"\bextract\b.{1,400}\bfrom\b|\bnamed entities\b|"
                   r"\bfrom the (?:following|text|document|passage|notes)\b"),
    ("classification", r"^\W*(?:please\s+)?(?:classify|categori[sz]e|label|tag|rate)\b|\bsentiment\b|"
                       r"\b(?:spam or not|true or false|positive or negative|which (?:category|department|class))\b"),
    ("reasoning", r"\b(?:prove|proof|step by step|solve|calculate|compute|probability|equation|integral|derivative|"
                  r"riddle|puzzle|deduce|logic(?:al)?|remainder|inequality|the value of|the area of|how many \w+ "
                  r"(?:does|did|do|are|were|will)\b.{1,400}\b(?:if|each|after|then)\b)|\d\s*[-+*/^×]\s*\d|\b[a-z]\s*[=+*/^]\s*\d|"
                  r"\bif\b.{1,400}\bthen\b[^?]{0,400}\?"),
    ("long-form", r"\b(?:write|compose|draft|create|craft)\b.{0,40}\b(?:essay|story|article|blog|post|poem|speech|"
                  r"report|letter|novel|script|chapter|proposal|cover letter|email|paragraph|plan)\b|"
                  r"\b\d{3,}[- ]words?\b|\b(?:in detail|detailed|comprehensive|outline|discuss|elaborate)\b"),
)]
_SHORT = re.compile(r"^\W*(?:who|what|when|where|which|how (?:many|much|old|far|long|tall)|is|are|does|do|did|can|"
                    r"was|were)\b[^?]{0,80}\?\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Sizing:
    kind: str
    by: str  # rules | neighbours | default


# The rules read the start and the end of a long prompt, where a task is stated (before a pasted document,
# or after it), each on its own, so that their cost is bounded whatever a client sends; the gaps in the
# patterns are bounded too, since an unbounded `.+` between two words backtracks in cubic time on a
# crafted prompt (24 KB took 15 s).
RULES_HEAD, RULES_TAIL = 8000, 2000


def by_rules(text: str) -> str | None:
    parts = [text] if len(text) <= RULES_HEAD + RULES_TAIL else [text[:RULES_HEAD], text[-RULES_TAIL:]]
    for kind, pattern in _RULES:
        if any(pattern.search(part) for part in parts):
            return kind
    return "short" if _SHORT.match(text) else None


def examples() -> list[tuple[str, str]]:
    """(text, kind) of every labelled example that ships with the package."""
    data = resources.files("firsttoken.routing") / "data"
    found = [(json.loads(line)["turns"][0], MT_BENCH_KINDS[json.loads(line)["category"]])
             for line in (data / "mt_bench_questions.jsonl").read_text().splitlines() if line.strip()]
    found += [(e["text"], e["kind"]) for e in map(json.loads, (data / "examples.jsonl").read_text().splitlines())]
    return found


class Sizer:
    """Rules, then the labelled neighbours when an embedder is given."""

    def __init__(self, embedder: Any | None = None) -> None:
        self.embedder = embedder
        self._labelled = examples()
        self._vectors = embedder.embed([text for text, _ in self._labelled]) if embedder is not None else None

    def size(self, text: str) -> Sizing:
        kind = by_rules(text)
        return Sizing(kind, "rules") if kind is not None else self.by_neighbours(text)

    def by_neighbours(self, text: str) -> Sizing:
        """The labelled examples' verdict (an embedding: milliseconds); chat when there is no embedder."""
        if self._vectors is None or self.embedder is None:
            return Sizing("chat", "default")
        return Sizing(self.nearest(self.embedder.embed([text])[0]), "neighbours")

    def nearest(self, vector: Any, leave_out: int | None = None) -> str:
        """The majority kind of the nearest labelled examples (`leave_out`: one to skip, for evaluation)."""
        assert self._vectors is not None
        similarity = self._vectors @ vector
        if leave_out is not None:
            similarity[leave_out] = -2.0
        nearest = similarity.argsort()[::-1][:NEIGHBOURS]
        votes = Counter(self._labelled[i][1] for i in nearest)
        return votes.most_common(1)[0][0]


class TaskRouter:
    """The sizing alias: each request's kind, its tier, and the x-firsttoken-size header that says why."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings  # config.TaskSizing
        self.sizer = Sizer()

    def load_neighbours(self) -> None:
        """The local embedding model and the examples' vectors (a fraction of a second; off the loop)."""
        from firsttoken.cache.embed import load_embedder

        self.sizer = Sizer(load_embedder())

    async def decide(self, headers: Any, body: dict[str, Any]) -> tuple[str, bytes]:
        """(tier, x-firsttoken-size)."""
        if any(name == b"x-firsttoken-size" and value.strip().lower() == b"off" for name, value in headers):
            return self.settings.default, b"off; tier=" + self.settings.default.encode()
        text = last_user_text(body)
        kind = by_rules(text)
        if kind is not None:
            decided = Sizing(kind, "rules")
        elif self.sizer.embedder is not None:
            decided = await asyncio.to_thread(self.sizer.by_neighbours, text)  # the embedding lets go of the GIL
        else:
            decided = Sizing("chat", "default")
        tier = self.settings.kinds.get(decided.kind, self.settings.default)
        return tier, f"{decided.kind}; tier={tier}; by={decided.by}".encode()


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""
