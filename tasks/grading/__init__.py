"""Grading on the host: a fresh sandbox, the final workspace and the pristine tests."""
