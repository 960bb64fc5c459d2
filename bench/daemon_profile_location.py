"""The repository's code location, profiled when asked (``bench/run_profile.py``).

``python -m bench.daemon_profile`` loads this instead of ``definitions`` so that
each run worker profiles itself, the location's imports included.
"""

from bench.run_profile import profile_if_asked

profile_if_asked()

from definitions import defs  # noqa: E402  # imported under the profiler

__all__ = ["defs"]
