"""Typed errors of the engine. Each says what is wrong in one line."""

from __future__ import annotations


class PolarisPipelineError(Exception):
    """Base of every error the engine raises on purpose.

    ``permanent`` says whether a task that failed with it can heal by being
    retried: False (the default) for anything that depends on the outside world
    (storage, network, the metastore), True for what depends only on the task's
    own row, which never changes (see ``is_permanent``).
    """

    permanent: bool = False


class PayloadError(PolarisPipelineError, ValueError):
    """A task's properties or payload cannot be decoded.

    ``task`` names the task ("realm/id name") when the caller knows it. Permanent:
    the payload (and the task type) are the row's own, so a retry decodes the same.
    """

    permanent = True

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


class OutsideCatalogLocations(StorageError):
    """A table's location lies outside every location its catalog allows.

    Permanent: Polaris never creates such a table, and both the location and the
    catalog's allowedLocations are the row's own, so a retry finds the same.
    """

    permanent = True


class StorageConfigError(StorageError):
    """The storage configuration file is missing or malformed."""


class GuardRefusal(PolarisPipelineError):
    """A path lies outside the locations a task may delete from.

    Permanent: the roots come from what the catalog recorded on the row, and the
    refused paths from the task's payload or immutable Iceberg files.
    """

    permanent = True

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"refused {path!r}: {reason}")


# The words every shared-location refusal carries in the task's last error: how
# `tasks requeue --allow-shared-location` knows the guard refused the task.
SHARED_LOCATION_REFUSED = "a live entity shares the table's files"


class SharedLocationRefusal(GuardRefusal):
    """A live table or view shares the dropped one's location, or uses one of its files.

    Permanent: it is dead-lettered at once. An operator who has checked requeues the
    task with ``--allow-shared-location``.
    """


class TableRestored(PolarisPipelineError):
    """The dropped table (or view) is live again: a live entity of its realm has exactly
    its last metadata file (re-registered by any client). Its purge ends as ``restored``
    (``execution/attempt_end.py``), nothing deleted; never done, never dead.

    ``entity``: which live entity (``Overlap.entity()``); ``metadata_file``: the file.
    """

    def __init__(self, entity: str, metadata_file: str) -> None:
        self.entity = entity
        self.metadata_file = metadata_file
        super().__init__(f"restored as {entity} from {metadata_file}: nothing deleted")


class LeaseLost(PolarisPipelineError):
    """The holder no longer holds the task's lease; it must stop at once."""


def is_permanent(exc: BaseException) -> bool:
    """Whether a task that failed with ``exc`` fails the same way on every retry.

    Such a task is dead-lettered at once (no confirmation attempt: the inputs that
    decide it are the row itself, so a second attempt could only repeat it). Every
    other error, unexpected ones included, is transient and backs off.
    """
    return isinstance(exc, PolarisPipelineError) and exc.permanent


def one_line(exc: BaseException) -> str:
    """``exc`` as its type and the first line of its message ("Type: first line",
    "Type" alone for an empty message): how a failure is recorded and shown."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def first_error(exc: Exception) -> str:
    """The first problem of a pydantic ``ValidationError`` as ``field: message``.

    pydantic prefixes a validator's own message with "Value error, "; the rule's
    words are the message, so the prefix goes.
    """
    problems: list[dict[str, object]] = getattr(exc, "errors", lambda: [])()
    if not problems:
        return str(exc)
    first = problems[0]
    message = str(first.get("msg", "")).removeprefix("Value error, ")
    where = ".".join(str(part) for part in first.get("loc", ()))  # type: ignore[attr-defined]
    return f"{where}: {message}" if where else message
