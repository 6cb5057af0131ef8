"""Conversions between ints and Roman numerals."""

from numerals.table import SYMBOLS


def to_roman(number):
    if not 0 < number < 4000:
        raise ValueError("Roman numerals cover 1..3999")
    parts = []
    for value, symbol in SYMBOLS:
        count, number = divmod(number, value)
        parts.append(symbol * count)
    return "".join(parts)


def from_roman(text):
    raise NotImplementedError
