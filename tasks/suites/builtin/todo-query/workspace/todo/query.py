"""Filtering and ordering."""


def select(items, tag=None, done=None):
    result = []
    for item in items:
        if tag and tag not in item.tags:
            continue
        if done and item.done != done:
            continue
        result.append(item)
    return result


def by_priority(items):
    return sorted(items, key=lambda item: item.priority)
