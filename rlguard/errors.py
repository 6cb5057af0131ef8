"""Errors that the command line reports as one clear line instead of a traceback."""


class RlguardError(Exception):
    """Base for errors whose message alone tells the user what went wrong and what to do."""
