"""cProfile for the processes of a benchmark's code location, asked for by an env var.

A bench code location calls ``profile_if_asked()`` first thing: with
``$BENCH_PROFILE_DIR`` set, the process (the code server, or a run worker the
code server spawned) profiles itself from there on, the location's own imports
included, and writes ``<dir>/<role>-<pid>.prof`` as it exits. Unset, nothing
happens: the deployed location (``definitions.py``) never calls it.
"""

import atexit
import cProfile
import multiprocessing
import os
from pathlib import Path

PROFILE_ENV = "BENCH_PROFILE_DIR"


def profile_if_asked() -> None:
    out = os.environ.get(PROFILE_ENV)
    if not out:
        return
    # A run worker is a child the code server spawned; the code server is not.
    role = "run" if multiprocessing.parent_process() is not None else "server"
    profile = cProfile.Profile()
    profile.enable()

    def dump() -> None:
        profile.disable()
        profile.dump_stats(str(Path(out) / f"{role}-{os.getpid()}.prof"))

    atexit.register(dump)
