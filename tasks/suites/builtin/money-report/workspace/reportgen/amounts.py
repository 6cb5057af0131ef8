"""Parsing and formatting money."""


def parse_amount(text):
    return float(text)


def money(value):
    return str(round(value, 2))
