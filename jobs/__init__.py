"""This code location's jobs: ``jobs.location`` builds them (the task job, the realm
backfill, the leak report and reclaim, retention when configured) and their schedules
for ``definitions.py``.
"""
