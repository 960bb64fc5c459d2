"""What a table's run does with the files its metadata no longer names (a leaf).

``off``: nothing. ``report`` (the default): list the table's prefix after the
referenced purge and record what is there and would go, deleting nothing.
``delete``: delete it, behind the overlap rule, the roots and the drop time
(``unreferenced/listing.py``).
"""

from __future__ import annotations

from enum import StrEnum


class UnreferencedMode(StrEnum):
    OFF = "off"
    REPORT = "report"
    DELETE = "delete"

    @classmethod
    def parse(cls, value: object) -> UnreferencedMode:
        """``value`` as a mode (case and spaces ignored); ValueError naming the choices."""
        text = str(value).strip().lower()
        try:
            return cls(text)
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            raise ValueError(f"unreferenced mode must be one of {choices}, not {value!r}") from None


DEFAULT_UNREFERENCED_MODE = UnreferencedMode.REPORT
