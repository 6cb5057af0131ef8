"""Matrix operations."""

from matrixlib.shape import shape


def transpose(matrix):
    rows, _ = shape(matrix)
    return [[matrix[j][i] for j in range(rows)] for i in range(rows)]


def multiply(a, b):
    rows, inner = shape(a)
    _, cols = shape(b)
    return [[sum(a[i][k] * b[k][j] for k in range(inner)) for j in range(cols)] for i in range(rows)]
