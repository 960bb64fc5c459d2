"""Leaked table roots: files of dropped tables and views that no task will ever clean.

A task row gone does not prove its files are gone (Polaris 1.7's batch cleanup
and Azure's per-file deletes swallow failed deletes; before 1.7 a delete
manifest stopped manifest cleanup). The sweeper only sees tasks that still exist;
this package lists the catalogs' locations instead and reports the table roots
that no live entity owns and no task names (``find.py``), and reclaims one on an
operator's word (``reclaim.py``). It imports no Dagster.
"""
