"""The body of a CSV file from columns of integers and of ready-made text fields, in two passes (numba).

Knows nothing of tables: every column is either an (R,) row of int64 values, written in decimal as Python's ``str``
writes them, or an (R,) index into a list of text fields (bytes with offsets), each field written as it is. Fields
are separated by ``,`` and rows end in ``\\n``. The first pass sums the row lengths, the second writes into one
buffer of that size: no Python object per element (``domainpar.inference.products`` formats each distinct float
once, in Python, as pandas does).
"""

from __future__ import annotations

import numba
import numpy as np

#: ``kinds`` of a column: int64 values, or indices into the text fields.
INTEGER = 0
TEXT = 1


@numba.njit(cache=True, nogil=True)
def _magnitude(value: int) -> np.uint64:
    """|value| as an unsigned integer (exact for the most negative int64 too)."""
    if value < 0:
        return np.uint64(-(value + 1)) + np.uint64(1)
    return np.uint64(value)


@numba.njit(cache=True, nogil=True)
def _width(value: int) -> int:
    """Characters of ``str(value)``."""
    magnitude = _magnitude(value)
    width = 2 if value < 0 else 1
    ten = np.uint64(10)
    while magnitude >= ten:
        magnitude //= ten
        width += 1
    return width


@numba.njit(cache=True, nogil=True)
def _write_int(out: np.ndarray, at: int, value: int, width: int) -> None:
    """``str(value)`` into out[at:at + width] (``width`` from :func:`_width`)."""
    magnitude = _magnitude(value)
    ten = np.uint64(10)
    if value < 0:
        out[at] = 45  # "-"
    position = at + width - 1
    while True:
        out[position] = np.uint8(np.uint64(48) + magnitude % ten)  # unsigned throughout: no float on the way
        magnitude //= ten
        position -= 1
        if magnitude == np.uint64(0):
            break


@numba.njit(cache=True, nogil=True)
def csv_body(
    ints: np.ndarray, text: np.ndarray, text_start: np.ndarray, text_index: np.ndarray, kinds: np.ndarray, slots: np.ndarray
) -> np.ndarray:
    """The rows of a CSV file, without its header.

    Args:
        ints: (C_int, R) int64 the integer columns.
        text: (B,) uint8 every text field's bytes, one after another.
        text_start: (T + 1,) int64 field t is ``text[text_start[t]:text_start[t + 1]]``.
        text_index: (C_text, R) int64 the field of each row of the text columns.
        kinds: (C,) int64 each column of the file, in order: :data:`INTEGER` or :data:`TEXT`.
        slots: (C,) int64 the column's row in ``ints`` or ``text_index``.

    Returns:
        (bytes,) uint8 the rows, each ending in a newline.
    """
    num_columns = kinds.shape[0]
    rows = ints.shape[1] if ints.shape[0] > 0 else text_index.shape[1]
    size = 0
    for r in range(rows):
        for c in range(num_columns):
            if kinds[c] == INTEGER:
                size += _width(ints[slots[c], r])
            else:
                t = text_index[slots[c], r]
                size += text_start[t + 1] - text_start[t]
        size += num_columns  # the commas and the newline
    out = np.empty(size, dtype=np.uint8)
    at = 0
    for r in range(rows):
        for c in range(num_columns):
            if kinds[c] == INTEGER:
                value = ints[slots[c], r]
                width = _width(value)
                _write_int(out, at, value, width)
                at += width
            else:
                t = text_index[slots[c], r]
                for b in range(text_start[t], text_start[t + 1]):
                    out[at] = text[b]
                    at += 1
            out[at] = 44 if c + 1 < num_columns else 10  # "," or "\n"
            at += 1
    return out
