"""The region's prefix cache: a repeated prompt prefix skips its prefill on the replica that computed it, the
timing shows it, and the usage says so the way each provider does (OpenAI's cached_tokens, Anthropic's
cache_read_input_tokens and cache_creation_input_tokens under cache_control)."""

from __future__ import annotations

import anthropic
import openai
import pytest

from firsttoken.sim.prefix_cache import BLOCK, PrefixCache, block_hashes
from support.sim_region import region_on_loopback
from support.waiting import wait_until

MODEL = "llama-3.1-8b"
LONG = " ".join(f"rule{i} applies" for i in range(1500))  # 3 000 words of an agent's standing instructions


@pytest.fixture(scope="module")
def port():
    with region_on_loopback(models=[MODEL]) as (port, _region):
        yield port


def timing(headers) -> dict[str, float]:
    return {name.strip(): float(value) for name, value in
            (part.split(";dur=") for part in headers["server-timing"].split(","))}


def test_a_repeated_prefix_skips_its_prefill(port) -> None:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    turn = [{"role": "system", "content": LONG}, {"role": "user", "content": "First question?"}]
    first = client.chat.completions.with_raw_response.create(model=MODEL, messages=turn, max_tokens=5)
    cold = first.parse()
    assert cold.usage.prompt_tokens_details.cached_tokens == 0 and "cache-read" not in timing(first.headers)
    # The next turn repeats the whole conversation so far, then asks again: an agent's loop.
    turn += [{"role": "assistant", "content": cold.choices[0].message.content},
             {"role": "user", "content": "And the second?"}]
    second = client.chat.completions.with_raw_response.create(model=MODEL, messages=turn, max_tokens=5)
    warm = second.parse()
    cached = warm.usage.prompt_tokens_details.cached_tokens
    assert cached % BLOCK == 0 and cold.usage.prompt_tokens - BLOCK < cached <= cold.usage.prompt_tokens
    assert warm.usage.prompt_tokens > cold.usage.prompt_tokens
    cold_ms, warm_ms = timing(first.headers)["prefill"], timing(second.headers)["prefill"]
    assert warm_ms < cold_ms / 3  # only the new turn's tokens were prefilled
    assert timing(second.headers)["cache-read"] > 0.8 * cold_ms - warm_ms  # what it saved, on the roofline
    other = client.chat.completions.create(model=MODEL, max_tokens=5,
                                           messages=[{"role": "user", "content": "Unrelated " + LONG}])
    assert other.usage.prompt_tokens_details.cached_tokens == 0  # a prefix, not any shared text


def test_messages_cache_what_cache_control_marks(port) -> None:
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="k", max_retries=0)
    question = [{"role": "user", "content": "What applies?"}]
    standing = "Messages: " + LONG  # not the prefix the OpenAI test left on the replica
    unmarked = [client.messages.create(model=MODEL, max_tokens=5, system=standing + " plain",
                                        messages=question)
                for _ in range(2)]
    assert all(m.usage.cache_read_input_tokens == 0 and m.usage.cache_creation_input_tokens == 0 for m in unmarked)
    system = [{"type": "text", "text": standing, "cache_control": {"type": "ephemeral"}}]
    written = client.messages.create(model=MODEL, max_tokens=5, system=system, messages=question)
    read = client.messages.create(model=MODEL, max_tokens=5, system=system, messages=question)
    prefix = written.usage.cache_creation_input_tokens
    assert written.usage.cache_read_input_tokens == 0 and prefix > 3000
    assert read.usage.cache_read_input_tokens == prefix and read.usage.cache_creation_input_tokens == 0
    total = written.usage.input_tokens + prefix
    assert read.usage.input_tokens + read.usage.cache_read_input_tokens == total
    short = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    tiny = client.messages.create(model=MODEL, max_tokens=5, system=short, messages=question)
    assert tiny.usage.cache_creation_input_tokens == 0  # under Anthropic's 1 024-token minimum


def test_the_cache_is_bounded_and_least_recently_used_goes_first() -> None:
    cache = PrefixCache(capacity_blocks=4)
    a = block_hashes([f"a{i}" for i in range(2 * BLOCK)])
    b = block_hashes([f"b{i}" for i in range(2 * BLOCK)])
    cache.keep(a)
    cache.keep(b)
    assert cache.cached_tokens(a, 10 * BLOCK) == 2 * BLOCK  # and a is now the most recent
    cache.keep(block_hashes([f"c{i}" for i in range(2 * BLOCK)]))
    assert len(cache) == 4 and cache.cached_tokens(b, 10 * BLOCK) == 0 and cache.cached_tokens(a, 10 * BLOCK) > 0
    assert cache.cached_tokens(a, 2 * BLOCK) == 2 * BLOCK - 1  # the last prompt token is always computed


def test_an_unloaded_model_has_forgotten_its_prefixes() -> None:
    # scale to zero frees the GPU's memory, the KV of the prefixes with it: the next turn prefills them again
    with region_on_loopback(models=[MODEL], idle_unload=0.3, load_gb_s=1000) as (port, region):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        turn = [{"role": "system", "content": LONG}, {"role": "user", "content": "First question?"}]
        client.chat.completions.create(model=MODEL, messages=turn, max_tokens=2)
        again = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=2)
        assert again.usage.prompt_tokens_details.cached_tokens > 0  # loaded: held
        replica = region.replicas[MODEL][0]
        wait_until(lambda: not replica.loaded, "the model to unload, idle past idle_unload")
        after = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=2)
        assert after.usage.prompt_tokens_details.cached_tokens == 0
