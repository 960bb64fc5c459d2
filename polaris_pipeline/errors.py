"""Typed errors of the engine. Each says what is wrong in one line."""

from __future__ import annotations


class PolarisPipelineError(Exception):
    """Base of every error the engine raises on purpose."""


class PayloadError(PolarisPipelineError, ValueError):
    """A task's properties or payload cannot be decoded.

    ``task`` names the task ("realm/id name") when the caller knows it.
    """

    def __init__(self, message: str, *, task: str | None = None) -> None:
        self.reason = message
        self.task = task
        super().__init__(f"task {task}: {message}" if task else message)

    def for_task(self, task: str) -> PayloadError:
        return PayloadError(self.reason, task=task)


class MetastoreError(PolarisPipelineError):
    """The metastore cannot be reached, or does not have the expected shape."""


class SchemaMismatchError(MetastoreError):
    """An existing ``entities`` table differs from Polaris's layout."""


class StorageError(PolarisPipelineError):
    """A storage location cannot be resolved or an operation on it failed."""


class StorageConfigError(StorageError):
    """The storage configuration file is missing or malformed."""


class GuardRefusal(PolarisPipelineError):
    """A path lies outside the locations a task may delete from."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"refused {path!r}: {reason}")


class LeaseLost(PolarisPipelineError):
    """The holder no longer holds the task's lease; it must stop at once."""
