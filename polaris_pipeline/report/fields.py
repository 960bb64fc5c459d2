"""The wording of an outcome, in one place: each number named once per surface (CLI JSON
key, Dagster metadata label, step output key), and every other label, key and phrase
the renderers (``outcome_line``, ``outcome_json``, ``outcome_metadata``, ``totals``, the
translator) share.

The CLI's JSON keys and the step output keys are public (scripts): never rename one.
The metadata labels are for display only: a step's numbers are stored and read back
under machine names (``step_record.py``), so a label may be reworded freely.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutcomeField:
    """One number of an outcome, named once per surface (None: not on that surface)."""

    attr: str  # the attribute of OutcomeFacts and of OutcomeTotals
    json_key: str | None  # the CLI's --json
    label: str  # Dagster metadata of a step or a run: display only, never read back
    output_key: str | None  # a task step's output value


OUTCOME_FIELDS: tuple[OutcomeField, ...] = (
    OutcomeField("files_deleted", "files_deleted", "files deleted", "deleted"),
    OutcomeField("files_missing", "already_gone", "files already gone", None),
    # Metadata: an int, what storage reported (a lower bound when some reported none).
    OutcomeField("bytes_freed", "bytes_freed", "bytes freed", "bytes_freed"),
    OutcomeField("refused", "paths_refused", "refused paths", "refused"),
    # The CLI's JSON lists the children's ids instead (``children``).
    OutcomeField("child_tasks", None, "child tasks", "children"),
)
# Tasks whose storage reported no sizes: ``bytes freed`` is then a lower bound.
SIZES_UNREPORTED = "tasks without sizes"

# Files deleted on a store that keeps deleted objects (bucket versioning, soft
# delete: ``storage/retention_probe.py``), on the same surfaces. Apart from
# OUTCOME_FIELDS, and shown only when not zero, so that what unversioned storage
# reports stays as it was. Their bytes are never in ``bytes_freed``.
RETENTION_FIELDS: tuple[OutcomeField, ...] = (
    OutcomeField("files_retained", "files_retained", "files kept by versioning", "files_retained"),
    # Metadata: an int, the sizes known (a lower bound when some were not reported).
    OutcomeField("bytes_retained", "bytes_retained", "bytes kept by versioning", "bytes_retained"),
    OutcomeField(
        "retention_unknown",
        "retention_unknown",
        "files kept or freed: unknown",
        "retention_unknown",
    ),
)
# The JSON key next to ``bytes_freed`` saying what became of deleted files' bytes:
# ``freed``, ``kept``, ``unknown``, ``mixed``; null when nothing was deleted.
RETENTION = "retention"

# A dropped table's unreferenced files (``unreferenced/listing.py``), on the same
# surfaces; apart from OUTCOME_FIELDS, whose five numbers every total adds up. Files
# and bytes are what was deleted (``delete``) or would go (``report``, a dry run).
UNREFERENCED_FIELDS: tuple[OutcomeField, ...] = (
    OutcomeField(
        "unreferenced_files", "unreferenced_files", "unreferenced files", "unreferenced_files"
    ),
    OutcomeField(
        "unreferenced_bytes", "unreferenced_bytes", "unreferenced bytes", "unreferenced_bytes"
    ),
    OutcomeField(
        "unreferenced_kept_newer",
        "unreferenced_kept_newer",
        "unreferenced kept as newer than the drop",
        "unreferenced_kept_newer",
    ),
    # Objects still under the table's prefix after the phase (0: the prefix is empty).
    OutcomeField(
        "unreferenced_left",
        "unreferenced_left",
        "objects left under the table",
        "unreferenced_left",
    ),
)
# The metadata entry and JSON key holding the phase's whole report (its one line).
UNREFERENCED = "unreferenced"

# Tasks whose kept files' sizes storage did not report: "bytes kept" is then a lower bound.
RETAINED_SIZES_UNREPORTED = "tasks without sizes of kept files"
STATUS = "status"  # a step that ran one task: its status
BY_STATUS = "by status"  # the child tasks a step ran, by status
PERMANENT = "permanent"  # a failed task's step: whether the failure is permanent
# A group of child tasks that failed: how many failed, how many were done before.
FAILED_CHILDREN = "failed child tasks"
CHILDREN_DONE = "child tasks done"

# What an outcome whose shared-location guard an operator overrode says, and the key of
# the live entity it went past in the CLI's JSON and a step's output.
SHARED_LOCATION_OVERRIDDEN = "shared-location guard overridden"
SHARED_LOCATION_KEY = "shared_location_overridden"
# A restored outcome (``Status.RESTORED``): the live entity, under this label in a step's
# metadata and this key in the CLI's JSON and a step's output.
RESTORED_AS = "restored as"
RESTORED_AS_KEY = "restored_as"


def restored_text(entity: str) -> str:
    """What a restored outcome says on every surface: the table is live again."""
    return f"{RESTORED_AS} {entity} (its last metadata file): purge ended, nothing deleted"
