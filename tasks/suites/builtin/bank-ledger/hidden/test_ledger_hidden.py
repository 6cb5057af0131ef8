import importlib
from decimal import Decimal

import pytest
from rlguard_checks import same

D = Decimal


def _l():
    return importlib.import_module("ledger")


def _book():
    book = _l().Ledger()
    book.open(_l().Account("alice", D("10")))
    book.open(_l().Account("bob", D("1")))
    return book


def test_non_positive_amounts_rejected():
    account = _l().Account("x", D("5"))
    for amount in (D("0"), D("-1")):
        with pytest.raises(ValueError):
            account.deposit(amount)
        with pytest.raises(ValueError):
            account.withdraw(amount)
    assert same(account.balance, D("5"))


def test_overdraft_raises_and_keeps_balance():
    account = _l().Account("x", D("5"))
    with pytest.raises(_l().InsufficientFunds):
        account.withdraw(D("5.01"))
    assert same(account.balance, D("5"))


def test_failed_transfer_changes_nothing():
    book = _book()
    with pytest.raises(_l().InsufficientFunds):
        book.transfer("alice", "bob", D("50"))
    assert same((book.accounts["alice"].balance, book.accounts["bob"].balance), (D("10"), D("1")))


def test_plain_transfer_function_is_atomic():
    src, dst = _l().Account("s", D("1")), _l().Account("d")
    with pytest.raises(_l().InsufficientFunds):
        _l().transfer(src, dst, D("2"))
    assert same((src.balance, dst.balance), (D("1"), D("0")))


def test_statement_oldest_first_with_running_balance():
    book = _book()
    book.deposit("alice", D("5"), "salary")
    book.transfer("alice", "bob", D("3"), "rent")
    book.deposit("alice", D("1"), "refund")
    assert same(
        book.statement("alice"),
        [("salary", D("5"), D("15")), ("rent", D("-3"), D("12")), ("refund", D("1"), D("13"))],
    )
    assert same(book.statement("bob"), [("rent", D("3"), D("4"))])
