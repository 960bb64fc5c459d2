"""The repository's code location, plus a ``faulty://`` filesystem for slow or failing stores.

For the daemon tests that need a store that pauses or fails on purpose:
registering the protocol here runs in every process that loads the location
(the daemon's code server, each run worker and its step processes), the only
way to reach them. The definitions themselves are the repository's, unchanged.
"""

from typing import Any

import fsspec

from tests.reliability.faults import FaultyFileSystem


class AbsoluteFaultyFileSystem(FaultyFileSystem):
    """``faulty://tmp/x/y`` is the local ``/tmp/x/y`` behind the reliability fault plan.

    The path guard reads a non-file URI's first segment as its authority (the
    bucket of an object store), so the URIs are written that way and the
    leading slash is put back here.
    """

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        stripped = super()._strip_protocol(path)
        return stripped if stripped.startswith("/") else "/" + stripped


fsspec.register_implementation("faulty", AbsoluteFaultyFileSystem, clobber=True)

from definitions import defs  # noqa: E402  # after the registration, which it must see

__all__ = ["defs"]
