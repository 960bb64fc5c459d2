"""The cache of vended credentials: one per key, made again before it expires.

S3 sessions, Azure SAS and GCS downscoped tokens are keyed by (identity, location set)
and shared by every task with that key (a table's children share their parent's). Made
again ``refresh_margin_s`` before expiry, so a long run never holds a dying one; expired
values are dropped on store, at most ``max_entries`` kept (oldest out).

Not botocore's ``RefreshableCredentials``: it refreshes one unkeyed AWS credential set,
not SAS or GCS tokens, and is synchronous where aiobotocore awaits
``get_frozen_credentials``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from polaris_pipeline.errors import StorageError, one_line

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

DEFAULT_REFRESH_MARGIN_S = 600
MAX_ENTRIES = 1024


class RefreshingCache(Generic[K, V]):
    """Values per key; ``expires_at(value)`` in epoch seconds on ``clock``."""

    def __init__(
        self,
        expires_at: Callable[[V], float],
        *,
        refresh_margin_s: float = DEFAULT_REFRESH_MARGIN_S,
        clock: Callable[[], float] = time.time,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._expires_at = expires_at
        self.refresh_margin_s = refresh_margin_s
        self._clock = clock
        self._max_entries = max_entries
        self._values: dict[K, V] = {}
        # Held while a value is made: concurrent tasks of one table make it once.
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The cached value of ``key`` unless it expires within the margin; else ``make()``."""
        with self._lock:
            now = self._clock()
            cached = self._values.get(key)
            if cached is not None and self._expires_at(cached) - now > self.refresh_margin_s:
                return cached
            fresh = make()
            self._values.pop(key, None)
            for stale in [k for k, v in self._values.items() if self._expires_at(v) <= now]:
                del self._values[stale]
            self._values[key] = fresh
            while len(self._values) > self._max_entries:
                del self._values[next(iter(self._values))]
            return fresh

    def __len__(self) -> int:
        return len(self._values)


def made_or_explained(make: Callable[[], V], what: str) -> V:
    """``make()``, with any error but a StorageError made one StorageError line:
    ``<what>: <type>: <the message's first line>``. The cloud SDKs' messages name
    accounts, codes and endpoints, never keys; only their first line is kept."""
    try:
        return make()
    except StorageError:
        raise
    except Exception as e:
        raise StorageError(f"{what}: {one_line(e)}") from None
