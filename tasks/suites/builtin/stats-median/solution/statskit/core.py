"""Central tendency of a list of numbers."""

from collections import Counter


def mean(values):
    if not values:
        raise ValueError("mean of empty data")
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("median of empty data")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 0:
        return (ordered[middle - 1] + ordered[middle]) / 2
    return ordered[middle]


def mode(values):
    """Most common value; ties go to the smallest value."""
    if not values:
        raise ValueError("mode of empty data")
    counts = Counter(values)
    best = max(counts.values())
    return min(value for value, count in counts.items() if count == best)
