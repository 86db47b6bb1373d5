"""The edge cache's policy: which requests may be answered from it and which answers may go into it.

Per request, the standard `Cache-Control` request header is honoured: `no-cache` asks the upstream
but keeps its answer, `no-store` may be answered from the cache but keeps nothing. `x-firsttoken-cache`
says it shorter: `off` (neither), `refresh` (as no-cache), `force` (both, even for a model whose
policy turns the cache off). Per model (an alias, or `upstream/model`), the config sets the TTL, 0 for
no caching. Answers are only kept when they finished cleanly (the forwarders decide that), are complete
in their wire format (answers.py), and the upstream did not mark them `no-store` or `private`.

A cache must never make a request fail: a stored answer that cannot be replayed in the shape asked for is
dropped, counted, and the request goes upstream as a miss.

A prompt asked again in the same words but for a greeting, a courtesy or its closing punctuation (a near
copy: near_copies.py) is found by a hash, before the request leaves; a long one with a few words changed (a
small edit: small_edits.py) is judged by what changed, in the racing lookup below, in a millisecond or
two for a filler and a few dozen tokens' model call otherwise; one longer than the model reads is judged
that way only, and never embedded. A miss never waits for the semantic
lookup longer than its head start (`semantic_wait_ms`). A prompt is
embedded only where a stored one could match it: a context nobody has had before, or a request that may
not be served from the cache, costs no embedding at all, and a kept prompt is embedded when the next
request in its context looks it up (unembedded.py). A lookup still running when the head start has passed
races the upstream (`Lookup.racing`): a hit found before the upstream's first byte answers the client,
and the upstream request is cancelled, within a budget (`race_budget`) like the hedges'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from firsttoken.cache.encoder import Encoder, InlineEncoder
from firsttoken.cache.entry import Entry, Kind, PromptRecord
from firsttoken.cache.key import Keys, exact_key, request_keys
from firsttoken.cache.near_copies import NearCopies
from firsttoken.cache.redis_store import RedisStore
from firsttoken.cache.replay import ReplayError, replay
from firsttoken.cache.small_edits import Edit, SmallEdits
from firsttoken.cache.stores import MemoryStore, SqliteStore, Store
from firsttoken.cache.unembedded import Unembedded, UnembeddedPrompts
from firsttoken.config import Cache
from firsttoken.errors import bad_request
from firsttoken.routing.budget import Budget

if TYPE_CHECKING:  # loaded only when semantic caching is on (onnxruntime takes a moment to import)
    from firsttoken.cache.semantic import SemanticIndex

log = logging.getLogger("firsttoken.cache")

_OPT = b"x-firsttoken-cache"
# The longest a racing lookup may take: a hit found later than an upstream's first byte answers nothing.
RACE_LIMIT_S = 2.0
STORED_PER_LOOKUP = 16  # kept prompts a lookup embeds with its own, at most (unembedded.py)


@dataclass(slots=True)
class Lookup:
    """What the cache says of one request: the answer it has, and whether a fresh one may be kept."""

    key: str
    hit: Entry | None
    hit_key: str | None
    read: bool  # may be answered by a stored answer, or by an identical request in flight
    keep: bool
    tenant: str
    ttl: float
    similarity: float | None = None  # a semantic hit's
    prompt: Prompt | None = None  # the request's last user message, when semantic caching is on
    # The semantic lookup, to race the upstream: started once the request is on its way (or still running
    # after its head start). None when it was decided before the request left, or never ran.
    racing: Callable[[], Awaitable[None]] | None = None


@dataclass(slots=True)
class Prompt:
    scope: str  # everything in the request but the last user message (tenant, targets, context, parameters)
    text: str
    vector: Any = None  # computed for the lookup when its scope holds prompts; else when the next one does


class EdgeCache:
    def __init__(self, settings: Cache) -> None:
        self.settings = settings
        self.store = open_store(settings)
        self.semantic: SemanticIndex | None = None  # loaded by start(), when configured
        # Used along with the semantic index: kept prompts asked again with (almost) nothing changed.
        self.near = NearCopies(settings.max_prompts)
        self.edits = SmallEdits(settings.max_prompts)
        self.near_hits = self.edit_hits = 0
        self.encoder: Encoder | InlineEncoder | None = None
        self._following: asyncio.Task[None] | None = None
        self.unembedded = UnembeddedPrompts()
        # Earned per lookup, spent per win; full at start: a win saves its answer's whole cost for its prompt's,
        # so the budget is against a flood of cancellations, not against the first requests' hits.
        self.races = Budget(settings.race_budget, reserve=5.0, full=True)
        self.not_kept: Counter[str] = Counter()  # answers not kept, by why (incomplete, marked no-store)
        self.dropped = 0  # stored answers that could not be replayed
        self.embedded_stored = 0  # kept prompts embedded when a later lookup in their context needed them
        self.raced: Counter[str] = Counter()  # lookups that raced the upstream, by how it ended

    async def start(self) -> None:
        """Load the embedding model (a fraction of a second) and the prompts the store kept, off the loop; then
        follow what other gateways add, where the store is shared."""
        if not self.settings.semantic:
            return
        try:
            index = await asyncio.to_thread(self._load_semantic)
        except (RuntimeError, OSError, ImportError) as exc:  # not a model, or not one that loads: exact caching goes on
            log.warning("semantic caching is off: %s", exc)
            return
        prompts = await self.store.prompts(time.time())
        await asyncio.to_thread(self._restore, index, prompts)
        encoder = (InlineEncoder(index.vectors) if getattr(index.embedder, "inline", False)
                   else Encoder(index.vectors, max(self.settings.semantic_wait_ms / 1000, RACE_LIMIT_S)))
        self._hold([Unembedded(p.ref, p.scope, p.text) for p in prompts
                    if not p.vector and p.ref not in index and _read_whole(encoder, p.text)])
        await encoder.warm()  # before the gateway says it is ready
        self.encoder, self.semantic = encoder, index
        follow = getattr(self.store, "follow", None)
        if follow is not None:
            self._following = asyncio.get_running_loop().create_task(self._follow(index, follow()))

    def _restore(self, index: SemanticIndex, prompts: list[PromptRecord]) -> None:
        """What the store kept, known again: off the loop (100 000 long prompts' sketches take seconds), and
        before any lookup can read what it fills."""
        index.restore([p for p in prompts if p.vector])
        for prompt in prompts:
            self._known(prompt.scope, prompt.text, prompt.ref)

    async def _follow(self, index: SemanticIndex, prompts: AsyncIterator[PromptRecord]) -> None:
        async for prompt in prompts:
            if prompt.ref in index:  # this gateway's own are in already
                continue
            self._known(prompt.scope, prompt.text, prompt.ref)
            if prompt.vector:  # embedded by whichever gateway looked it up first
                self.unembedded.discard(prompt.ref)
                index.restore([prompt])
            elif self.encoder is not None and _read_whole(self.encoder, prompt.text):
                self.unembedded.add(Unembedded(prompt.ref, prompt.scope, prompt.text))

    def _load_semantic(self) -> SemanticIndex:
        from firsttoken.cache.embed import load_embedder
        from firsttoken.cache.semantic import SemanticIndex

        embedder = load_embedder(self.settings.embedding)
        return SemanticIndex(embedder, self.settings.similarity, max_prompts=self.settings.max_prompts)

    async def lookup(self, headers: Sequence[tuple[bytes, bytes]], tenant: str, model: str, targets: Sequence[str],
                     body: dict[str, Any], keyed: dict[str, Any] | None = None,
                     first_token_s: float | None = None) -> Lookup | None:
        """None when this request neither reads nor writes the cache. `body` is the request in chat's form
        (its prompt, for the semantic cache); `keyed`, when the client spoke another format, what shapes the
        answer in that format, its name under "format" (formats/client.py): answers are not shared across
        formats. `first_token_s`: when the upstream's answer usually starts reaching the client (None: not
        measured yet); a semantic lookup that would end later is not started (it could not win its race)."""
        read, write, forced = _request_policy(headers)
        ttl = self.settings.models.get(model, self.settings.ttl)
        if not (read or write) or (ttl <= 0 and not forced):
            return None
        ttl = ttl if ttl > 0 else self.settings.ttl
        owner = "*" if self.settings.shared else tenant
        keys = self._keys(owner, targets, body, keyed)
        hit = await self.store.get(keys.exact, time.time()) if read else None
        lookup = Lookup(keys.exact, hit, keys.exact if hit is not None else None, read, write, owner, ttl)
        if keys.scope is not None and keys.text is not None and self.semantic is not None:
            # The embedding model is part of the scope: vectors of two models never meet, in a store they share.
            lookup.prompt = Prompt(f"{self.settings.embedding}:{keys.scope}", keys.text)
            if hit is None and read:
                await self._near_copy(lookup, lookup.prompt)
            if lookup.hit is None and read:
                await self._look(lookup, lookup.prompt, first_token_s)
        return lookup

    async def _near_copy(self, lookup: Lookup, prompt: Prompt) -> None:
        """The answer kept for a near copy of the prompt."""
        ref = self.near.find(prompt.scope, prompt.text)
        if ref is None or ref == lookup.key:  # its own words: the exact lookup found it gone
            return
        entry = await self.store.get(ref, time.time())
        if entry is None:  # evicted or expired since
            self._forget(ref)
        else:
            lookup.hit, lookup.hit_key, lookup.similarity = entry, ref, 1.0
            self.near_hits += 1

    def _keys(self, owner: str, targets: Sequence[str], body: dict[str, Any], keyed: dict[str, Any] | None) -> Keys:
        """The exact key, and for the semantic cache the context's scope and the text to embed: one pass over
        the request where its keyed form ends with the user's text (chat's, Anthropic's)."""
        if self.semantic is None:
            return Keys(exact_key(owner, targets, body if keyed is None else keyed))
        if keyed is None:
            return request_keys(owner, targets, body)
        if "native" not in keyed:
            return request_keys(owner, targets, keyed)
        # Responses' keyed form holds its input twice (as chat messages, and as what a native upstream is
        # sent), so the text is in its context too: its scope is its chat form's, in its format.
        scoped = request_keys(owner, targets, {**body, "format": keyed.get("format")})
        return Keys(exact_key(owner, targets, keyed), scoped.scope, scoped.text)

    async def _look(self, lookup: Lookup, prompt: Prompt, first_token_s: float | None) -> None:
        """The semantic lookup, for as long as its head start; then, still running, it races the upstream. A
        lookup that could end neither within its head start nor before the upstream's usual first token is
        not started: it could not win, and under load a worker busy with such lookups takes the CPU that
        the requests need (an upstream that answers within a millisecond is never raced at all). None is
        looked for where no kept prompt of its context could match it."""
        assert self.semantic is not None and self.encoder is not None
        edited = self.edits.holds(prompt.scope, prompt.text)  # it may be judged without the full model call
        if not (edited or self.semantic.holds(prompt.scope) or self.unembedded.holds(prompt.scope)):
            return
        self.races.earn()
        head_start = self.settings.semantic_wait_ms / 1000
        within_s = max(head_start, RACE_LIMIT_S if first_token_s is None else min(RACE_LIMIT_S, first_token_s))
        whole = _read_whole(self.encoder, prompt.text)
        if not edited and not (whole and self.encoder.fits([prompt.text], within_s)):  # decided now: nothing taken
            return
        if head_start <= 0 and not isinstance(self.encoder, InlineEncoder):
            lookup.racing = lambda: self._semantic(lookup, prompt, within_s)
            return
        looking = asyncio.ensure_future(self._semantic(lookup, prompt, within_s))
        if not looking.done():
            await asyncio.wait((looking,), timeout=head_start)
        if not looking.done():
            lookup.racing = lambda: looking

    async def _semantic(self, lookup: Lookup, prompt: Prompt, within_s: float | None = None) -> None:
        """The semantic lookup. Never raises (but when cancelled): a broken lookup is a miss."""
        try:
            await self._paraphrase(lookup, prompt, within_s)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug, a store that failed: this request goes upstream as a miss
            log.exception("the semantic lookup failed")
            lookup.hit = lookup.hit_key = lookup.similarity = None

    async def _paraphrase(self, lookup: Lookup, prompt: Prompt, within_s: float | None) -> None:
        """A paraphrase's stored answer, when the guards agree: a small edit of a kept long prompt, judged by
        what changed; else, for a prompt the model reads whole, the nearest in the index. In a scope the
        index does not hold yet, the prompts kept without a vector are embedded in the same model call as
        this one's."""
        assert self.semantic is not None and self.encoder is not None
        edit = self.edits.find(prompt.scope, prompt.text)
        if edit is not None and await self._small_edit(lookup, edit, within_s) is not None:
            return  # decided by what changed
        if not _read_whole(self.encoder, prompt.text):  # the model would read its start only: no judge of it
            return
        stored = self._along(prompt, within_s)
        try:
            vectors = await self.encoder.encode([prompt.text, *(p.text for p in stored)], within_s)
        except asyncio.CancelledError:
            self._hold(stored)
            raise
        except Exception:  # the model failed: the prompts wait for the next lookup, this request goes upstream
            log.exception("the embedding model failed")
            self._hold(stored)
            return
        if vectors is None:  # the encoder is too far behind: a miss now beats a hit later (counted)
            self._hold(stored)
            return
        now = time.time()
        for waiting, vector in zip(stored, vectors[1:], strict=True):
            answer = await self.store.get(waiting.key, now)
            if answer is not None:  # not purged, evicted or expired meanwhile
                self._index(waiting.key, answer, waiting.scope, waiting.text, vector)
        self.embedded_stored += len(stored)
        prompt.vector = vectors[0]
        if lookup.key in self.unembedded:  # its answer was kept while the lookup ran (it lost its race)
            self.unembedded.discard(lookup.key)
            answer = await self.store.get(lookup.key, now)
            if answer is not None:
                self._index(lookup.key, answer, prompt.scope, prompt.text, prompt.vector)
        found = self.semantic.find(prompt.scope, prompt.text, prompt.vector).match
        if found is None:
            return
        entry = await self.store.get(found.ref, time.time())
        if entry is None:  # evicted or expired since: forget the prompt too
            self._forget(found.ref)
            return
        lookup.hit, lookup.hit_key, lookup.similarity = entry, found.ref, found.similarity

    async def _small_edit(self, lookup: Lookup, edit: Edit, within_s: float | None) -> bool | None:
        """The kept prompt's answer, when every change from it passes the guards and, unless only fillers
        changed, the model finds each change's window as near as the threshold asks of a paraphrase. False
        when a guard refuses a change (a different question: the full lookup would meet the same prompt);
        None when the model finds a window farther (a paraphrase in other words: the full lookup judges it)."""
        assert self.semantic is not None and self.encoder is not None
        if edit.refused():
            return False
        similarity = 1.0
        if not edit.fillers_only:
            vectors = await self.encoder.encode(edit.texts(), within_s)
            if vectors is None:
                return False  # the model is too far behind for the windows: for the whole prompt too
            similarity = edit.similarity(vectors)
            if similarity < self.semantic.threshold:
                return None
        entry = await self.store.get(edit.ref, time.time())
        if entry is None:  # evicted or expired since
            self._forget(edit.ref)
            return False
        lookup.hit, lookup.hit_key, lookup.similarity = entry, edit.ref, similarity
        self.edit_hits += 1
        return True

    def _along(self, prompt: Prompt, within_s: float | None) -> list[Unembedded]:
        """The kept prompts of `prompt`'s scope still without a vector that go in its lookup's model call:
        the newest first, at most STORED_PER_LOOKUP, and only as many as leave the lookup expected to end
        within `within_s` (the rest wait for the next lookup in the scope). In a new scope they are the
        only prompts this one can match; in one that piled them up while the model was too busy (under
        load, lookups are skipped), they are embedded a few at a time once it is not."""
        assert self.encoder is not None
        along: list[Unembedded] = []
        texts = [prompt.text]
        for waiting in self.unembedded.newest(prompt.scope, STORED_PER_LOOKUP):
            texts.append(waiting.text)
            if within_s is not None and self.encoder.expected_wait_s(texts) > within_s:
                break
            along.append(waiting)
            self.unembedded.discard(waiting.key)  # given back (_hold) if it cannot be embedded
        return along

    def _hold(self, prompts: list[Unembedded]) -> None:
        for waiting in prompts:
            self.unembedded.add(waiting)

    def won_race(self, lookup: Lookup) -> bool:
        """Whether the racing lookup's hit answers the request, its upstream request cancelled: only within the
        race budget. Called when the lookup ends before the upstream's first byte."""
        if lookup.hit is None:
            self.raced["missed"] += 1
            return False
        if not self.races.spend():
            self.raced["over_budget"] += 1
            lookup.hit = lookup.hit_key = lookup.similarity = None
            return False
        self.raced["won"] += 1
        return True

    def lost_race(self) -> None:
        """The upstream's first byte came first: the lookup goes on (its vectors are kept for the next one)."""
        self.raced["lost"] += 1

    async def replay(self, lookup: Lookup, stream: bool, include_usage: bool) -> bytes | None:
        """The hit in the shape asked for; None when it cannot be replayed: then it is dropped (the request
        goes upstream, and a fresh answer takes its place)."""
        assert lookup.hit is not None and lookup.hit_key is not None
        try:
            return replay(lookup.hit, stream, include_usage)
        except ReplayError as exc:
            self.dropped += 1
            log.warning("dropped a cached answer: %s", exc)
            self._forget(lookup.hit_key)
            await self.store.delete(lookup.hit_key)
            lookup.hit = lookup.hit_key = lookup.similarity = None
            return None

    def not_keeping(self, why: str) -> None:
        """An answer that will not be kept, counted by why for the metrics (without the quoted detail that
        some reasons end with, so the labels stay few)."""
        self.not_kept[why.partition(" (")[0]] += 1

    def keep(self, lookup: Lookup, kind: Kind, body: bytes, route: str,
             upstream_headers: Any = None) -> None:
        """A clean answer from the upstream, unless it asked not to be stored."""
        if not lookup.keep:
            return
        if upstream_headers is not None:
            control = upstream_headers.get("Cache-Control", "").lower()
            if "no-store" in control or "private" in control:
                self.not_keeping("marked no-store")
                return
        now = time.time()
        entry = Entry(kind, body, lookup.tenant, route, now, now + lookup.ttl)
        prompt = lookup.prompt
        if self.encoder is None or prompt is None:
            self.store.put(lookup.key, entry)
            return
        self._known(prompt.scope, prompt.text, lookup.key)
        if prompt.vector is not None:
            self._index(lookup.key, entry, prompt.scope, prompt.text, prompt.vector)
            return
        # Kept without a vector (in the store too: after a restart, and by every gateway sharing it, the
        # prompt is known), embedded when a lookup in its context first needs it; never, when it is longer
        # than the model reads (small edits of it are found without).
        self.store.put(lookup.key, entry, PromptRecord(lookup.key, prompt.scope, prompt.text, b"", entry.expires))
        if _read_whole(self.encoder, prompt.text):
            self.unembedded.add(Unembedded(lookup.key, prompt.scope, prompt.text))

    def _known(self, scope: str, text: str, ref: str) -> None:
        """A kept prompt, for the lookups that need no embedding of it."""
        self.near.add(scope, text, ref)
        self.edits.add(scope, text, ref)

    def _forget(self, ref: str) -> None:
        """A prompt whose answer is gone."""
        self.near.remove(ref)
        self.edits.remove(ref)
        if self.semantic is not None:
            self.semantic.remove(ref)

    def _index(self, key: str, entry: Entry, scope: str, text: str, vector: Any) -> None:
        """The answer stored with its prompt, which the semantic index now knows."""
        assert self.semantic is not None
        self.semantic.add(scope, text, key, vector)
        record = PromptRecord(key, scope, text, vector.tobytes(), entry.expires)  # float32 (SemanticIndex.vectors)
        self.store.put(key, entry, record)

    async def close(self) -> None:
        if self.encoder is not None:
            self.encoder.close()
        if self._following is not None:
            self._following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._following
        await self.store.close()


def _read_whole(encoder: Encoder | InlineEncoder, text: str) -> bool:
    """Whether the embedding model reads the whole of a prompt: a longer one is judged only as a small edit
    of a kept one (small_edits.py), since its vector would say nothing of what follows its start."""
    return encoder.reads_chars is None or len(text) <= encoder.reads_chars


def open_store(settings: Cache) -> Store:
    """The store the config names (not `none`: no store at all)."""
    if settings.backend == "memory":
        return MemoryStore(settings.max_bytes)
    if settings.backend == "redis":
        assert settings.url is not None  # the config requires it
        return RedisStore(settings.url, settings.max_bytes, settings.prefix, settings.max_prompts)
    return SqliteStore(settings.path, settings.max_bytes)


def _request_policy(headers: Sequence[tuple[bytes, bytes]]) -> tuple[bool, bool, bool]:
    """(read, write, forced) from the request's headers."""
    read = write = True
    forced = False
    for name, value in headers:
        if name == b"cache-control":
            directives = {d.strip() for d in value.lower().split(b",")}
            if b"no-cache" in directives:
                read = False
            if b"no-store" in directives:
                write = False
        elif name == _OPT:
            choice = value.strip().lower()
            if choice == b"off":
                read = write = False
            elif choice == b"refresh":
                read = False
            elif choice == b"force":
                forced = True
            else:
                raise bad_request(f"x-firsttoken-cache: {value.decode(errors='replace')!r} is not one of off, "
                                  f"refresh, force.", param="x-firsttoken-cache", code="invalid_header")
    return read, write, forced
