"""Ports of 127.0.0.1 for servers a test starts.

No pytest import: ``bench/`` uses builders/pgbouncer.py, which uses this.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port of 127.0.0.1 free right now, for a server started by a test.

    The kernel picks it, so parallel test workers never pick the same one.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
