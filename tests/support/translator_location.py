"""The repository's code location with a user's translator (``LakeTranslator``).

For the daemon tests of the translator: what a project writes in its own
``definitions.py`` to change what the UI shows.
"""

from polaris_pipeline.dagster import build_defs_from_env
from tests.support.translators import LakeTranslator

defs = build_defs_from_env(translator=LakeTranslator())

__all__ = ["defs"]
