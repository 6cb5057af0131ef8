"""Moving money between accounts."""


def transfer(src, dst, amount):
    dst.deposit(amount)
    src.withdraw(amount)
