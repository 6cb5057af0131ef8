"""The tasks layer's error base: bad task files, suites and grading set-ups."""


class TaskError(Exception):
    """Base of task errors whose message alone tells the user what went wrong and what to do."""
