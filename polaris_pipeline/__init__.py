"""polaris-pipeline engine: guaranteed execution of Apache Polaris TASK entities.

The engine (``metastore``, ``tasks``, ``cleanup``, ``storage``, ``runner``,
``cli``...) imports nothing from Dagster; the Dagster integration library is
``polaris_pipeline.dagster``. The builders of the demo and the tests (the
repository's top-level ``builders/``) are not part of the installed package.
"""

__version__ = "0.1.0"
