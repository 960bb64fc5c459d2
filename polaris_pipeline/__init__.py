"""polaris-pipeline engine: guaranteed execution of Apache Polaris TASK entities.

The engine (``metastore``, ``tasks``, ``cleanup``, ``storage``, ``runner``,
``cli``...) imports nothing from Dagster; the Dagster integration library is
``polaris_pipeline.dagster``, and the test and demo builders are
``polaris_pipeline.testing``.
"""

__version__ = "0.1.0"
