"""Small descriptive statistics helpers."""

from statskit.core import mean, median, mode
from statskit.describe import describe

__all__ = ["describe", "mean", "median", "mode"]
