"""Tenants are isolated, as a property: whatever two client keys ask, in whichever order, on whichever route,
streamed or not, alone or at the same moment, one is never answered from the other's cache (exactly, by
paraphrase, or by joining its request in flight), never continues the other's kept response, and never sees
the other's journeys. The gateway runs as shipped: the exact and the semantic cache on (every lookup waiting
for the embedding model, where a busy machine would skip some)."""

from __future__ import annotations

import itertools
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ADMIN_KEY, CLIENT_KEY, OTHER_CLIENT_KEY
from firsttoken.cache.outcome import CacheOutcome
from support.gateway_process import GatewayProcess
from support.openai_upstream import UPSTREAM_KEY, UpstreamThread
from support.waiting import wait_until

KEYS = {"app": CLIENT_KEY, "other": OTHER_CLIENT_KEY}
ROUTES = ("chat", "messages", "responses")
# Subjects far apart in meaning, so that no two are one question to the semantic cache, taken in turn (and
# again once all were taken: the ledger remembers who asked what on which route, across examples).
SUBJECTS = itertools.cycle([
    "the causes of the French Revolution", "how volcanoes erupt", "knitting a wool scarf", "house-training a puppy",
    "filing income taxes as a freelancer", "the rules of cricket", "brewing pour-over coffee", "photosynthesis",
    "changing a flat bicycle tyre", "the plot of Hamlet", "compound interest", "growing tomatoes on a balcony",
    "how vaccines train the immune system", "writing a cover letter", "the life cycle of stars",
    "sourdough starters", "the causes of inflation", "tuning a guitar", "how blockchains reach consensus",
    "the migration of monarch butterflies", "treating a minor burn", "the history of the Silk Road",
    "learning to swim as an adult", "how a jet engine works", "the symptoms of dehydration", "origami cranes",
    "negotiating a salary", "the geography of Patagonia", "how tides work", "caring for succulents",
    "the Pythagorean theorem", "recycling plastics", "public speaking nerves", "the Roman aqueducts",
    "making kimchi", "how credit scores are computed", "the water cycle", "training for a marathon",
    "the architecture of Gothic cathedrals", "removing red wine stains", "how noise-cancelling headphones work",
    "the rules of chess castling", "planning a wedding budget", "how bees make honey", "jazz improvisation",
    "preventing rust on tools", "the Great Barrier Reef", "meditation for beginners", "how glaciers move",
    "baking macarons", "the electoral college", "how solar panels make electricity", "ancient Egyptian pyramids",
    "fixing a leaking tap", "the basics of watercolour painting", "how earthquakes are measured",
    "choosing running shoes", "the history of jazz in New Orleans", "keeping backyard chickens",
    "how the stock market works", "the northern lights", "writing a haiku", "how refrigerators keep cold",
    "the Apollo 11 landing", "composting kitchen scraps", "the immune response to allergies",
    "how submarines dive", "pruning rose bushes", "the rules of basketball", "how 3D printers work",
])
PHRASINGS = ("Explain {} to me.", "Could you give me an explanation of {}?")
# The paraphrase control's own, one a route: asked by nothing else, however many subjects the property took.
PARAPHRASED = dict(zip(ROUTES, ["how lighthouses guide ships at night", "the invention of the printing press",
                                "how hot-air balloons fly"], strict=True))
# The upstream of `held`: three seconds for a request sent once the upstream has the first to join it, many
# times what a busy machine takes to send one (a whole answer says nothing while it waits: no gate to hold).
SLOW_MODEL = "sleep-3000"


@dataclass
class Ledger:
    """How often each tenant has asked (per route, by subject), made (request ids) and kept (response ids)."""
    asked: defaultdict[tuple[str, str], Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    requests: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    responses: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)


LEDGER = Ledger()
OUTCOMES: Counter[str] = Counter()  # what the property met, to show it was not vacuous


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    settings_ = {"upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                 "models": {"chat": ["fake/sleep-40"],  # slow enough for requests of a group to meet in flight
                            "held": [f"fake/{SLOW_MODEL}"]},
                 # A lookup the encoder is too busy for is skipped (a miss): on a busy machine, paraphrases
                 # would then go untested. Here every lookup waits its turn.
                 "cache": {"semantic_wait_ms": 30_000},
                 "keys": [{"name": name, "key": key} for name, key in KEYS.items()], "admin_key": ADMIN_KEY}
    workdir: Path = tmp_path_factory.mktemp("tenants")
    with GatewayProcess(settings_, workdir) as process:
        yield process


def ask(url: str, tenant: str, route: str, subject: str, phrasing: int, stream: bool, model: str = "chat") -> str:
    """One request; records it, and checks that an answer from the cache follows this tenant's own ask."""
    prompt = PHRASINGS[phrasing].format(subject)
    headers = {"authorization": f"Bearer {KEYS[tenant]}"}
    if route == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
    elif route == "messages":
        path, body = "/v1/messages", {"max_tokens": 64, "messages": [{"role": "user", "content": prompt}]}
    else:
        path, body = "/v1/responses", {"input": prompt}
    with LEDGER.lock:
        LEDGER.asked[(tenant, route)][subject] += 1
    response = httpx.post(url + path, headers=headers, timeout=30, json={"model": model, "stream": stream, **body})
    assert response.status_code == 200, response.text
    outcome, _ = CacheOutcome.read(response.headers.get("x-firsttoken-cache", ""))
    OUTCOMES[outcome.value] += 1
    if outcome.from_cache:
        # The answer is another ask's of this tenant: an earlier one, or one sent at the same moment that
        # reached the gateway first (this one then finds it in flight, or already stored).
        with LEDGER.lock:
            asks = LEDGER.asked[(tenant, route)][subject]
        assert asks >= 2, (tenant, route, prompt, outcome)
    with LEDGER.lock:
        LEDGER.requests[tenant].add(response.headers["x-request-id"])
        if route == "responses" and not stream:
            LEDGER.responses[tenant].append(response.json()["id"])
    return outcome.value


steps = st.lists(st.lists(st.tuples(st.sampled_from(sorted(KEYS)), st.sampled_from(ROUTES), st.integers(0, 2),
                                    st.integers(0, 1), st.booleans()), min_size=1, max_size=3),
                 min_size=2, max_size=5)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(groups=steps)
def test_no_tenant_is_answered_from_anothers_cache_responses_or_journeys(gateway: GatewayProcess,
                                                                        groups: list) -> None:
    subjects = [next(SUBJECTS) for _ in range(3)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        for group in groups:  # a group's requests go at the same moment
            list(pool.map(lambda step: ask(gateway.url, step[0], step[1], subjects[step[2]], step[3], step[4]),
                          group))
    for tenant, key in KEYS.items():
        other = next(t for t in KEYS if t != tenant)
        seen = {j["request_id"] for j in httpx.get(f"{gateway.url}/v1/journeys?limit=1000", timeout=10,
                                                    headers={"authorization": f"Bearer {key}"}).json()["data"]}
        assert not seen & LEDGER.requests[other], "a tenant saw another's journeys"
        assert seen <= LEDGER.requests[tenant]
        for response_id in LEDGER.responses[other][-2:]:
            continued = httpx.post(f"{gateway.url}/v1/responses", timeout=10,
                                   headers={"authorization": f"Bearer {key}"},
                                   json={"model": "chat", "input": "go on", "previous_response_id": response_id})
            assert continued.status_code == 404, continued.text  # another tenant's response is unknown here
            LEDGER.requests[tenant].add(continued.headers["x-request-id"])


def test_identical_requests_in_flight_are_joined_within_a_tenant_never_across(gateway: GatewayProcess,
                                                                             upstream: UpstreamThread) -> None:
    """The control for the property above: joining in flight does happen, and only within one tenant. On
    every route at once, a tenant's question is held upstream; once the upstream has them all, the same
    tenant asks again (joined) and so does the other (its own miss)."""
    subjects = {route: next(SUBJECTS) for route in ROUTES}

    def asked(tenant: str, route: str) -> str:
        return ask(gateway.url, tenant, route, subjects[route], 0, False, model="held")

    held = upstream.stats.by_model[SLOW_MODEL]
    with ThreadPoolExecutor(max_workers=3 * len(ROUTES)) as pool:
        first = [pool.submit(asked, "app", route) for route in ROUTES]
        wait_until(lambda: upstream.stats.by_model[SLOW_MODEL] - held >= len(ROUTES), "the first questions upstream")
        again = {route: pool.submit(asked, "app", route) for route in ROUTES}
        other = {route: pool.submit(asked, "other", route) for route in ROUTES}
        assert [f.result() for f in first] == [CacheOutcome.MISS.value] * len(ROUTES)
        for route in ROUTES:
            assert again[route].result() == CacheOutcome.JOINED.value, route
            assert other[route].result() == CacheOutcome.MISS.value, route


def test_a_paraphrase_is_answered_within_a_tenant_never_across(gateway: GatewayProcess) -> None:
    """The control for paraphrases: a tenant's rephrased question is answered from its own earlier one, and
    the other tenant's, asked between them, is not."""
    for route, subject in PARAPHRASED.items():
        assert ask(gateway.url, "app", route, subject, 0, False) == CacheOutcome.MISS.value
        assert ask(gateway.url, "other", route, subject, 1, False) == CacheOutcome.MISS.value
        assert ask(gateway.url, "app", route, subject, 1, False) == CacheOutcome.SEMANTIC_HIT.value, route


def test_the_property_met_every_way_of_answering_from_the_cache() -> None:
    """The tests above are worth something only if tenants were answered from their own cache meanwhile."""
    assert OUTCOMES["hit"] and OUTCOMES["semantic-hit"] and OUTCOMES["hit; joined"], OUTCOMES
