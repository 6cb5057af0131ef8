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
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount

    def withdraw(self, amount):
        if amount <= 0:
            raise ValueError("withdrawal must be positive")
        if amount > self.balance:
            raise InsufficientFunds(f"{self.name}: balance {self.balance}, asked {amount}")
        self.balance -= amount
