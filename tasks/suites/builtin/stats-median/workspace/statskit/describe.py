"""A one-call summary of a sample."""

from statskit.core import mean, median


def describe(values):
    return {
        "count": len(values),
        "mean": mean(values),
        "median": median(values),
        "min": min(values),
        "max": max(values),
    }
