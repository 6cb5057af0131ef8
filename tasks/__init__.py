"""Tasks: what a task is (format, suites, SWE-bench-format import) and how it is graded."""
