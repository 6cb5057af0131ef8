"""Compact binary encoding of token-level arrays.

Sub-trajectories hold tens of thousands of tokens; JSON lists would be ~6x larger and slow to parse.
Fixed little-endian dtypes keep the bytes portable between SQLite, PostgreSQL and any reader
(``numpy.frombuffer(blob, "<i4")`` is all a trainer needs).
"""

from collections.abc import Sequence

import numpy as np

TOKEN_DTYPE = np.dtype("<i4")
MASK_DTYPE = np.dtype("u1")
LOGPROB_DTYPE = np.dtype("<f4")


def encode_token_ids(token_ids: Sequence[int] | np.ndarray) -> bytes:
    """Token ids as int32 little-endian bytes."""
    return np.asarray(token_ids, dtype=TOKEN_DTYPE).tobytes()


def decode_token_ids(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=TOKEN_DTYPE)


def encode_action_mask(mask: Sequence[int] | np.ndarray) -> bytes:
    """Action mask (1 on policy tokens, 0 elsewhere) as one byte per token."""
    return np.asarray(mask, dtype=MASK_DTYPE).tobytes()


def decode_action_mask(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=MASK_DTYPE)


def encode_logprobs(logprobs: Sequence[float] | np.ndarray) -> bytes:
    """Per-token logprobs as float32 little-endian bytes (0.0 where the mask is 0)."""
    return np.asarray(logprobs, dtype=LOGPROB_DTYPE).tobytes()


def decode_logprobs(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=LOGPROB_DTYPE)
