"""What the sweeper sensor leaves on the Dagster instance: its name and its cursor.

The sweeper writes them; the backlog's freshness check reads them. A leaf, so that
the backlog never imports the sweeper (the sweeper calls the backlog).

Cursor: JSON ``{"next_sweep_ms": <epoch ms>, "backlog": <bool>, "reported_ms": <epoch ms>}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from polaris_pipeline.tasks.formatting import iso_utc

SENSOR_NAME = "polaris_task_sweeper"


@dataclass(frozen=True)
class SweepCursor:
    next_sweep_ms: int | None = None
    backlog: bool = False
    # When the backlog asset and its checks were last reported.
    reported_ms: int | None = None

    @classmethod
    def parse(cls, raw: str | None) -> SweepCursor:
        """The stored cursor; anything unreadable counts as none (sweep now)."""
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
            next_ms = data.get("next_sweep_ms")
            reported = data.get("reported_ms")
            return cls(
                next_sweep_ms=int(next_ms) if next_ms is not None else None,
                backlog=bool(data.get("backlog", False)),
                reported_ms=int(reported) if reported is not None else None,
            )
        except (ValueError, TypeError, AttributeError):
            return cls()

    def dump(self) -> str:
        # The ISO time is for the people reading the sensor page; parse ignores it.
        return json.dumps(
            {
                "next_sweep_ms": self.next_sweep_ms,
                "next_sweep": iso_utc(self.next_sweep_ms) if self.next_sweep_ms else None,
                "backlog": self.backlog,
                "reported_ms": self.reported_ms,
            }
        )
