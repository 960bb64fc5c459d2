"""What one task's run inside a step of the task job gave (``task_step.run_task``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polaris_pipeline.execution.outcome import TaskOutcome


@dataclass(frozen=True)
class TaskResult:
    """The step's output value, its metadata, and the outcome (None: nothing ran, or the
    lease was lost: no work this step claims)."""

    output: dict[str, Any]
    metadata: dict[str, Any]
    outcome: TaskOutcome | None = None
