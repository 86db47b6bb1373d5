"""What the edge cache did for one request, as one value from lookup to header, metric and verdict."""

from __future__ import annotations

from enum import Enum


class CacheOutcome(Enum):
    """Each outcome's `x-firsttoken-cache` word (docs/contracts.md), which is also its metric label."""

    BYPASS = "bypass"  # the request neither read nor wrote the cache
    MISS = "miss"  # it went upstream (and its answer may be kept)
    HIT = "hit"  # a stored answer to the same request
    SEMANTIC_HIT = "semantic-hit"  # a stored answer to a paraphrase; the header adds the similarity
    JOINED = "hit; joined"  # the answer of an identical request in flight

    from_cache: bool  # answered without this request crossing to the upstream

    def __init__(self, word: str) -> None:
        # An attribute, not a property: read several times a request, and the property's lookups took 0.4 µs.
        self.from_cache = word in ("hit", "semantic-hit", "hit; joined")

    @classmethod
    def read(cls, header: str) -> tuple[CacheOutcome, float | None]:
        """An `x-firsttoken-cache` header back into (outcome, similarity); BYPASS for one it does not know."""
        word, _, rest = header.strip().partition(";")
        if header.strip() == cls.JOINED.value:
            return cls.JOINED, None
        if word == cls.SEMANTIC_HIT.value:
            _, _, value = rest.partition("similarity=")
            try:
                return cls.SEMANTIC_HIT, float(value)
            except ValueError:
                return cls.SEMANTIC_HIT, None
        try:
            return cls(word), None
        except ValueError:
            return cls.BYPASS, None

    def header(self, similarity: float | None = None) -> bytes:
        if self is CacheOutcome.SEMANTIC_HIT and similarity is not None:
            return b"semantic-hit; similarity=%.3f" % similarity
        return _HEADERS[self]


_HEADERS = {outcome: outcome.value.encode() for outcome in CacheOutcome}  # made once, not per response
