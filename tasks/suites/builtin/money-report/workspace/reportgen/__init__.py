"""Expense reports."""

from reportgen.amounts import money, parse_amount
from reportgen.report import render

__all__ = ["money", "parse_amount", "render"]
