"""The ``batchfit`` command line, on top of the core: nothing in planner/ or ui/ imports it."""
