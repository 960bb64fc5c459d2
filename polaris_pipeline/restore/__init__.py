"""Bringing a dropped table back while its purge is held (``tasks/hold.py``).

``restorable``: whether every file the table's last metadata names still exists.
"""
