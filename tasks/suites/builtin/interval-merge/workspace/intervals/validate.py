"""Input checks."""


def check(pair):
    start, end = pair
    if start > end:
        raise ValueError(f"interval start {start} is after its end {end}")
    return (start, end)
