"""The rollout layer's error base."""


class RolloutError(Exception):
    """Base of rollout errors whose message alone tells the user what went wrong (scripts, policies)."""
