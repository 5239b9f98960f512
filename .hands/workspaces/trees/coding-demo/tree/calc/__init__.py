"""A tiny calculator."""


def add(a, b):
    return a + b


def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values)
