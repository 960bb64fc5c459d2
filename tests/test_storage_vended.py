"""The one cache of vended credentials (S3 sessions, Azure SAS, GCS downscoped tokens)."""

from __future__ import annotations

import pytest

from polaris_pipeline.storage.credentials.cache import RefreshingCache


class Token:
    def __init__(self, name: str, expires_at: float) -> None:
        self.name = name
        self.expires_at = expires_at


def _cache(now: list[float], **kwargs: int) -> RefreshingCache[str, Token]:
    return RefreshingCache(
        lambda t: t.expires_at, refresh_margin_s=600, clock=lambda: now[0], **kwargs
    )


def test_a_value_is_reused_until_the_margin_and_made_again_inside_it() -> None:
    now = [0.0]
    cache = _cache(now)
    made: list[str] = []

    def make(name: str) -> Token:
        made.append(name)
        return Token(name, 3600)

    first = cache.get("k", lambda: make("a"))
    now[0] = 2999  # 601 s left
    assert cache.get("k", lambda: make("b")) is first
    now[0] = 3001  # 599 s left: made again before it expires
    assert cache.get("k", lambda: make("c")).name == "c"
    assert made == ["a", "c"]


def test_expired_values_are_dropped_and_the_size_is_bounded() -> None:
    now = [0.0]
    cache = _cache(now, max_entries=3)
    cache.get("old", lambda: Token("old", 100))
    now[0] = 200
    cache.get("new", lambda: Token("new", 10_000))
    assert len(cache) == 1  # "old" expired and went when "new" was stored
    for key in ("a", "b", "c"):
        cache.get(key, lambda: Token("x", 10_000))
    assert len(cache) == 3
    # "new" was the oldest entry: it went, so asking for it makes it again.
    assert cache.get("new", lambda: Token("again", 10_000)).name == "again"


def test_a_failed_make_stores_nothing_and_keeps_what_was_there() -> None:
    now = [0.0]
    cache = _cache(now)
    kept = cache.get("k", lambda: Token("kept", 700))
    now[0] = 200  # inside the margin: a new one is asked for, and fails

    def fail() -> Token:
        raise RuntimeError("STS is down")

    with pytest.raises(RuntimeError):
        cache.get("k", fail)
    assert len(cache) == 1
    now[0] = 0
    assert cache.get("k", fail) is kept
