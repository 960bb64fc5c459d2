"""The guard: may these paths be deleted on behalf of this task?

``task.Guard.for_task`` is the one entry point: a purge builds its task's guard from
the roots the catalog recorded (``DecodedTask.roots``) and asks it before deleting
(``Guard.may_delete``), which applies both rules: the path rule (``paths.py``:
strictly inside a recorded root and the allowed prefixes, no link out) and the
shared-location rule (``shared_location.py``: no live entity uses the files).
"""
