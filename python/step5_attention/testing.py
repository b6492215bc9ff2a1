"""Checking helpers: the library's dense oracle and bf16 conversions (numpy).

oracle_attention(config, key, value, positions, query, ...) runs the
oracle over one request: key/value float32 [L, G, D] are its whole history
after the step (positions 0..L-1), positions int64 [n] the rows to compute;
CSA also takes index_key [L, Di], index_z [L], index_query [n, G, I, Di],
index_weight [n, G, I]. It returns {"output": float64 [n, H, D]} (before
bf16 rounding) and, for CSA, "selected": int32 [n, G, K] ascending, -1
padded. forced_selection (int32 [n, G, K], a backend's selection) makes the
oracle attend over those regions instead and adds "selection_acceptable"
(bool [n, G]: min(C, K) distinct closed regions, none scoring below an
unselected one beyond near-tie slack). dense=True gives dense causal
attention over 0..p instead.
oracle_summaries(config, index_key, index_z) gives the stored summaries
[L // 8, Di] as float32. cpp_decode_forward_seconds(config, context,
iterations) times a one-token decode forward_csa from C++ alone (the
baseline of python/bench/overhead.py).
"""

from __future__ import annotations

import numpy as np

from . import _ext  # noqa: F401  (registers LayerConfig before the oracle module loads)
from ._testing_ext import cpp_decode_forward_seconds, oracle_attention, oracle_summaries

__all__ = [
    "bf16_bits",
    "bf16_values",
    "cpp_decode_forward_seconds",
    "fp8_e4m3_values",
    "oracle_attention",
    "oracle_summaries",
    "round_bf16",
]


def bf16_bits(values) -> np.ndarray:
    """float values -> uint16 bf16 bits, round to nearest even (NaN stays NaN)."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    u = f.view(np.uint32)
    nan = np.isnan(f)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    bits = np.where(nan, (u >> 16) | np.uint32(0x40), rounded)
    return bits.astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    """uint16 bf16 bits -> float32 values."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_bf16(values) -> np.ndarray:
    """float values rounded to the nearest bf16, as float32."""
    return bf16_values(bf16_bits(values))


def _e4m3_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.uint32)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 7).astype(np.float64)
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent.astype(np.float64) - 7.0)
    subnormal = mantissa * 2.0**-9
    magnitude = np.where(exponent == 0, subnormal, normal)
    magnitude[(exponent == 0xF) & (mantissa == 7)] = np.nan
    return np.where(codes & 0x80, -magnitude, magnitude).astype(np.float32)


_E4M3 = _e4m3_table()


def fp8_e4m3_values(bits) -> np.ndarray:
    """uint8 fp8 e4m3 (e4m3fn) bits -> float32 values."""
    return _E4M3[np.asarray(bits, dtype=np.uint8)]
