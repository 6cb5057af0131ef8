"""Filtering and ordering."""


def select(items, tag=None, done=None):
    result = []
    for item in items:
        if tag is not None and tag not in item.tags:
            continue
        if done is not None and item.done != done:
            continue
        result.append(item)
    return result


def by_priority(items):
    return sorted(items, key=lambda item: (-item.priority, item.title))
