"""Continuous buckets per key: exact Retry-After, nothing charged for a refusal."""

from __future__ import annotations

import math

import pytest

from firsttoken.routing.ratelimit import KeyLimits


def test_requests_refill_continuously() -> None:
    limits = KeyLimits(rpm=60)
    for _i in range(60):
        assert limits.take("k", 1, now=100.0) is None
    refusal = limits.take("k", 1, now=100.0)
    assert refusal.limit == "requests" and refusal.retry_after_s == pytest.approx(1.0) and refusal.retry_after == "1"
    assert limits.take("k", 1, now=100.5) is not None  # half a request back
    assert limits.take("k", 1, now=101.0) is None
    assert limits.take("other", 1, now=101.0) is None


def test_tokens_and_a_refusal_costs_nothing() -> None:
    limits = KeyLimits(rpm=10, tpm=1000)
    assert limits.take("k", 900, now=0.0) is None
    refusal = limits.take("k", 300, now=0.0)
    assert refusal.limit == "tokens" and refusal.retry_after_s == pytest.approx(12.0)  # 200 at 1000/60 a second
    headers = limits.headers("k", now=0.0)
    assert headers["x-ratelimit-remaining-requests"] == "9"  # the refused request was not charged
    assert headers["x-ratelimit-remaining-tokens"] == "100"
    assert headers["x-ratelimit-reset-tokens"] == "54.000s"
    assert limits.take("k", 5000, now=0.0).retry_after_s == math.inf  # can never fit a minute


def test_quiet_keys_are_forgotten() -> None:
    limits = KeyLimits(rpm=5)
    limits._sweep_at = 10
    for i in range(10):
        limits.take(f"key{i}", 1, now=0.0)
    limits.take("late", 1, now=120.0)  # the others have refilled: their buckets go
    assert list(limits._buckets) == [("late", "requests")]


def test_retry_after_is_the_longest_wait() -> None:
    limits = KeyLimits(rpm=2, tpm=2000)
    assert limits.take("k", 1000, now=0.0) is None and limits.take("k", 1000, now=0.0) is None
    refusal = limits.take("k", 2000, now=15.0)  # half a request back, but only 500 of the 2000 tokens
    assert refusal.limit == "tokens" and refusal.retry_after_s == pytest.approx(45.0)
