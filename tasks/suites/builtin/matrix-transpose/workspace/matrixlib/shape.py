"""Matrix dimensions."""


def shape(matrix):
    """(rows, columns); a matrix with no rows is (0, 0)."""
    if not matrix:
        return (0, 0)
    return (len(matrix), len(matrix[0]))
