"""The trainer's error base."""


class TrainerError(Exception):
    """Base of trainer errors whose message alone tells the user what went wrong (checkpoints, runs)."""
