"""polaris-pipeline engine: guaranteed execution of Apache Polaris TASK entities.

This package imports nothing from Dagster; the Dagster layer lives in the
top-level ``resources``, ``sensors``, ``jobs`` and ``assets`` packages.
"""

__version__ = "0.1.0"
