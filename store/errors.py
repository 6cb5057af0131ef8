"""The store's error base."""


class StoreError(Exception):
    """Base of the store's errors whose message alone tells the user what went wrong."""
