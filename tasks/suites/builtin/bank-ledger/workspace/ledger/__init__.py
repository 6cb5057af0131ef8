"""Accounts, transfers and statements."""

from ledger.account import Account, InsufficientFunds
from ledger.book import Ledger
from ledger.transfer import transfer

__all__ = ["Account", "InsufficientFunds", "Ledger", "transfer"]
