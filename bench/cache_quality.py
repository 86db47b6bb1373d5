"""The semantic cache's quality: right hits, wrong hits and misses on GPTCache's paraphrase set (store
every `origin`, ask every `similar`), beside GPTCache's published table; and, on our own adversarial set
(tests/cache/data/near_misses.json and the guard tests' pairs), wrong hits (target: none) and how many
of its true paraphrases are still served.

    .venv/bin/python bench/cache_quality.py [--thresholds 0.80 0.85 0.90] [--embedding NAME]
                                            [--default-threshold 0.85]

Each threshold is run with similarity alone and with the guards. "Strict" counts only the paired origin
as right. "Adjusted" also counts a hit on an origin that is the same text as the paired one, or that a
reader judged to say the same thing: bench/data/gptcache_origin_pairs_labelled.json holds 91 pairs of
origins, each labelled same or different with a reason, by reading them without knowing which the cache
served (every origin that a lookup at 0.78 or above could serve in place of its pair, and 40 other close
pairs; one more, found by a later run, labelled the same way). A pair nobody labelled counts as wrong.
Every adjusted hit and every wrong hit at the default threshold is listed, so a reader can check them.
The default threshold (also the one the adversarial sets and the meaning classes are run at) belongs to the
embedding: another model's cosines sit on another scale, so `--embedding` usually comes with its own
`--default-threshold`. The labelled pairs were chosen among all-MiniLM-L6-v2's neighbours: another embedding
serves pairs nobody labelled, which count as wrong until someone reads them (the list at the end names them).
Run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "cache"))
from test_guards import ADVERSARIAL, NEAR_MISSES  # noqa: E402  (the pairs the tests hold the guards to)

from firsttoken.cache.embed import DEFAULT_MODEL, Embedder, load_embedder  # noqa: E402
from firsttoken.cache.key import exact_key, last_user_text  # noqa: E402
from firsttoken.cache.semantic import DEFAULT_THRESHOLD, SemanticIndex  # noqa: E402

PAIRS = ROOT.parent / "shared" / "data" / "gptcache_paraphrase_pairs.json"
PUBLISHED = {0.95: (425, 25, 549), 0.90: (804, 77, 118), 0.80: (904, 92, 3)}  # GPTCache's README, 1 000 queries
LABELLED = ROOT / "bench" / "data" / "gptcache_origin_pairs_labelled.json"
CLASSES = ROOT / "tests" / "cache" / "data" / "meaning_classes.json"

# Beyond the guard tests' pairs: the same question where only the context or the tenant differs, which the
# scope (not a guard) must keep apart.
SCOPED = [("tenant a", "tenant b", "What is our refund policy?"),
          ("system: you answer in French", "system: you answer in English", "What is the capital of Kenya?"),
          ("turns: user asked about Python", "turns: user asked about Rust", "How do I read a file?")]


def embed(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """In batches of texts of about one length (less padding), returned in the order given."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors = np.vstack([embedder.embed([texts[i] for i in order[k:k + 32]]) for k in range(0, len(order), 32)])
    return vectors[np.argsort(order)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.80, 0.85, 0.90])
    parser.add_argument("--embedding", default=DEFAULT_MODEL,
                        help=f"a name or directory load_embedder() takes (default {DEFAULT_MODEL})")
    parser.add_argument("--default-threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="the threshold the wrong hits are listed at and the adversarial sets and meaning "
                             f"classes are run at (default {DEFAULT_THRESHOLD}: the shipped model's)")
    args = parser.parse_args()
    default: float = args.default_threshold
    pairs = json.loads(PAIRS.read_text())
    origins, asked = [p["origin"] for p in pairs], [p["similar"] for p in pairs]
    started = time.perf_counter()
    embedder = load_embedder(args.embedding, threads=2)
    origin_vectors, asked_vectors = embed(embedder, origins), embed(embedder, asked)
    embedded_s = time.perf_counter() - started

    similar_origins = origin_vectors @ origin_vectors.T
    labels = {tuple(p["origins"]): p for p in json.loads(LABELLED.read_text())}
    unlabelled: set[tuple[int, int]] = set()

    def twin(served: int, paired: int) -> bool:
        """Whether the served origin says what the paired one says: the same text, or labelled the same."""
        if " ".join(origins[served].lower().split()) == " ".join(origins[paired].lower().split()):
            return True
        label = labels.get((min(served, paired), max(served, paired)))
        if label is None:
            unlabelled.add((served, paired))
        return label is not None and label["same"]

    rows, wrong_listed, listed = [], [], []
    for guarded in (False, True):
        for threshold in args.thresholds:
            index = SemanticIndex(embedder, threshold=threshold)
            if not guarded:  # similarity alone: a guard that never objects
                import firsttoken.cache.semantic as semantic
                semantic_disagreements, semantic.disagreements = semantic.disagreements, lambda a, b: []
            try:
                for i, vector in enumerate(origin_vectors):
                    index.add("bench", origins[i], str(i), vector)
                strict = adjusted = wrong = missed = 0
                for j, vector in enumerate(asked_vectors):
                    found = index.find("bench", asked[j], vector).match
                    if found is None:
                        missed += 1
                    elif int(found.ref) == j:
                        strict += 1
                        adjusted += 1
                    elif twin(int(found.ref), j):
                        adjusted += 1
                        if guarded and abs(threshold - default) < 1e-9:
                            listed.append((j, int(found.ref)))
                    else:
                        wrong += 1
                        if guarded and abs(threshold - default) < 1e-9:
                            wrong_listed.append((j, int(found.ref), found.similarity))
            finally:
                if not guarded:
                    semantic.disagreements = semantic_disagreements
            rows.append((threshold, guarded, strict, adjusted, len(pairs) - missed - adjusted, missed))

    index = SemanticIndex(embedder, threshold=default)
    near_misses = [(stored, asked_) for stored, asked_, _ in NEAR_MISSES]
    near_misses += [(p["stored"], p["asked"]) for p in ADVERSARIAL["near_misses"]]
    adversarial_wrong, unguarded_wrong = [], 0
    for n, (stored, question) in enumerate(near_misses):
        index.add("adversarial", stored, f"a{n}")
        found = index.find("adversarial", question)
        if found.match is not None:
            adversarial_wrong.append((question, found.match.text, found.match.similarity))
        if found.match is not None or found.refused:  # above the threshold: similarity alone would serve it
            unguarded_wrong += 1
        index.remove(f"a{n}")  # one stored prompt at a time: each question meets only its own near miss
    served = refused = 0
    for n, pair in enumerate(ADVERSARIAL["paraphrases"]):
        index.add("paraphrases", pair["stored"], f"p{n}")
        found = index.find("paraphrases", pair["asked"])
        served += found.match is not None
        refused += bool(found.refused)
        index.remove(f"p{n}")
    for n, (scope_a, scope_b, question) in enumerate(SCOPED):
        index.add(scope_a, question, f"s{n}")
        found = index.find(scope_b, question).match
        if found is not None:
            adversarial_wrong.append((f"[{scope_b}] {question}", f"[{scope_a}] {found.text}", found.similarity))

    print(f"machine: {platform.node()} · python {platform.python_version()} · {args.embedding} · "
          f"{len(pairs)} pairs · embedding {2 * len(pairs)} texts took {embedded_s:.1f} s")
    print()
    print("| threshold | guards | right (strict) | wrong (strict) | right (adjusted) | wrong (adjusted) | misses | "
          "GPTCache: right / wrong / misses |")
    print("|---|---|---|---|---|---|---|---|")
    for threshold, guarded, strict, adjusted, wrong, missed in rows:
        published = PUBLISHED.get(round(threshold, 2))
        theirs = " / ".join(map(str, published)) if published else "—"
        print(f"| {threshold:.2f} | {'yes' if guarded else 'no'} | {strict} | {len(pairs) - strict - missed} | "
              f"{adjusted} | {wrong} | {missed} | {theirs} |")
    print()
    print(f"Hits counted as right only when adjusted, with the guards at {default} ({len(listed)}): the "
          f"served origin against the paired one, and why they say the same")
    for j, i in listed:
        label = labels.get((min(i, j), max(i, j)))
        why = label["why"] if label else "the same text"
        print(f"- asked #{j}: served #{i} {origins[i][:80]!r} / paired {origins[j][:80]!r}: {why}")
    print()
    print(f"Wrong hits with the guards at {default} ({len(wrong_listed)}):")
    for j, i, similarity in wrong_listed:
        label = labels.get((min(i, j), max(i, j)))
        why = f"labelled different: {label['why']}" if label else "not labelled"
        print(f"- asked #{j} {asked[j][:70]!r} → served #{i} ({similarity:.3f}) {origins[i][:70]!r}; its own "
              f"origin {origins[j][:70]!r} ({similar_origins[i, j]:.3f} to the served one; {why})")
    if unlabelled:
        print(f"\nServed in place of their pair but not labelled (counted wrong): {sorted(unlabelled)}")
    print()
    print(f"Adversarial near misses ({len(near_misses)} pairs + {len(SCOPED)} where only the scope differs), wrong "
          f"hits at {default}: {len(adversarial_wrong)} with the guards and the scope; with similarity "
          f"alone: {unguarded_wrong} of {len(near_misses)}")
    print(f"Adversarial paraphrases ({len(ADVERSARIAL['paraphrases'])}): {served} served, {refused} refused by a "
          f"guard, {len(ADVERSARIAL['paraphrases']) - served - refused} below the threshold")
    for question, stored, similarity in adversarial_wrong:
        print(f"- {question!r} served {stored!r} ({similarity:.3f})")

    print()
    meaning_classes(embedder, default)


def meaning_classes(embedder: Embedder, threshold: float) -> None:
    """The class set, one stored prompt at a time; then its conversations, scoped as the gateway scopes
    them (everything but the last user message, hashed with the exact cache's key)."""
    data = json.loads(CLASSES.read_text())
    index = SemanticIndex(embedder, threshold=threshold)

    def outcome(scope_stored: str, stored: str, scope_asked: str, asked_: str) -> str:
        index.add(scope_stored, stored, "x")
        found = index.find(scope_asked, asked_)
        index.remove("x")
        return "served" if found.match else "refused" if found.refused else "below"

    print(f"Meaning classes ({CLASSES.relative_to(ROOT)}), at {threshold}:")
    print()
    print("| class | different: wrong hits (guards) | different: above the threshold (similarity alone would "
          "serve) | paraphrases served | refused by a guard | below the threshold |")
    print("|---|---|---|---|---|---|")
    wrong_listed = []
    for name, pairs in data["classes"].items():
        different = [outcome("c", p["stored"], "c", p["asked"]) for p in pairs["different"]]
        wrong_listed += [(name, p) for p, o in zip(pairs["different"], different, strict=True) if o == "served"]
        same = [outcome("c", p["stored"], "c", p["asked"]) for p in pairs["paraphrases"]]
        above = len(different) - different.count("below")
        print(f"| {name} | {different.count('served')} of {len(different)} | {above} | {same.count('served')} of "
              f"{len(same)} | {same.count('refused')} | {same.count('below')} |")
    for name, pair in wrong_listed:
        print(f"- WRONG ({name}): {pair['asked']!r} served {pair['stored']!r}")

    def scope(messages: list[dict]) -> str:
        split = last_user_text({"messages": messages})
        assert split is not None
        return exact_key("bench", ["target"], split[1])

    results = {True: [], False: []}
    for conversation in data["conversations"]:
        stored, asked_ = conversation["stored"], conversation["asked"]
        results[conversation["same"]].append(outcome(scope(stored), stored[-1]["content"], scope(asked_),
                                                     asked_[-1]["content"]))
    print()
    print(f"Conversations: {len(results[False])} whose follow-up means something else in another conversation: "
          f"{results[False].count('served')} served another's answer; {len(results[True])} follow-ups "
          f"reworded in the same conversation: {results[True].count('served')} served, "
          f"{results[True].count('refused')} refused by a guard, {results[True].count('below')} below the threshold")


if __name__ == "__main__":
    main()
