"""Builders for the demo, the benches and the tests: Iceberg tables written with
pyiceberg, and the Polaris TASK rows that drop them, built on the engine's own
encoders; a catalog row; and what the benchmarks share with the tests (the throwaway
PostgreSQL database, a free port, PgBouncer, the ``dagster-daemon`` harness, a run's
stored times, the soak's Polaris-like writer, the model of Polaris's leasing).
``bench/`` imports nothing of ``tests/``: what both use lives here.

Not installed: ``polaris_pipeline`` never imports this package. It uses some of
pyiceberg's private writers (delete manifests, partition statistics), so a
pyiceberg upgrade may need it adjusted.
"""
