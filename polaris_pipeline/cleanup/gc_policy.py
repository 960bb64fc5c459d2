"""``gc.enabled``: whether a table lets its content files be garbage collected."""

from __future__ import annotations

from collections.abc import Mapping

GC_ENABLED_KEY = "gc.enabled"


def gc_enabled(value: str | None) -> bool:
    """``gc.enabled`` as Iceberg reads it (Java's ``Boolean.parseBoolean``).

    On only when absent or equal to ``true`` ignoring case: ``false``, ``0``,
    ``no``, `` true`` and the empty string all turn it off. Java's case folding
    matches no non-ASCII character to the letters of ``true``, so ASCII lower
    case is exact.
    """
    return value is None or (value.isascii() and value.lower() == "true")


def gc_disabling_value(*property_maps: Mapping[str, str] | None) -> str | None:
    """The first ``gc.enabled`` value that turns garbage collection off, else None.

    Any one source is enough: keeping files by mistake costs storage, deleting
    them by mistake loses data another table may still reference.
    """
    for props in property_maps:
        if props and GC_ENABLED_KEY in props:
            value = str(props[GC_ENABLED_KEY])
            if not gc_enabled(value):
                return value
    return None


def gc_kept_note(value: str) -> str:
    """The note a handler leaves when ``gc.enabled`` kept the content files."""
    return f"gc.enabled={value!r}: content files kept"
