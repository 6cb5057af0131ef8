"""Matrix operations."""

from matrixlib.shape import shape


def transpose(matrix):
    rows, cols = shape(matrix)
    return [[matrix[j][i] for j in range(rows)] for i in range(cols)]


def multiply(a, b):
    rows, inner = shape(a)
    inner_b, cols = shape(b)
    if inner != inner_b:
        raise ValueError(f"cannot multiply {rows}x{inner} by {inner_b}x{cols}")
    return [[sum(a[i][k] * b[k][j] for k in range(inner)) for j in range(cols)] for i in range(rows)]
