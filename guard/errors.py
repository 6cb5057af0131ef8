"""The guard's error base: what the command line reports as one clear line."""


class GuardError(Exception):
    """Base of the guard's errors whose message alone tells the user what went wrong (rule files, corpora)."""
