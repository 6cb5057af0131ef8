"""Parsing and formatting money."""

from decimal import ROUND_HALF_UP, Decimal


def parse_amount(text):
    return Decimal(text.replace(",", ""))


def money(value):
    return f"{Decimal(value).quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,.2f}"
