"""Guards for a semantic hit: the checks that must all agree before one prompt's answer is served for
another that merely embeds nearby.

Embedding similarity cannot see what makes two near-identical questions different questions: with
all-MiniLM-L6-v2, "Convert 5 pounds to kilograms." and "Convert 5 kilograms to pounds." score 0.992 and
"Refund order 55120." against "…55102." 0.965. So each guard names a kind of fact that a paraphrase
keeps and a different question changes, and compares it exactly:

- numbers and quantities (digits, number words, decimals and thousands written either way);
- negation (an odd number of negators on one side only) and antonyms (open/closed, before/after…);
- direction: the order of units, currencies and languages, and `from X to Y`;
- named entities, codes and identifiers: each must appear in the other prompt too;
- the requested output format and output language;
- the payload of a classification or extraction prompt (what follows the instruction, or what is
  quoted): it must be the same text.

They are word lists and regular expressions, written here because no library makes this judgement:
NLP toolkits give tokens and entities, not "would this answer fit that question". A guard errs towards
refusing: a refused hit costs one trip upstream, a wrong one serves the wrong answer.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w.]*\d)|(?<![\w.])\.\d+")
_SMALL = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_TENS = {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
         "dozen": 12, "half": 0.5, "quarter": 0.25, "twice": 2, "double": 2, "triple": 3}
CLOSE_WORDING = 0.6  # Jaccard of word stems from which a flipped word makes a different question
_INTERJECTION = re.compile(r"(?:^|(?<=[.!?]\s))\s*no\s*[,.!]", re.IGNORECASE)  # "No, it doesn't…"
_NEGATORS = frozenset("not no never none nobody nothing neither nor cannot without nowhere".split())
_ANTONYMS = [tuple(pair.split("/")) for pair in (
    "open/closed close/open opens/closes opening/closing before/after earlier/later early/late first/last "
    "increase/decrease increases/decreases raise/lower more/less most/least higher/lower high/low max/min "
    "maximum/minimum above/below buy/sell buying/selling add/remove adding/removing "
    "enable/disable enabled/disabled start/stop starts/stops true/false yes/no hot/cold warm/cool "
    "import/export upload/download encrypt/decrypt encode/decode compress/decompress "
    "push/pull win/lose won/lost accept/reject include/exclude included/excluded allow/deny allowed/denied "
    "left/right north/south east/west male/female men/women past/future long/short fast/slow big/small "
    "large/small plus/minus positive/negative cheap/expensive cheapest/dearest best/worst good/bad "
    "better/worse safe/unsafe legal/illegal possible/impossible love/hate agree/disagree "
    "arrive/depart arrival/departure deposit/withdraw debit/credit lend/borrow send/receive "
    "sent/received input/output inbound/outbound incoming/outgoing ascending/descending asc/desc "
    "minimum/maximum young/old younger/older newest/oldest light/dark day/night morning/evening "
    "summer/winter spring/autumn weekday/weekend today/tomorrow yesterday/tomorrow monday/tuesday "
    "wet/dry full/empty rich/poor success/failure pass/fail passed/failed valid/invalid legal/illegal "
    "synonym/antonym same/different similar/different odd/even prime/composite").split()]
_UNITS = {
    "kg": "kg", "kgs": "kg", "kilogram": "kg", "kilograms": "kg", "kilo": "kg", "kilos": "kg",
    "lb": "lb", "lbs": "lb", "pound": "lb", "pounds": "lb", "g": "g", "gram": "g", "grams": "g",
    "oz": "oz", "ounce": "oz", "ounces": "oz", "km": "km", "kilometer": "km", "kilometers": "km",
    "kilometre": "km", "kilometres": "km", "mile": "mi", "miles": "mi", "mi": "mi", "m": "m", "meter": "m",
    "meters": "m", "metre": "m", "metres": "m", "cm": "cm", "centimeter": "cm", "centimeters": "cm",
    "inch": "in", "inches": "in", "foot": "ft", "feet": "ft", "ft": "ft", "yard": "yd", "yards": "yd",
    "celsius": "C", "centigrade": "C", "fahrenheit": "F", "kelvin": "K", "liter": "l", "liters": "l",
    "litre": "l", "litres": "l", "gallon": "gal", "gallons": "gal", "ml": "ml", "cup": "cup", "cups": "cup",
    "second": "s", "seconds": "s", "minute": "min", "minutes": "min", "hour": "h", "hours": "h",
    "day": "d", "days": "d", "week": "wk", "weeks": "wk", "month": "mo", "months": "mo", "year": "y",
    "years": "y", "byte": "B", "bytes": "B", "kb": "kB", "mb": "MB", "gb": "GB", "tb": "TB",
    "usd": "USD", "dollar": "USD", "dollars": "USD", "eur": "EUR", "euro": "EUR", "euros": "EUR",
    "gbp": "GBP", "sterling": "GBP", "ngn": "NGN", "naira": "NGN", "kes": "KES", "shilling": "KES",
    "shillings": "KES", "zar": "ZAR", "rand": "ZAR", "jpy": "JPY", "yen": "JPY", "cedi": "GHS", "cedis": "GHS",
    "mph": "mph", "kph": "kph", "kmh": "kph",
}
_LANGUAGES = frozenset(
    "english french spanish german portuguese italian dutch russian arabic chinese mandarin cantonese "
    "japanese korean hindi bengali urdu swahili yoruba hausa igbo amharic zulu xhosa afrikaans somali "
    "turkish persian farsi greek polish ukrainian czech swedish norwegian danish finnish hebrew thai "
    "vietnamese indonesian malay tagalog latin".split())
_FORMATS = {
    "json": "json", "yaml": "yaml", "yml": "yaml", "xml": "xml", "csv": "csv", "tsv": "tsv", "table": "table",
    "tables": "table", "tabular": "table", "list": "list", "bullet": "list", "bullets": "list",
    "bulleted": "list", "numbered": "numbered", "markdown": "markdown", "html": "html", "latex": "latex",
    "code": "code", "python": "python", "javascript": "javascript", "typescript": "typescript", "java": "java",
    "sql": "sql", "bash": "bash", "shell": "bash", "rust": "rust", "go": "go", "golang": "go", "c": "c",
    "cpp": "cpp", "haiku": "haiku", "poem": "poem", "limerick": "limerick", "sonnet": "sonnet", "essay": "essay",
    "tweet": "tweet", "email": "email", "letter": "letter", "summary": "summary", "tldr": "summary",
    "paragraph": "paragraph", "paragraphs": "paragraph", "sentence": "sentence", "sentences": "sentence",
    "word": "word", "words": "word", "outline": "outline", "diagram": "diagram", "regex": "regex",
}
_FORMAT_NAMES = "|".join(sorted((f for f in _FORMATS if f not in ("c", "go", "word", "words")), key=len, reverse=True))
# A format counts when the output is asked for in it ("return it as JSON", "answer in a table", "write a
# haiku"), not when it is the topic ("a library for working with datasets in Python").
_ASKED_FORMAT = re.compile(
    r"\b(?:return|output|format|formatted|respond|reply|answer|give|print|show|list|present|express|put|"
    r"convert|rewrite|summari[sz]e|explain|describe|tell)\b[^.?!\n]{0,40}?\b(?:as|in|into)\s+(?:a\s+|an\s+)?"
    r"(?:valid\s+|plain\s+|simple\s+|short\s+|single\s+|brief\s+|bulleted\s+|numbered\s+)?(" + _FORMAT_NAMES
    + r")\b|\b(?:write|compose|draft|give\s+me|generate|produce)\s+(?:me\s+)?(?:a|an|one|two|three|\d+)?\s*"
    r"(?:short\s+|brief\s+|funny\s+|simple\s+)?(" + _FORMAT_NAMES + r")\b", re.IGNORECASE)
_TASKS = re.compile(r"\b(classify|categori[sz]e|label|tag|sentiment|extract|parse|translate|summari[sz]e|"
                    r"detect|identify|correct|proofread|rewrite|paraphrase|rephrase|count|sort|reverse|"
                    r"spell|transcribe|convert|format|score|rate|grade)\b", re.IGNORECASE)
_QUOTED = re.compile(r"```(.*?)```|\"([^\"]{2,})\"|“([^”]{2,})”|'([^']{4,})'|«([^»]{2,})»", re.DOTALL)
_CODE_LIKE = re.compile(r"\b(?=[\w-]*[A-Za-z]{2})(?=[\w-]*\d)[\w-]{4,}\b|[\w.+-]+@[\w-]+\.[\w.]+|https?://\S+")
_SPELLED = re.compile(r"(?<![\w-])[a-z]+(?![\w-])")  # whole words, not parts of "zero-copy" or "two-step"
_LIST_MARKER = re.compile(r"(?:^|(?<=\s))\(?\d{1,2}[.)](?=\s)", re.MULTILINE)  # "1) first… 2. then…"
_ARTICLE = r"(?:the\s+|a\s+|an\s+)?"
_FROM_TO = re.compile(rf"\bfrom\s+{_ARTICLE}(\w+)\s+(?:to|into)\s+{_ARTICLE}(\w+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Facts:
    """What the guards compare, read once per prompt."""

    words: frozenset[str]
    stems: frozenset[str]  # without negators: what the wording has in common
    numbers: Counter[str]
    negated: bool
    units: tuple[str, ...]
    languages: tuple[str, ...]
    formats: frozenset[str]
    entities: frozenset[str]
    codes: frozenset[str]
    routes: frozenset[tuple[str, str]]
    payload: str | None
    script: str


@lru_cache(maxsize=4096)
def facts(text: str) -> Facts:
    normal = unicodedata.normalize("NFKC", text)
    tokens = _WORD.findall(normal)
    lower = [t.lower() for t in tokens]
    return Facts(
        words=frozenset(lower) | frozenset(_stem(w) for w in lower),
        stems=frozenset(_stem(w) for w in lower if not _negator(w)),
        numbers=_numbers(normal, lower),
        negated=any(_negator(w) for w in _WORD.findall(_INTERJECTION.sub("", normal).lower())),
        units=tuple(_UNITS[w] for w in lower if w in _UNITS and (len(w) > 2 or w in ("kg", "lb", "km", "oz"))),
        languages=tuple(w for w in lower if w in _LANGUAGES),
        formats=frozenset(_FORMATS[next(g for g in m if g).lower()] for m in _ASKED_FORMAT.findall(normal)),
        entities=frozenset(_entities(normal)),
        codes=frozenset(c.lower() for c in _CODE_LIKE.findall(normal)),
        routes=frozenset((_UNITS.get(a.lower(), a.lower()), _UNITS.get(b.lower(), b.lower()))
                         for a, b in _FROM_TO.findall(normal)),
        payload=_payload(normal),
        script=_script(normal),
    )


def disagreements(asked: str, stored: str) -> list[str]:
    """What keeps `stored`'s answer from serving `asked`, in words; empty when every guard agrees."""
    a, b = facts(asked), facts(stored)
    found = []
    if a.numbers != b.numbers:
        found.append(f"numbers differ: {sorted(a.numbers.elements())} vs {sorted(b.numbers.elements())}")
    # Negation, opposites and names are judged where the wording is close: there a flipped word is a
    # different question. A paraphrase in other words says "no longer" or "control" instead, and its
    # similarity is the embedding's to judge.
    close = _overlap(a.stems, b.stems) >= CLOSE_WORDING
    if close and a.negated != b.negated:
        found.append("one is negated and the other is not")
    if close:
        for left, right in _ANTONYMS:
            a_left, a_right, b_left, b_right = left in a.words, right in a.words, left in b.words, right in b.words
            if ((a_left and not a_right and b_right and not b_left)
                    or (a_right and not a_left and b_left and not b_right)):
                found.append(f"opposites: {left} / {right}")
                break
    if a.units != b.units and (a.units or b.units):
        found.append(f"units or direction differ: {list(a.units)} vs {list(b.units)}")
    if a.routes != b.routes:
        found.append("from/to differs")
    if a.languages != b.languages:
        found.append(f"languages differ: {list(a.languages)} vs {list(b.languages)}")
    if a.formats != b.formats:
        found.append(f"requested formats differ: {sorted(a.formats)} vs {sorted(b.formats)}")
    # A paraphrase adds or drops a name; a different question swaps one for another.
    only_a, only_b = _unmatched(a.entities, b.words), _unmatched(b.entities, a.words)
    if close and only_a and only_b:
        found.append(f"different names: {sorted(only_a)} vs {sorted(only_b)}")
    if a.codes != b.codes:
        found.append(f"identifiers differ: {sorted(a.codes ^ b.codes)}")
    if a.payload != b.payload:
        found.append("the text to work on differs")
    if a.script != b.script:
        found.append("written in different scripts")
    return found


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two prompts' word stems."""
    return len(a & b) / len(a | b) if a or b else 1.0


def _negator(word: str) -> bool:
    return word in _NEGATORS or word.endswith(("n't", "n’t"))


def _unmatched(names: frozenset[str], words: frozenset[str]) -> set[str]:
    """The names not among `words` (a long enough prefix of one another counts: Lagos's, INSTALLATIO)."""
    return {n for n in names if n not in words
            and not (len(n) >= 5 and any(len(w) >= 5 and (w.startswith(n) or n.startswith(w)) for w in words))}


def _stem(word: str) -> str:
    """Plural and possessive endings off, so that 'beans' meets 'bean' and 'Lagos's' meets 'Lagos'."""
    for suffix in ("'s", "’s", "es", "s"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            return word[: -len(suffix)]
    return word


def _numbers(text: str, lower: list[str]) -> Counter[str]:
    found: Counter[str] = Counter()
    for match in _NUMBER.findall(_LIST_MARKER.sub(" ", text)):
        value = float(match.replace(",", ""))
        found[f"{value:g}"] += 1
    for word in _SPELLED.findall(text.lower()):
        value = _SMALL.get(word, _TENS.get(word))
        if value is not None and word != "one":  # "one of", "one can": rarely a quantity
            found[f"{float(value):g}"] += 1
    return found


def _entities(text: str) -> list[str]:
    """Capitalised words that are not a sentence's first word, and words capitalised inside (PyTorch)."""
    names = []
    for sentence in re.split(r"(?<=[.!?:;])\s+|\n+", text):
        tokens = _WORD.findall(sentence)
        for position, token in enumerate(tokens):
            inner = any(ch.isupper() for ch in token[1:]) and not token.isupper()
            if (position > 0 and token[:1].isupper() and token.lower() not in _COMMON) or inner:
                names.append(_stem(token.lower()))
    return names


def _payload(text: str) -> str | None:
    """The text a classification or extraction prompt works on, normalised; None for other prompts."""
    instruction = _QUOTED.sub(" ", text)
    head, colon, tail = instruction.partition(":")
    # The task is what the prompt opens with ("Classify…", "Please extract…"), not a word in passing.
    if not _TASKS.search(" ".join(_WORD.findall(head if colon else instruction)[:4])):
        return None
    quoted = [next(g for g in m if g) for m in _QUOTED.findall(text)]
    if quoted:
        return " | ".join(_plain(q) for q in quoted)
    return _plain(text.partition(":")[2]) if colon and tail.strip() else None


def _plain(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _script(text: str) -> str:
    """The writing system most of the letters are in (Latin, Cyrillic, Arabic, CJK…)."""
    scripts: Counter[str] = Counter()
    for ch in text:
        if ch.isalpha():
            scripts[unicodedata.name(ch, "UNKNOWN").split(" ")[0]] += 1
    return scripts.most_common(1)[0][0] if scripts else ""


# Capitalised mid-sentence for grammar's sake, not because they name something.
_COMMON = frozenset("i i'm i've i'd i'll a an the and or but if is are was what how why who when where which "
                    "can could would should will do does did please".split())
