from decimal import Decimal

from ledger import Account, Ledger


def test_deposit_and_transfer():
    book = Ledger()
    book.open(Account("alice", Decimal("10")))
    book.open(Account("bob"))
    book.transfer("alice", "bob", Decimal("4"))
    assert book.accounts["alice"].balance == Decimal("6")
    assert book.accounts["bob"].balance == Decimal("4")
