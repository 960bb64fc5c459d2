"""Pytest fixtures; see the module docstring of each fixture."""
