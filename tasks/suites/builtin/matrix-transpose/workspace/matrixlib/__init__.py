"""Plain-list matrices."""

from matrixlib.ops import multiply, transpose
from matrixlib.shape import shape

__all__ = ["multiply", "shape", "transpose"]
