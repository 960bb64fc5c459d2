"""This code location's sensors: ``sensors.location`` builds them (the sweeper that
launches the task job, its watch, the run report and the alerts) for ``definitions.py``.
"""
