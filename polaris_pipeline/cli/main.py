"""``polaris-pipeline``: the operator's command line (entry point ``polaris_pipeline.cli:main``).

Errors are one clear line on stderr and a non-zero exit, never a traceback. A task's
failure is reported once, in its outcome line on stdout; stderr carries the log only
with ``-v`` (and the command's own warnings always).
Exit codes (``cli.context``): 0 success, 1 a task run or swept failed, 2 bad
input or unreachable services, 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from polaris_pipeline.cli.context import EXIT_ERROR
from polaris_pipeline.cli.guard_indexes import cmd_guard_indexes
from polaris_pipeline.cli.leaks import cmd_leaks
from polaris_pipeline.cli.parser import build_parser
from polaris_pipeline.cli.restore import cmd_restore
from polaris_pipeline.cli.run import cmd_run, cmd_sweep
from polaris_pipeline.cli.tasks import (
    cmd_discard,
    cmd_grant_role,
    cmd_init,
    cmd_list,
    cmd_requeue,
    cmd_show,
)
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.storage.redact import redact

# (command, tasks action) -> its handler.
COMMANDS: dict[tuple[str, str | None], Callable[[argparse.Namespace, TextIO], int]] = {
    ("init-metastore", None): cmd_init,
    ("grant-role", None): cmd_grant_role,
    ("guard-indexes", None): cmd_guard_indexes,
    ("tasks", "list"): cmd_list,
    ("tasks", "show"): cmd_show,
    ("tasks", "requeue"): cmd_requeue,
    ("tasks", "run"): cmd_run,
    ("tasks", "discard"): cmd_discard,
    ("tasks", "restore"): cmd_restore,
    ("sweep", None): cmd_sweep,
    ("leaks", None): cmd_leaks,
}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Each failure is said once: in its outcome line (stdout). The log repeats it on
    # stderr only when asked (-v), with what was done around it and any traceback.
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.CRITICAL,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handler = COMMANDS[(args.command, getattr(args, "tasks_command", None))]
    try:
        return handler(args, out or sys.stdout)
    except (PolarisPipelineError, ValueError) as exc:
        # The last guard: an error that quotes a URL or a setting shows no secret.
        print(f"polaris-pipeline: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(
            "polaris-pipeline: interrupted; leases lapse after the lease timeout", file=sys.stderr
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
