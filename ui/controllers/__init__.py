"""Main-thread QObjects that own workers and re-emit their results (STYLE.md §3.2)."""
