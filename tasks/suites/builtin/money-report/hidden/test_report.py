import importlib
from decimal import Decimal

from rlguard_checks import same


def _rg():
    return importlib.import_module("reportgen")


def test_parse_amount_with_separators():
    assert same(_rg().parse_amount("1,234.50"), Decimal("1234.50"))


def test_parse_negative():
    assert same(_rg().parse_amount("-12"), Decimal("-12"))


def test_money_thousands_and_two_decimals():
    assert same(_rg().money(Decimal("1234.5")), "1,234.50")


def test_money_rounds_half_up():
    assert same(_rg().money(Decimal("2.345")), "2.35")
    assert same(_rg().money(Decimal("-0.005")), "-0.01")


def test_render_total_is_exact():
    rows = [
        {"item": "a", "amount": "0.10"},
        {"item": "b", "amount": "0.20"},
        {"item": "c", "amount": "1,000"},
    ]
    assert same(_rg().render(rows).splitlines()[-1], "TOTAL 1,000.30")
