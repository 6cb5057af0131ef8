"""Merging overlapping intervals."""

from intervals.validate import check


def merge(pairs):
    merged = []
    for start, end in (check(p) for p in pairs):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def total_length(pairs):
    return sum(end - start for start, end in pairs)
