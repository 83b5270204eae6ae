"""Main-thread QObjects that own workers and re-emit their results.

docs/architecture.md says which work runs on which thread.
"""
