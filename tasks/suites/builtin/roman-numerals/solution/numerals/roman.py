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
    total, rest = 0, text
    for value, symbol in SYMBOLS:
        while rest.startswith(symbol):
            total += value
            rest = rest[len(symbol):]
    if rest or not 0 < total < 4000 or to_roman(total) != text:
        raise ValueError(f"not a canonical Roman numeral: {text!r}")
    return total
