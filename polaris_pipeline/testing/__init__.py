"""Builders for tests and the demo: Iceberg tables written with pyiceberg, and the
Polaris TASK rows that drop them, built on the engine's own encoders.

Not part of the engine: nothing under ``polaris_pipeline`` imports this package
except ``demo.py`` and the tests. It uses some of pyiceberg's private writers
(delete manifests, partition statistics), so a pyiceberg upgrade may need it
adjusted.
"""
