"""Prompts whose answers are kept but that were never embedded: nobody has yet asked anything else in
their context.

Most contexts are asked once (an agent's every turn carries a new history), so a prompt's vector is
computed only when a second request in its context looks it up, in the same model call as that
request's own. Until then a prompt costs its text here, in memory, bounded (the oldest go first; their
answers stay in the store for exact hits), and a record without a vector in the store, so that a
restarted gateway, and every gateway sharing the store, knows it too. The answer is read back from the
store when the prompt is embedded: one purged or evicted meanwhile stays gone.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

MAX_CHARS = 32 * 1024 * 1024  # of texts held, in all


@dataclass(frozen=True, slots=True)
class Unembedded:
    key: str  # the answer's exact key
    scope: str
    text: str


class UnembeddedPrompts:
    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self.max_chars = max_chars
        self._prompts: OrderedDict[str, Unembedded] = OrderedDict()  # oldest first
        self._scopes: dict[str, dict[str, None]] = {}  # scope → its prompts' keys, oldest first
        self._chars = 0

    def __len__(self) -> int:
        return len(self._prompts)

    def __contains__(self, key: str) -> bool:
        return key in self._prompts

    def holds(self, scope: str) -> bool:
        return scope in self._scopes

    def add(self, prompt: Unembedded) -> None:
        self.discard(prompt.key)
        self._prompts[prompt.key] = prompt
        self._scopes.setdefault(prompt.scope, {})[prompt.key] = None
        self._chars += len(prompt.text)
        while self._chars > self.max_chars and self._prompts:  # the oldest forgotten: exact hits only
            self.discard(next(iter(self._prompts)))

    def newest(self, scope: str, most: int) -> list[Unembedded]:
        """The scope's newest prompts, newest first, at most `most`; still held (a lookup that embeds one
        discards it)."""
        keys = self._scopes.get(scope, {})
        return [self._prompts[key] for key in itertools.islice(reversed(keys), most)]

    def discard(self, key: str) -> None:
        if key in self._prompts:
            self._pop(key)

    def _pop(self, key: str) -> Unembedded:
        prompt = self._prompts.pop(key)
        keys = self._scopes[prompt.scope]
        del keys[key]
        if not keys:
            del self._scopes[prompt.scope]
        self._chars -= len(prompt.text)
        return prompt
