"""The guards refuse what only looks similar and let true paraphrases through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firsttoken.cache.guards import disagreements

NEAR_MISSES = [
    ("Convert 5 pounds to kilograms.", "Convert 5 kilograms to pounds.", "units"),
    ("Refund order 55120.", "Refund order 55102.", "numbers"),
    ("Is the museum open on Mondays?", "Is the museum closed on Mondays?", "opposites"),
    ("Is the museum open on Mondays?", "Is the museum not open on Mondays?", "negated"),
    ("Why does my build pass?", "Why doesn't my build pass?", "negated"),
    ("What is the capital of France?", "What is the capital of Germany?", "names"),
    ("Book a table for 4 people at 7pm.", "Book a table for four people at 8pm.", "numbers"),
    ("Give me three examples of prime numbers.", "Give me two examples of prime numbers.", "numbers"),
    ("Convert 100 USD to EUR.", "Convert 100 EUR to USD.", "units"),
    ("How long is the flight from Lagos to Nairobi?", "How long is the flight from Nairobi to Lagos?", "from/to"),
    ("List the planets in JSON.", "List the planets in a table.", "formats"),
    ("Translate 'good morning' into French.", "Translate 'good morning' into Spanish.", "languages"),
    ("Classify the sentiment: I loved this film.", "Classify the sentiment: I hated this film.", "text"),
    ("Extract the names from: Ada met Chinua in Enugu.", "Extract the names from: Ada met Wole in Ibadan.", "text"),
    ("What happened before the war?", "What happened after the war?", "opposites"),
    ("Email the report to ops@example.com", "Email the report to dev@example.com", "identifiers"),
    ("Reset the password of user AB1234.", "Reset the password of user AB1243.", "identifiers"),
    ("Summarise this in one sentence.", "Summarise this in three sentences.", "numbers"),
    ("¿Cuál es la capital de Kenia?", "Какая столица Кении?", "scripts"),
    ("Explain why bond prices fall when interest rates rise", "Explain why bond prices rise when interest rates fall",
     "trade places"),
    ("What's the speed limit for trucks on German highways?", "What's the speed limit for cars on German highways?",
     "one detail"),
    ("Which programming language is this? fn main() {}", "Which programming language is this? func main() {}", "text"),
    ("How do I cook beans?", "How do I cook dried black beans in a pressure cooker without soaking them first, "
     "for a stew with smoked turkey?", "much more"),
    ("turn the wifi on on my samsung tv", "turn the wifi off on my samsung tv", "opposites: on / off"),
    ("How do I log in to the AWS CLI?", "How do I log out of the AWS CLI?", "opposites: in / out"),
    ("How do I mute a channel in Slack?", "How do I unmute a channel in Slack?", "opposites: mute / unmute"),
    ("upload a file to s3 with boto3", "download a file from s3 with boto3", "opposites: upload / download"),
    ("Show me hotels in Paris under 150 euros a night", "Show me hotels in Paris over 150 euros a night",
     "opposites: under / over"),
    ("How do I convert a string to an int in Go?", "How do I convert an int to a string in Go?", "trade places"),
    ("Convert this dict into a list of tuples", "Convert this list of tuples into a dict", "from/to"),
    ("Can my dog catch a cold from me?", "Can I catch a cold from my dog?", "from/to"),
    ("Send the payment reminder unless the invoice is paid", "Send the payment reminder if the invoice is paid",
     "negated"),
    ("Explain this command before I run it: `rm -rf ./build`", "Explain this command before I run it: "
     "`rm -rf /build`", "text"),
    ("What does this regex match: ^\\d{3}-\\d{4}$", "What does this regex match: ^\\d{3}-\\d{4}", "text"),
    ('Is this JSON valid? {"name": "Ana", "age": 31}', 'Is this JSON valid? {"name": "Ana", "age": 31,}', "text"),
]

# Written for this project as an adversarial set: 120 prompts one or two words away from a different
# question (numbers, negation, opposites, direction, entities, identifiers, format, language, payload,
# scope) and 64 true paraphrases of the same kinds.
ADVERSARIAL = json.loads((Path(__file__).parent / "data" / "near_misses.json").read_text())

# ("Convert 5 pounds to kilograms." / "How many kilograms are 5 pounds?" is refused: the units come in the
# other order, and word order is all a guard can read direction from. A refusal costs one trip upstream.)
PARAPHRASES = [
    ("How do I cook beans?", "What is the way to cook beans?"),
    ("What time does the museum open on Mondays?", "When does the museum open on Monday?"),
    ("Is the museum open on Mondays?", "Does the museum open on Mondays?"),
    ("Give me three examples of prime numbers.", "List 3 prime numbers as examples."),
    ("What is the capital of France?", "Which city is the capital of France?"),
    ("Classify the sentiment: I loved this film.", "Classify the sentiment:  i loved this film"),
    ("Tell me about PyTorch.", "PyTorch: tell me about it."),
    ("Which fruits don't have seeds?", "Which fruits lack seeds?"),
    ("How many languages are there? Over 100.", "How many languages are there? More than one hundred."),
    ("Write a SQL query for orders where shipped_at is not null", "SQL to select orders with a non-null shipped_at"),
    ("Is the parameter optional?", "Is the parameter not required?"),
    ("What's the difference between TCP and UDP?", "What's the difference between UDP and TCP?"),
    ("Is 16 GB of RAM enough for Android Studio?", "Is 16GB RAM enough for Android Studio?"),
    ("Calories in 100 g of cooked rice", "How many calories are in 100 grams of cooked rice?"),
    ("How do I send money to someone in Mexico from the US?", "How do I send money from the US to someone in Mexico?"),
    ("Send the reminder unless the invoice is already paid", "Don't send the reminder if the invoice is already paid"),
    ("What does this do? `find . -name '*.pyc' -delete`", "Explain what this does: `find . -name '*.pyc' -delete`"),
    ("How do I turn on dark mode in VS Code?", "How do I switch dark mode on in VS Code?"),
]


@pytest.mark.parametrize(("asked", "stored", "kind"), NEAR_MISSES)
def test_a_near_miss_is_refused_and_says_why(asked: str, stored: str, kind: str) -> None:
    found = disagreements(asked, stored)
    assert found, f"{asked!r} would be served {stored!r}'s answer"
    assert any(kind in reason for reason in found), found
    assert disagreements(stored, asked)  # both ways


@pytest.mark.parametrize(("asked", "stored"), PARAPHRASES)
def test_a_paraphrase_passes(asked: str, stored: str) -> None:
    assert disagreements(asked, stored) == []


@pytest.mark.parametrize("pair", ADVERSARIAL["near_misses"], ids=lambda p: f"{p['kind']}: {p['asked'][:40]}")
def test_every_adversarial_near_miss_is_refused(pair: dict[str, str]) -> None:
    assert disagreements(pair["asked"], pair["stored"]), f"{pair['asked']!r} would be served {pair['stored']!r}"


def test_most_adversarial_paraphrases_pass() -> None:
    """A refusal costs a trip upstream: the guards refuse a few paraphrases (a swapped synonym, the same
    quantity in other units), not many."""
    refused = [p for p in ADVERSARIAL["paraphrases"] if disagreements(p["asked"], p["stored"])]
    assert len(refused) <= 8, refused


def test_few_of_the_published_paraphrase_pairs_are_refused() -> None:
    """GPTCache's paraphrase set: a refusal there is a right hit lost, so the guards must stay rare on it
    (about 4 %: mostly a verb swapped for a synonym in an otherwise identical sentence, and counts that
    one side states and the other lists)."""
    pairs = json.loads((Path(__file__).parent / "data" / "gptcache_paraphrase_pairs.json").read_text())
    refused = [p for p in pairs if disagreements(p["similar"], p["origin"])]
    assert len(refused) <= 40, len(refused)
