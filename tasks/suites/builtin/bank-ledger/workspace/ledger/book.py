"""The journal of every posted entry."""

from ledger.transfer import transfer


class Ledger:
    def __init__(self):
        self.accounts = {}
        self.entries = []

    def open(self, account):
        self.accounts[account.name] = account
        return account

    def deposit(self, name, amount, description="deposit"):
        self.accounts[name].deposit(amount)
        self.entries.append((name, description, amount))

    def transfer(self, src, dst, amount, description="transfer"):
        transfer(self.accounts[src], self.accounts[dst], amount)
        self.entries.append((src, description, -amount))
        self.entries.append((dst, description, amount))

    def statement(self, name):
        balance = 0
        lines = []
        for account, description, amount in reversed(self.entries):
            if account == name:
                balance += amount
                lines.append((description, amount, balance))
        return lines
