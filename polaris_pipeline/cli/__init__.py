"""The ``polaris-pipeline`` command line (entry point ``polaris_pipeline.cli:main``)."""

from polaris_pipeline.cli.main import main

__all__ = ["main"]
