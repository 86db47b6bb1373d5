"""Task sizing's accuracy on MT-Bench's categories and what it costs per request, in one run.

    .venv/bin/python bench/sizing.py

Each of MT-Bench's 80 first turns is sized three ways: by the rules alone (no rule: chat); by the rules,
then the 5 nearest labelled examples; and by the neighbours alone. Its category counts as right when the
kind is the one MT-Bench's category maps to (routing/sizing.py: writing and humanities → long-form,
roleplay and stem → chat, reasoning and math → reasoning, coding → code, extraction → extraction). The
neighbours leave the question itself out of the examples (leave-one-out). The cost is timed per call, on
one thread: the rules, and one embedding plus the vote. Run by hand; CI never runs it.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections import Counter
from pathlib import Path

from firsttoken.cache.embed import load_embedder
from firsttoken.routing.sizing import MT_BENCH_KINDS, Sizer, by_rules

QUESTIONS = Path(__file__).resolve().parent.parent / "src/firsttoken/routing/data/mt_bench_questions.jsonl"


def main() -> None:
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    sizer = Sizer(load_embedder(threads=1))
    right = {way: Counter() for way in ("rules", "rules + neighbours", "neighbours")}
    total: Counter[str] = Counter()
    for i, row in enumerate(rows):
        want, text, category = MT_BENCH_KINDS[row["category"]], row["turns"][0], row["category"]
        total[category] += 1
        rule = by_rules(text)
        neighbours = sizer.nearest(sizer._vectors[i], leave_out=i)  # the same order as examples()
        right["rules"][category] += (rule or "chat") == want
        right["rules + neighbours"][category] += (rule or neighbours) == want
        right["neighbours"][category] += neighbours == want
    texts = [row["turns"][0] for row in rows]
    rule_us = _median_us(lambda: [by_rules(t) for t in texts]) / len(texts)
    embed_ms = _median_us(lambda: sizer.size("I had a rough day and just want to talk, any thoughts?"), 50) / 1000
    print(f"machine: {platform.node()} · python {platform.python_version()} · all-MiniLM-L6-v2 on ONNX Runtime, "
          f"1 thread")
    print()
    print("| category | " + " | ".join(right) + " |")
    print("|---|" + "---|" * len(right))
    for category in total:
        print(f"| {category} → {MT_BENCH_KINDS[category]} | "
              + " | ".join(f"{right[way][category]}/{total[category]}" for way in right) + " |")
    print("| **all** | " + " | ".join(f"**{sum(right[way].values())}/{len(rows)}**" for way in right) + " |")
    print()
    print(f"cost per request: rules {rule_us:.1f} µs (target ≤ 1 ms); neighbours {embed_ms:.2f} ms (target ≤ 15 ms)")


def _median_us(call, repeat: int = 200) -> float:
    call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


if __name__ == "__main__":
    main()
