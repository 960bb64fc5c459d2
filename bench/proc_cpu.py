"""CPU seconds spent by the processes a benchmark started, by role.

A background thread reads ``/proc`` five times a second and keeps,
for each descendant of this process, the last CPU time seen (user + system)
and its role, told by its command line: the daemon, the code server, a run
process (the code server starts each run with multiprocessing's spawn), other.
A process that lives less than one interval can be missed; a run lives seconds.
Linux only, as the benchmark host is.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def role_of(cmdline: str) -> str:
    """The part a process plays in a Dagster deployment, from its command line."""
    if "spawn_main" in cmdline:
        return "run"
    if "dagster-daemon" in cmdline:
        return "daemon"
    if " api grpc" in cmdline or "code-server" in cmdline:
        return "code server"
    return "other"


def _stat(pid: str) -> tuple[int, float, str] | None:
    """(parent pid, CPU seconds, start time) of ``pid``, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the command: state, ppid, ... utime (index 11), stime (12), starttime (19).
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS, fields[19]


@dataclass
class ProcessCpu:
    """Samples the CPU of this process's descendants until ``stop``."""

    interval_s: float = 0.2
    _seen: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> ProcessCpu:
        self._thread = threading.Thread(target=self._loop, name="proc-cpu", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        me = os.getpid()
        stats = {pid: s for pid in os.listdir("/proc") if pid.isdigit() and (s := _stat(pid))}
        for pid, (ppid, cpu, started) in stats.items():
            # Walk up to this process (a descendant) or to init (not ours).
            parent, hops = ppid, 0
            while parent not in (me, 0, 1) and hops < 16:
                up = stats.get(str(parent))
                parent, hops = (up[0] if up else 0), hops + 1
            if parent != me:
                continue
            key = (pid, started)
            old = self._seen.get(key)
            if old is None:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                self._seen[key] = (role_of(cmd), cpu)
            elif cpu > old[1]:
                self._seen[key] = (old[0], cpu)

    def by_role(self) -> dict[str, dict[str, float]]:
        """``{role: {"processes": n, "cpu_s": seconds}}``."""
        out: dict[str, dict[str, float]] = {}
        for role, cpu in self._seen.values():
            entry = out.setdefault(role, {"processes": 0, "cpu_s": 0.0})
            entry["processes"] += 1
            entry["cpu_s"] += cpu
        return out
