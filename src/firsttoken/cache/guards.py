"""Guards for a semantic hit: the checks that must all agree before one prompt's answer is served for
another that merely embeds nearby.

Embedding similarity cannot see what makes two near-identical questions different questions: with
all-MiniLM-L6-v2, "Convert 5 pounds to kilograms." and "Convert 5 kilograms to pounds." score 0.992 and
"Refund order 55120." against "…55102." 0.965. So each guard names a kind of fact that a paraphrase
keeps and a different question changes, and compares it exactly:

- numbers and quantities (digits, number words, decimals and thousands written either way);
- negation (an odd number of negators on one side only) and antonyms (open/closed, before/after…);
- direction: the order of units, currencies and languages, `from X to Y`, and any two words that
  trade places ("prices rise when rates fall");
- one detail swapped for another in an otherwise identical prompt ("for a child" / "for an adult");
- how much is asked: a prompt with far more content words asks for specifics the other's answer lacks;
- named entities, codes and identifiers: each must appear in the other prompt too;
- the requested output format and output language;
- quoted text, and the payload of a classification or extraction prompt: it must be the same text.

They are word lists (lexicon.py) and regular expressions, written here because no library makes this
judgement: NLP toolkits give tokens and entities, not "would this answer fit that question". A guard
errs towards refusing: a refused hit costs one trip upstream, a wrong one serves the wrong answer.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from text_to_num import alpha2digit

from firsttoken.cache.lexicon import (
    ANTONYMS,
    COMMON,
    FORMATS,
    FUNCTION,
    LANGUAGES,
    NEGATING_PREFIXES,
    NEGATORS,
    PARTICLES,
    QUANTITY_WORDS,
    SHORT_UNITS,
    SMALL,
    SYMMETRIC,
    UNITS,
)

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w.]*\d)|(?<![\w.])\.\d+")
CLOSE_WORDING = 0.6  # Jaccard of word stems from which a flipped word makes a different question
FLIPPED_SPAN = 3  # words: a flip replaces a word or two ("log in to" / "log out of"), not a clause
SAME_TOPIC = 0.5  # …and from which a word replaced by its opposite does ("upload" / "download a file")
# An edit that keeps this share of the longer prompt's words, in order, changes one detail of it.
SAME_SKELETON = 0.6
DETAIL_WORDS = 3  # at most this many content words changed on each side
SAME_FRAME = 0.85  # two words trade places when swapping them back leaves the prompts this alike
TRADED_FRAME = 0.7  # …and two trade sides of "from" or "to" (the rest of the frame may shift a little)
# One prompt asks for more than the other when it has this many times its content words, and this many
# more (chosen on GPTCache's pairs, where no true pair comes near it; see docs/benchmarks.md).
SAYS_MORE = 1.6
MORE_WORDS = 6
_INTERJECTION = re.compile(r"(?:^|(?<=[.!?]\s))\s*no\s*[,.!]", re.IGNORECASE)  # "No, it doesn't…"
_OR_NOT = re.compile(r"\bor\s+not\b", re.IGNORECASE)  # "whether … or not", "spam or not spam": no denial
_SYMBOLS = [(re.compile(r"°\s?C\b"), " celsius"), (re.compile(r"°\s?F\b"), " fahrenheit"),
            (re.compile(r"\$(?=\d)"), " usd "), (re.compile(r"€(?=\d)"), " eur "), (re.compile(r"£(?=\d)"), " gbp "),
            (re.compile(r"₦(?=\d)"), " ngn "),
            # A quantity glued to its unit is two facts: "16GB" is "16 GB", "15kg" is "15 kg".
            (re.compile(r"(?<=\d)(?=(?:kg|kgs|g|mg|lb|lbs|oz|km|cm|mm|m|mi|ft|ml|l|gb|mb|kb|tb|h|hrs?|min|s)\b)",
                        re.IGNORECASE), " ")]
_FORMAT_NAMES = "|".join(sorted((f for f in FORMATS if f not in ("c", "go", "word", "words")), key=len, reverse=True))
# A format counts when the output is asked for in it ("return it as JSON", "answer in a table", "write a
# haiku"), not when it is the topic ("a library for working with datasets in Python").
_ASKED_FORMAT = re.compile(
    r"\b(?:return|output|format|formatted|respond|reply|answer|give|print|show|list|present|express|put|"
    r"convert|rewrite|summari[sz]e|explain|describe|tell|compare|create|make|draft|draw|write|send)\b"
    r"[^.?!\n]{0,40}?\b(?:as|in|into)\s+(?:a\s+|an\s+)?"
    r"(?:valid\s+|plain\s+|simple\s+|short\s+|single\s+|brief\s+|bulleted\s+|numbered\s+)?(" + _FORMAT_NAMES
    + r")\b|\b(?:write|compose|draft|give\s+me|generate|produce)\s+(?:me\s+)?(?:a|an|one|two|three|\d+)?\s*"
    r"(?:short\s+|brief\s+|funny\s+|simple\s+)?(" + _FORMAT_NAMES + r")\b"
    r"|\b(?:as|in|into)\s+(?:a\s+|an\s+)?(?:\w+\s+)?(" + _FORMAT_NAMES + r")\s*[.?!]*\s*$", re.IGNORECASE)
_TASKS = re.compile(r"(classify|categori[sz]e|label|tag|extract|parse|translate|summari[sz]e|detect|identify|"
                    r"correct|proofread|rewrite|paraphrase|rephrase|count|sort|reverse|spell|transcribe|"
                    r"convert|format|score|rate|grade|fix|find|list)$", re.IGNORECASE)
_AFTER_HEAD = re.compile(r"^([^:?\n]*)([:?])\s*(.*)$", re.DOTALL)  # the instruction, then what it works on
# "Which language is this?", "…the following:": the text after it is the payload; so after a short
# question that points at it ("Is this JSON valid?", "What does this regex match:").
_POINTS = re.compile(r"\b(?:this|these|following|below)\s*$", re.IGNORECASE)
_POINTS_WITHIN = re.compile(r"\b(?:this|these|here)\b", re.IGNORECASE)
_SHORT_HEAD = 6  # words
_POLITE = frozenset("please kindly can could would will you help me i want need to now pls just".split())
# Quoted text: a single quote only where no letter touches it from outside (not "don't … doesn't").
_QUOTED = re.compile(r"```(.*?)```|\"([^\"]{2,})\"|“([^”]{2,})”|(?<!\w)'([^']{2,}?)'(?!\w)|«([^»]{2,})»",
                     re.DOTALL)
_INLINE_CODE = re.compile(r"(?<![`\w])`([^`\s][^`\n]*?)`(?![`\w])")  # `rm -rf ./build`, `push_to_hub()`
# Characters that make text code, a pattern or a command: compared as written, not as words.
_CODE_SYMBOLS = re.compile(r"[\^$\\{}\[\]()<>/|*+=#~&%@;`]|(?:^|\s)-\w")
# Letters and digits side by side in one token: AB1234, 0x80070005, GPT-4o; not 200-word or 10-year-old.
_CODE_LIKE = re.compile(r"(?<![\w-])(?=[\w-]{4,})[\w-]*(?:[A-Za-z]\d|\d[A-Za-z])[\w-]*|[\w.+-]+@[\w-]+\.[\w.]+|"
                        r"https?://\S+")
_VAGUE = re.compile(r"\b(?:dozens|hundreds|thousands|millions|billions)\b", re.IGNORECASE)
_SPELLED = re.compile(r"(?<![\w-])[a-z]+(?![\w-])")  # whole words, not parts of "zero-copy" or "two-step"
_LIST_MARKER = re.compile(r"(?:^|(?<=\s))\(?\d{1,2}[.)](?=\s)", re.MULTILINE)  # "1) first… 2. then…"
_ARTICLES = frozenset(("a", "an", "the"))
# Where something goes or comes from: what stands on either side of one of these has a role ("from Lagos
# to Nairobi", "a string to an int", "catch a cold from my dog").
_DIRECTIONAL = frozenset("from to into onto toward towards".split())
_PRONOUNS = {"me": "i", "us": "we", "him": "he", "them": "they"}  # "from me" and "I catch…" name one role
_SUBJECTS = frozenset(("i", "we", "he", "she", "they", "you"))


@dataclass(frozen=True, slots=True)
class Facts:
    """What the guards compare, read once per prompt."""

    tokens: tuple[str, ...]  # lower-case words in order
    content: int  # how many of them carry content
    words: frozenset[str]
    stems: frozenset[str]  # without negators: what the wording has in common
    numbers: Counter[str]
    negated: bool
    units: tuple[str, ...]
    languages: tuple[str, ...]
    formats: frozenset[str]  # asked for
    mentioned_formats: frozenset[str]  # named anywhere
    entities: frozenset[str]
    codes: frozenset[str]
    quoted: tuple[str, ...]
    inline_code: frozenset[str]
    payload: str | None
    plain: str
    raw: str  # the text with its spacing made even: where code is looked for as written
    script: str


@lru_cache(maxsize=4096)
def facts(text: str) -> Facts:
    normal = unicodedata.normalize("NFKC", text)
    for symbol, word in _SYMBOLS:
        normal = symbol.sub(word, normal)
    tokens = _WORD.findall(normal)
    lower = tuple(t.lower() for t in tokens)
    numbers = _numbers(normal)
    units = tuple(UNITS[w] for i, w in enumerate(lower) if w in UNITS
                  and (w not in SHORT_UNITS or w in ("kg", "lb", "km", "oz") or (i and _is_number(lower[i - 1]))))
    # A unit is a fact where it measures something or is converted to another ("what year", "each day": not).
    if not numbers and len(set(units)) < 2:
        units = ()
    return Facts(
        tokens=lower,
        content=len(_content(lower)),
        words=frozenset(lower) | frozenset(_stem(w) for w in lower),
        stems=frozenset(_stem(w) for w in lower if not _negator(w)),
        numbers=numbers,
        negated=_negated(normal),
        units=units,
        languages=tuple(w for w in lower if w in LANGUAGES),
        formats=frozenset(FORMATS[next(g for g in m if g).lower()] for m in _ASKED_FORMAT.findall(normal)),
        mentioned_formats=frozenset(FORMATS[w] for w in lower if w in FORMATS),
        entities=frozenset(_entities(normal)),
        codes=frozenset(c.lower() for c in _CODE_LIKE.findall(normal)),
        quoted=tuple(_as_written(next(g for g in m if g)) for m in _QUOTED.findall(_INLINE_CODE.sub(" ", normal))),
        inline_code=frozenset(" ".join(c.split()) for c in _INLINE_CODE.findall(normal)),
        payload=_payload(normal),
        plain=_plain(normal),
        raw=" ".join(normal.split()),
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
    overlap = _overlap(a.stems, b.stems)
    close = overlap >= CLOSE_WORDING
    if close and a.negated != b.negated:
        found.append("one is negated and the other is not")
    opposed = _opposed(a.tokens, b.tokens, particles=close) if overlap >= SAME_TOPIC else None
    if opposed:
        found.append(f"opposites: {opposed[0]} / {opposed[1]}")
    elif close:
        for left, right in ANTONYMS:
            a_left, a_right, b_left, b_right = left in a.words, right in a.words, left in b.words, right in b.words
            if ((a_left and not a_right and b_right and not b_left)
                    or (a_right and not a_left and b_left and not b_right)):
                found.append(f"opposites: {left} / {right}")
                break
    swapped = _swapped(a.tokens, b.tokens) if close else None
    if swapped:
        found.append(f"direction: {swapped[0]} and {swapped[1]} trade places")
    detail = _changed_detail(a.tokens, b.tokens)
    if detail:
        found.append(f"one detail changed: {' '.join(detail[0])} / {' '.join(detail[1])}")
    shorter, longer = sorted((a.content, b.content))
    if longer >= SAYS_MORE * shorter and longer - shorter >= MORE_WORDS:
        found.append(f"one asks for much more: {a.content} content words vs {b.content}")
    if a.units != b.units and (a.units or b.units):
        found.append(f"units or direction differ: {list(a.units)} vs {list(b.units)}")
    traded = _traded_sides(a.tokens, b.tokens) if close else None
    if traded:
        found.append(f"from/to: {traded[1]} and {traded[2]} trade sides of '{traded[0]}'")
    if a.languages != b.languages:
        found.append(f"languages differ: {list(a.languages)} vs {list(b.languages)}")
    # A format asked for on one side must at least be named on the other ("Write a SQL query" / "SQL to…").
    if (a.formats - b.mentioned_formats) or (b.formats - a.mentioned_formats):
        found.append(f"requested formats differ: {sorted(a.formats)} vs {sorted(b.formats)}")
    # A paraphrase adds or drops a name; a different question swaps one for another.
    only_a, only_b = _unmatched(a.entities, b.words), _unmatched(b.entities, a.words)
    if close and only_a and only_b:
        found.append(f"different names: {sorted(only_a)} vs {sorted(only_b)}")
    if a.codes != b.codes:
        found.append(f"identifiers differ: {sorted(a.codes ^ b.codes)}")
    if _text_differs(a, b):
        found.append("the text to work on differs")
    if a.script != b.script:
        found.append("written in different scripts")
    return found


def _text_differs(a: Facts, b: Facts) -> bool:
    """Quoted text, or a task's payload, on one side that the other does not have word for word."""
    if (a.quoted and b.quoted and a.quoted != b.quoted) or (a.payload and b.payload and a.payload != b.payload):
        return True
    for mine, theirs in ((a, b), (b, a)):
        if any(piece not in theirs.plain and piece not in theirs.raw
               for piece in (*mine.quoted, *filter(None, (mine.payload,)))):
            return True
    # Inline code is named in any order, and a paraphrase may leave a name out; a different question has
    # code on each side that the other lacks (`rm -rf ./build` / `rm -rf /build`).
    only_a = {c for c in a.inline_code if c not in b.raw}
    only_b = {c for c in b.inline_code if c not in a.raw}
    return bool(only_a and only_b)


def _opposed(a: tuple[str, ...], b: tuple[str, ...], particles: bool) -> tuple[str, str] | None:
    """A word that stands where the other prompt has its opposite: "mute" / "unmute", "upload" /
    "download", and with `particles` (close wording) "turn the wifi on" / "off", "log in to" / "log out
    of". Read only where the two prompts differ, so "in" and "out" elsewhere in a reworded paraphrase mean
    nothing."""
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for op, a_start, a_end, b_start, b_end in matcher.get_opcodes():
        if op != "replace" or a_end - a_start > FLIPPED_SPAN or b_end - b_start > FLIPPED_SPAN:
            continue  # a clause reworded ("is nonzero" / "is set to a value other than zero") is the embedding's
        for left in a[a_start:a_end]:
            for right in b[b_start:b_end]:
                if _opposites(left, right) and (particles or (left, right) not in _PARTICLE_PAIRS):
                    return left, right
    return None


@lru_cache(maxsize=8192)
def _opposites(left: str, right: str) -> bool:
    if (left, right) in _OPPOSITES:
        return True
    for shorter, longer in ((left, right), (right, left)):
        for prefix, shortest in NEGATING_PREFIXES.items():
            if len(shorter) >= shortest and longer == prefix + shorter:
                return True
    return False


_PARTICLE_PAIRS = frozenset({*PARTICLES, *((b, a) for a, b in PARTICLES)})
_OPPOSITES = frozenset({*ANTONYMS, *((b, a) for a, b in ANTONYMS), *_PARTICLE_PAIRS})


def _traded_sides(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, str, str] | None:
    """Two words on opposite sides of a directional word, each on the other side in the other prompt:
    "from the laptop to the server" / "from the server to the laptop", "a string to an int" / "an int to a
    string", "can my dog catch a cold from me" / "can I catch a cold from my dog". (The word must occur
    once in each prompt: in a long sentence with several, "to" is as often an infinitive.)"""
    for word in _DIRECTIONAL:
        if a.count(word) != 1 or b.count(word) != 1:
            continue
        a_before, a_after = _sides(a, word)
        b_before, b_after = _sides(b, word)
        went_after = (a_before & b_after) - a_after - b_before
        came_before = (a_after & b_before) - a_before - b_after
        for left in sorted(went_after):
            for right in sorted(came_before):
                if _frame_once_swapped(a, b, left, right) >= TRADED_FRAME:
                    return word, left, right
    return None


def _frame_once_swapped(a: tuple[str, ...], b: tuple[str, ...], left: str, right: str) -> float:
    """How alike the prompts are once `left` and `right` trade back in `b` (articles aside): a clause
    restructured around a directional word ("loaded from the column" / "the column, from which…") stays
    unlike; the same frame with two words traded comes back almost whole."""
    frame = [_PRONOUNS.get(w, w) for w in a if w not in _ARTICLES]
    undone = [right if w == left else left if w == right else w
              for w in (_PRONOUNS.get(t, t) for t in b if t not in _ARTICLES)]
    return difflib.SequenceMatcher(a=frame, b=undone, autojunk=False).ratio()


def _sides(tokens: tuple[str, ...], word: str) -> tuple[set[str], set[str]]:
    """The content words (and the pronouns, "me" as "i") before and after `word`."""
    at = tokens.index(word)
    named = [_PRONOUNS.get(t, t) for t in tokens]
    keep = {t for t in named if t not in FUNCTION or t in _SUBJECTS}
    return {t for t in named[:at] if t in keep}, {t for t in named[at + 1:] if t in keep}


def _swapped(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, str] | None:
    """Two content words that both prompts have once each, in the other order, all else in order: "from
    Lagos to Nairobi" / "from Nairobi to Lagos". Items of a list ("tea or coffee") may trade places."""
    once_a = {w for w, n in Counter(a).items() if n == 1 and w not in FUNCTION}
    once_b = {w for w, n in Counter(b).items() if n == 1 and w not in FUNCTION}
    shared = once_a & once_b
    order_a, order_b = [w for w in a if w in shared], [w for w in b if w in shared]
    moved = [i for i, (x, y) in enumerate(zip(order_a, order_b, strict=True)) if x != y]
    if len(moved) != 2:
        return None
    first, second = order_a[moved[0]], order_a[moved[1]]
    if (order_b[moved[0]], order_b[moved[1]]) != (second, first):
        return None
    between = a[a.index(first) + 1:a.index(second)]
    if not between or all(w in SYMMETRIC for w in between):
        return None  # neighbours ("the provided link" / "the link provided"), or items of a list
    # Only where the two words trade places in the same frame: a paraphrase that restructures a clause
    # ("the provided link" / "the link provided") also reorders words, but swapping them back does not
    # give the other prompt.
    undone = tuple(second if w == first else first if w == second else w for w in b if w not in _ARTICLES)
    frame = tuple(w for w in a if w not in _ARTICLES)  # "a string to an int" / "an int to a string"
    if difflib.SequenceMatcher(a=frame, b=undone, autojunk=False).ratio() < SAME_FRAME:
        return None
    return first, second


def _changed_detail(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[list[str], list[str]] | None:
    """The content words swapped for others when the rest of the prompt stays as it was: "vitamin D for a
    child" / "… for an adult". Without a thesaurus a swapped word may be a synonym ("built" /
    "constructed"); refusing that costs a trip upstream, serving the other costs a wrong answer."""
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    kept = sum(block.size for block in matcher.get_matching_blocks())
    if kept < SAME_SKELETON * max(len(a), len(b)):
        return None
    edits = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(edits) != 1:  # a paraphrase rewords here and there; a different question changes one place
        return None
    _, a_start, a_end, b_start, b_end = edits[0]
    removed, added = _content(a[a_start:a_end]), _content(b[b_start:b_end])
    removed_stems, added_stems = {_stem(w) for w in removed}, {_stem(w) for w in added}
    if not (removed_stems - added_stems) or not (added_stems - removed_stems):
        return None  # words only added or dropped, or the same words inflected otherwise ("Monday"/"Mondays")
    if len(removed) > DETAIL_WORDS or len(added) > DETAIL_WORDS:
        return None  # reworded, not one detail changed: the embedding judges it
    return removed, added


def _content(words: tuple[str, ...]) -> list[str]:
    """What a changed span says beyond grammar; numbers and negators have guards of their own."""
    return [w for w in words if w not in FUNCTION and not w.isdigit() and not _negator(w)]


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two prompts' word stems."""
    return len(a & b) / len(a | b) if a or b else 1.0


def _negator(word: str) -> bool:
    return word in NEGATORS or word.endswith(("n't", "n’t"))


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


def _numbers(text: str) -> Counter[str]:
    """Every quantity, however written: digits, "two hundred", "twenty-five", "a dozen"."""
    found: Counter[str] = Counter()
    # Number words from three up become digits; "hundreds of", "thousands of" are no number.
    written = alpha2digit(_VAGUE.sub("many", _LIST_MARKER.sub(" ", text)), "en")
    for match in _NUMBER.findall(written):
        found[f"{float(match.replace(',', '')):g}"] += 1
    for word in _SPELLED.findall(written.lower()):
        value = SMALL.get(word, QUANTITY_WORDS.get(word))
        if value is not None and word != "one":  # "one of", "one can": rarely a quantity
            found[f"{float(value):g}"] += 1
    return found


def _negated(text: str) -> bool:
    return sum(_negator(w) for w in _WORD.findall(_OR_NOT.sub(" ", _INTERJECTION.sub("", text)).lower())) % 2 == 1


def _entities(text: str) -> list[str]:
    """Capitalised words that are not a sentence's first word, and words capitalised inside (PyTorch)."""
    names = []
    for sentence in re.split(r"(?<=[.!?:;])\s+|\n+", text):
        tokens = _WORD.findall(sentence)
        for position, token in enumerate(tokens):
            inner = any(ch.isupper() for ch in token[1:]) and not token.isupper()
            if (position > 0 and token[:1].isupper() and token.lower() not in COMMON) or inner:
                names.append(_stem(token.lower()))
    return names


def _payload(text: str) -> str | None:
    """What a prompt works on when it opens with a task ("Classify…", "Please extract…") and gives the
    text after a colon, or points at it ("Which language is this? fn main() {…}"); None otherwise."""
    # The head ends at the first colon or question mark outside quotes (quoted text keeps its length
    # here, blanked, so that the payload is taken whole from the text).
    match = _AFTER_HEAD.search(_QUOTED.sub(lambda quoted: " " * len(quoted.group(0)), text))
    if match is None or not _plain(text[match.start(3):]):
        return None
    head, mark, tail = match.group(1), match.group(2), text[match.start(3):]
    words = _WORD.findall(head)
    opening = [w for w in words[:6] if w.lower() not in _POLITE]
    task = ((mark == ":" and opening and _TASKS.match(opening[0])) or _POINTS.search(head)
            or (len(words) <= _SHORT_HEAD and _POINTS_WITHIN.search(head)))
    return _as_written(tail) if task else None


def _plain(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _as_written(text: str) -> str:
    """Text to work on, as it must match: code, a pattern or a command symbol for symbol (spacing made
    even, a closing full stop dropped); prose word for word, ignoring case and punctuation."""
    if _CODE_SYMBOLS.search(text):
        return " ".join(text.split()).rstrip(".")
    return _plain(text)


_ASCII_LETTER = re.compile(r"[A-Za-z]")
_NOT_ASCII = re.compile(r"[^\x00-\x7f]")


def _is_number(word: str) -> bool:
    return word.replace(".", "", 1).isdigit() or word in SMALL


def _script(text: str) -> str:
    """The writing system most of the letters are in (Latin, Cyrillic, Arabic, CJK…)."""
    # ASCII letters counted by a regex, only the others one by one by name: a 600-word English prompt took
    # 3.6 ms letter by letter, most of what the guards cost it.
    scripts: Counter[str] = Counter({"LATIN": len(_ASCII_LETTER.findall(text))})
    for ch in _NOT_ASCII.findall(text):
        if ch.isalpha():
            scripts[unicodedata.name(ch, "UNKNOWN").split(" ")[0]] += 1
    script, count = scripts.most_common(1)[0]
    return script if count else ""


