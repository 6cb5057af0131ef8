"""Moving money between accounts."""


def transfer(src, dst, amount):
    src.withdraw(amount)
    dst.deposit(amount)
