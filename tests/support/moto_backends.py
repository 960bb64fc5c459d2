"""moto's servers, without the directory listing it makes for every request.

moto's server finds the backend of a request by listing its own package's directory
(``moto.backends.list_of_moto_modules``: about 170 ``stat`` calls, 0.9 ms) on every
request, and a test process sends it tens of thousands. The directory does not change
while a process runs, so the servers the tests start list it once: same names, same
order, so the same backend is found (test_moto_backends). Measured 2026-12-07 on
tests/test_versioned_purge.py and tests/test_unreferenced.py in one process: 46 s of CPU
with the listing per request, 40 s listed once.

``python -m tests.support.moto_backends ARGS`` is ``python -m moto.server ARGS`` with the
listing made once (the IAM-enforcing server runs in its own process).
"""

from __future__ import annotations

from moto import backends

# moto's own function, before any server here replaced it (test_moto_backends compares).
MOTOS_OWN_LISTING = backends.list_of_moto_modules


def list_backends_once() -> None:
    """Make ``moto.backends.list_of_moto_modules`` answer from one listing (once: a
    function other than moto's own is that listing already)."""
    if backends.list_of_moto_modules is not MOTOS_OWN_LISTING:
        return
    names = tuple(MOTOS_OWN_LISTING())

    def listed() -> tuple[str, ...]:
        return names

    backends.list_of_moto_modules = listed


if __name__ == "__main__":
    from moto.server import main

    list_backends_once()
    main()
