"""Secrets kept out of what the gateway says: the upstream keys (and other credentials it holds) removed
from upstream text before it reaches a client, a journey, a span or a log line.

An upstream may quote the key it was sent, whole or cut short ("Incorrect API key provided: sk-proj-abc…"),
in an error body, a stream event, an answer or a header. So a match is any run of at least `MIN_PREFIX`
characters that begins a secret, extended as far as it goes on agreeing with the secret.

The key may also come escaped: JSON may write any character as `\\uXXXX` (and `/` as `\\/`), and a URL in
a message %-encodes. A client that decodes the JSON sees the key plain, so escaped forms are matched too,
by a pattern that takes each character in any of its spellings. The plain form is a `bytes.find` per
secret (memchr-fast, cheap enough for every event of a stream); the pattern runs only on text that holds
an escape at all (`\\u`, `\\/`, `%` or `&`; on text that does, it costs a few µs).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

REDACTED = "[redacted]"
MIN_PREFIX = 10  # shorter runs are common words and public prefixes ("sk-proj-"); the rest of a key is secret
MIN_SECRET = 8  # shorter "keys" (EMPTY, none, x) guard nothing, and redacting them would garble text
_REDACTED = REDACTED.encode()


class Redactor:
    """Removes the given secrets, and any long prefix of them, plain or escaped, from bytes and text."""

    __slots__ = ("_secrets", "_plain", "_escaped")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        found = {s for s in secrets if len(s) >= MIN_SECRET}
        # Longest first: a secret that begins with another is matched whole.
        self._secrets = [s.encode() for s in sorted(found, key=len, reverse=True)]
        self._plain = [(s, s[:MIN_PREFIX]) for s in self._secrets]  # each secret, and the run that begins it
        self._escaped = [_spelled_any_way(s) for s in self._secrets]

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def bytes(self, data: bytes) -> bytes:
        if not self._plain:
            return data
        find = data.find  # not `in`: see relay.py's _SPECIAL_MARKERS
        # an escape (doubled ones hold these too; a plain \n does not): the patterns take every spelling
        if find(b"\\u") >= 0 or find(b"\\/") >= 0 or find(b"%") >= 0 or find(b"&") >= 0:
            for pattern in self._escaped:
                data = pattern.sub(_REDACTED, data)
            return data
        for secret, anchor in self._plain:
            if find(anchor) >= 0:
                data = _cut(data, secret, anchor)
        return data

    def text(self, text: str) -> str:
        if not self._secrets:
            return text
        data = text.encode("utf-8", "surrogateescape")
        cleaned = self.bytes(data)
        return text if cleaned is data else cleaned.decode("utf-8", "surrogateescape")

    def including(self, secrets: Iterable[str]) -> Redactor:
        return Redactor([*(s.decode() for s in self._secrets), *secrets])


def _cut(data: bytes, secret: bytes, anchor: bytes) -> bytes:
    out: list[bytes] = []
    start = 0
    at = data.find(anchor)
    while at >= 0:
        end = at + len(anchor)
        limit = min(len(data), at + len(secret))
        while end < limit and data[end] == secret[end - at]:
            end += 1
        out += (data[start:at], _REDACTED)
        start = end
        at = data.find(anchor, end)
    out.append(data[start:])
    return b"".join(out)


def _spelled_any_way(secret: bytes) -> re.Pattern[bytes]:
    """A pattern for the secret's first MIN_PREFIX characters and as many more as follow, each character
    plain, as a JSON \\uXXXX escape, as JSON's \\/ (for a slash) or %-encoded."""

    def spellings(byte: int) -> bytes:
        hex_code = _any_case(b"%02x" % byte)
        # JSON inside JSON (a proxy that wraps an error body as a string) doubles the backslashes, and a
        # URL inside a URL the percent signs: any number of either
        forms = [re.escape(bytes([byte])), rb"\\+u00" + hex_code, rb"%(?:25)*" + hex_code,
                 # and HTML's character references, numbered or named, escaped again or not (&amp;#45;)
                 rb"&(?:amp;)*#0*%d;" % byte, rb"&(?:amp;)*#[xX]0*" + hex_code + b";",
                 *(rb"&(?:amp;)*" + name + b";" for name in _ENTITIES.get(byte, ()))]
        if byte == ord("/"):
            forms.append(rb"\\+/")
        return b"(?:" + b"|".join(forms) + b")"

    head = b"".join(spellings(b) for b in secret[:MIN_PREFIX])
    tail = b""
    for byte in reversed(secret[MIN_PREFIX:]):  # each further character only after the one before it
        tail = b"(?:" + spellings(byte) + tail + b")?"
    return re.compile(head + tail)


# HTML's names for the punctuation keys are made of (letters and digits have none)
_ENTITIES: dict[int, tuple[bytes, ...]] = {
    ord("-"): (b"dash", b"hyphen"), ord("/"): (b"sol",), ord("+"): (b"plus",), ord("="): (b"equals",),
    ord("_"): (b"lowbar", b"UnderBar"), ord("."): (b"period",), ord(":"): (b"colon",), ord("~"): (b"tilde",),
}


def _any_case(hex_code: bytes) -> bytes:
    return b"".join(b"[%s%s]" % (bytes([c]).lower(), bytes([c]).upper()) if chr(c).isalpha() else bytes([c])
                    for c in hex_code)


class _RedactingRecords:
    """A log record factory that redacts each record's message (and traceback) as it is made, so no
    handler, ours or a library's, can write a secret."""

    def __init__(self, make: Callable[..., logging.LogRecord], redactor: Redactor) -> None:
        self.make = make
        self.redactor = redactor

    def __call__(self, *args: object, **kwargs: object) -> logging.LogRecord:
        record = self.make(*args, **kwargs)
        if not self.redactor:
            return record
        message = record.getMessage()
        cleaned = self.redactor.text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = self.redactor.text(logging.Formatter().formatException(record.exc_info))
        return record


def redact_logs(secrets: Iterable[str]) -> None:
    """From now on no log record of this process carries these secrets (adds to any given before)."""
    factory = logging.getLogRecordFactory()
    if isinstance(factory, _RedactingRecords):
        factory.redactor = factory.redactor.including(secrets)
    else:
        logging.setLogRecordFactory(_RedactingRecords(factory, Redactor(secrets)))
