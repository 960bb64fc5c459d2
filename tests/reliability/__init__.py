"""Reliability scenarios: races, crashes, pauses, database and storage faults, hostile input,
clock skew and secrets, each checked against the claim that no task is lost, none runs twice
at once, and nothing outside a dropped table is deleted. ``report.py`` renders the results
into ``docs/reliability.md``.
"""
