"""A replica's prefix cache: the KV of prompt prefixes it computed, kept so that a request repeating a
prefix (an agent's system prompt, tools and history, turn after turn) skips their prefill.

As vLLM's automatic prefix caching: a prompt is cut into blocks of BLOCK tokens, each named by a hash
chained over the blocks before it, so a block matches only behind the same prefix; a request reuses
the run of leading blocks the replica holds, and the blocks it computed are kept after it, least
recently used first out, up to a bound in blocks. The last prompt token is always computed (its
logits sample the first answer token), so at most all but one token is skipped.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

from firsttoken.sim.engine import Sequence as Request

BLOCK = 16  # tokens per KV block (vLLM's default block size)


def block_hashes(tokens: Sequence[str], partial: bool = False) -> list[bytes]:
    """The chained hash of each full block of `tokens`, and of the part-block at the end with `partial`
    (a prefix marked for caching is kept whole, as Anthropic's cache reads it back to the token)."""
    hashes, previous = [], b""
    end = len(tokens) if partial else len(tokens) - BLOCK + 1
    for start in range(0, end, BLOCK):
        previous = hashlib.blake2b(previous + "\x00".join(tokens[start:start + BLOCK]).encode(),
                                   digest_size=16).digest()
        hashes.append(previous)
    return hashes


class PrefixCache:
    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def cached_tokens(self, blocks: list[bytes], prompt_tokens: int) -> int:
        """Tokens of a prompt (its blocks' hashes) whose prefill this replica can skip; the blocks found
        become the most recently used."""
        found = 0
        for block in blocks:
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            found += 1
        return min(found * BLOCK, max(prompt_tokens - 1, 0))

    def keep(self, blocks: list[bytes]) -> None:
        """The blocks a request computed, kept for the next (the oldest go past the bound)."""
        for block in blocks:
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def reuse(self, sequence: Request, blocks: list[bytes]) -> None:
        """What this replica holds of a request's prefix (its blocks' hashes) is not prefilled again; the
        blocks are kept for the next request."""
        sequence.cached = self.cached_tokens(blocks, sequence.prompt_tokens)
        sequence.prefilled = sequence.cached
        self.keep(blocks)

    def clear(self) -> None:
        """The model was unloaded: its GPU memory, and the KV kept in it, is gone."""
        self._blocks.clear()

    def __len__(self) -> int:
        return len(self._blocks)
