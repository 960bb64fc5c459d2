"""This code location's resources: ``resources.location`` reads them from the environment
(the library's reading, ``deployment_from_env``) for ``definitions.py``.
"""
