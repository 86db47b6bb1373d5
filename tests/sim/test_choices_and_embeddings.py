"""`n` choices, GET /v1/models/{id} and /v1/embeddings from the simulated region, through the real openai SDK."""

from __future__ import annotations

import math

import openai
import pytest

from firsttoken.config import sim_settings
from support.sim_region import region_on_loopback

CHAT, ENCODER = "llama-3.2-1b", "bge-small-en-v1.5"


@pytest.fixture(scope="module")
def client():
    with region_on_loopback(models=[CHAT, ENCODER]) as (port, _region):
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)


def ask(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def test_n_choices_whole_and_streamed(client) -> None:
    messages = ask("Name the hops between Lagos and Virginia.")
    three = client.chat.completions.create(model=CHAT, max_tokens=400, n=3, messages=messages)
    assert [c.index for c in three.choices] == [0, 1, 2]
    contents = [c.message.content for c in three.choices]
    assert len(set(contents)) == 3  # three samples, not one answer three times
    one = client.chat.completions.create(model=CHAT, max_tokens=400, messages=messages)
    assert one.choices[0].message.content == contents[0]
    lengths = [len(c.message.content.split(" ")) for c in three.choices]
    assert three.usage.completion_tokens == sum(lengths) and three.usage.prompt_tokens == one.usage.prompt_tokens
    texts, finishes, usage = ["", "", ""], [None, None, None], None
    for chunk in client.chat.completions.create(model=CHAT, max_tokens=400, n=3, messages=messages, stream=True,
                                                stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            finishes[choice.index] = choice.finish_reason or finishes[choice.index]
    assert texts == contents and finishes == [c.finish_reason for c in three.choices]
    assert usage is not None and usage.completion_tokens == three.usage.completion_tokens
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=CHAT, n=129, messages=messages)
    assert bad.value.body["param"] == "n"


def test_a_model_by_its_id(client) -> None:
    assert client.models.retrieve(CHAT).id == CHAT
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-9")
    assert missing.value.body["code"] == "model_not_found"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_embeddings_are_unit_vectors_that_follow_shared_words(client) -> None:
    texts = ["the answer crossed the ocean on a cable", "the answer crossed the ocean by cable",
             "GPU memory bandwidth bounds decode"]
    vectors = [d.embedding for d in client.embeddings.create(model=ENCODER, input=texts).data]
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(math.isclose(cosine(v, v), 1.0, rel_tol=1e-5) for v in vectors)
    assert cosine(vectors[0], vectors[1]) > 0.7 > 0.3 > abs(cosine(vectors[0], vectors[2]))
    again = client.embeddings.create(model=ENCODER, input=texts[0], encoding_format="float").data[0].embedding
    assert again == pytest.approx(vectors[0], abs=1e-6)  # float32 on the wire by default, float64 asked
    short = client.embeddings.create(model=ENCODER, input=texts[0], dimensions=64).data[0].embedding
    assert len(short) == 64 and math.isclose(cosine(short, short), 1.0, rel_tol=1e-5)
    tokens = client.embeddings.create(model=ENCODER, input=[[1, 2, 3], [4, 5]])
    assert tokens.usage.prompt_tokens == 5 and len(tokens.data) == 2


def test_embeddings_take_an_encoders_time(client) -> None:
    """The forward pass is a prefill on the encoder's roofline: the region's ground truth says how long."""
    deployment = sim_settings({"models": [ENCODER]}).deployments[ENCODER]
    raw = client.embeddings.with_raw_response.create(model=ENCODER, input=" ".join(["word"] * 400))
    timing = dict(part.strip().split(";dur=") for part in raw.headers["server-timing"].split(","))
    assert float(timing["prefill"]) == pytest.approx(deployment.prefill_s(400) * 1000, rel=0.5, abs=2.0)


def test_embedding_errors_in_openai_format(client) -> None:
    with pytest.raises(openai.BadRequestError) as chat_model:
        client.embeddings.create(model=CHAT, input="x")
    assert chat_model.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as empty:
        client.embeddings.create(model=ENCODER, input="")
    assert empty.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError) as wide:
        client.embeddings.create(model=ENCODER, input="x", dimensions=999)
    assert wide.value.body["param"] == "dimensions"
    with pytest.raises(openai.BadRequestError) as long:
        client.embeddings.create(model=ENCODER, input=" ".join(["word"] * 600))  # the encoder reads 512
    assert long.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as encoder_chat:
        client.chat.completions.create(model=ENCODER, messages=ask("hi"))
    assert "embedding model" in encoder_chat.value.body["message"]
