"""Calibration on real hardware: ``batchfit calibrate`` and the process it runs.

The work happens in a separate process that imports torch (``python -m
planner.calibrate``, :mod:`planner.calibrate.__main__`), so an OOM, a crash or a hang
never takes its caller, the CLI or the GUI, down. The parent side
(:mod:`planner.calibrate.runner`) imports neither torch nor numpy-heavy measurement
code. See ``docs/calibration.md``.

Modules:

* ``protocol``: the JSON-lines events, error kinds and exit codes (stdlib only);
* ``runner``: the parent: spawn, read progress, time limit, cancel, classify;
* ``__main__``: the child's entry point; ``pipeline``: its stages;
* ``environment`` (stage 1), ``probes`` (GEMMs, proxy steps and memory: stages 2-3),
  ``edge`` (the largest micro-batch, probed in a fresh process: stage 4),
  ``collectives`` (the optional all-reduce sweep: stage 5), ``proxy`` (the few-layer
  stand-in of the model they train);
* ``fit``: measurements -> the planner's parameters (numpy);
* ``records``, ``profile``, ``apply``: the profile file and what the planner takes
  from it.

Importing this package imports nothing heavy: the child must be able to report a
missing torch (or numpy) from an interpreter that has neither.
"""
