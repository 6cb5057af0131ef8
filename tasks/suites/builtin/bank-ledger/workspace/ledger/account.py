"""A single account."""

from decimal import Decimal


class InsufficientFunds(Exception):
    """The account cannot cover a withdrawal."""


class Account:
    def __init__(self, name, opening=Decimal("0")):
        self.name = name
        self.opening = Decimal(opening)
        self.balance = Decimal(opening)

    def deposit(self, amount):
        self.balance += amount

    def withdraw(self, amount):
        self.balance -= amount
