"""Transformer building blocks in vectorized numpy (float32 throughout).

Norms (RMSNorm, LayerNorm), activations (SiLU, exact and tanh GELU), rotary position
embeddings in both conventions with frequency scaling, and grouped-query attention with a
causal mask and optional sliding window. Everything works on whole sequences (`[T, ...]`),
so prefill and one-token decode share the same code.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from ..errors import AprError, ErrorCode
from .config import RopeScaling

# Queries handled per attention step: bounds the [heads, block, L] score matrix of a long
# prefill (256 x 4096 x 9 heads = 36 MiB) while keeping each matmul large.
ATTN_QUERY_BLOCK = 256


# --------------------------------------------------------------------------- norms

class Norm:
    """RMSNorm (`x / rms(x) * w`) or LayerNorm (`(x - mean) / std * w + b`) over the last
    axis. `w` already includes the family's stored-weight offset (HF Gemma: 1 + w)."""

    def __init__(self, kind: str, weight: np.ndarray, bias: Optional[np.ndarray],
                 eps: float) -> None:
        self.kind = kind
        self.weight = np.ascontiguousarray(weight, np.float32)
        self.bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
        self.eps = float(eps)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.kind == "rms":
            return rms_norm(x, self.weight, self.eps)
        return layer_norm(x, self.weight, self.bias, self.eps)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """`[..., d] -> [..., d]`: x * rsqrt(mean(x^2) + eps) * weight."""
    var = np.mean(np.square(x), axis=-1, keepdims=True)            # [..., 1]
    return (x * (1.0 / np.sqrt(var + np.float32(eps)))) * weight


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: Optional[np.ndarray],
               eps: float) -> np.ndarray:
    """`[..., d] -> [..., d]`: (x - mean) / sqrt(var + eps) * weight + bias."""
    mean = np.mean(x, axis=-1, keepdims=True)                       # [..., 1]
    centred = x - mean
    var = np.mean(np.square(centred), axis=-1, keepdims=True)      # [..., 1]
    out = centred * (1.0 / np.sqrt(var + np.float32(eps))) * weight
    return out if bias is None else out + bias


# --------------------------------------------------------------------------- activations

def silu(x: np.ndarray) -> np.ndarray:
    # x / (1 + exp(-x)) as torch computes it; exp overflowing to inf for very negative x
    # gives the right limit (-0), so only the warning is silenced. (The tanh form of the
    # sigmoid loses precision to cancellation there.)
    with np.errstate(over="ignore"):
        return x / (np.float32(1.0) + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = np.float32(math.sqrt(2.0 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorized erf (numpy has none): Abramowitz & Stegun 7.1.26, |error| < 1.5e-7."""
    sign = np.sign(x)
    a = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
        -1.453152027 + t * 1.061405429))))
    return (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32)


def gelu(x: np.ndarray) -> np.ndarray:
    return np.float32(0.5) * x * (np.float32(1.0) + erf(x * np.float32(1.0 / math.sqrt(2.0))))


ACTIVATION_FNS = {"silu": silu, "gelu": gelu, "gelu_tanh": gelu_tanh}


# --------------------------------------------------------------------------- RoPE

def rope_inv_freq(dim: int, theta: float, scaling: RopeScaling,
                  freq_factors: Optional[np.ndarray] = None) -> np.ndarray:
    """Angular frequency per rotated pair, `[dim // 2]` float64, scaled as configured.

    `freq_factors` (GGUF `rope_freqs.weight`, how llama.cpp stores LLaMA-3 scaling) divide
    the frequencies, exactly as ggml does.
    """
    inv = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)   # [dim/2]
    if scaling.kind == "linear":
        inv = inv / scaling.factor
    elif scaling.kind == "llama3":
        inv = _llama3_scale(inv, scaling)
    elif scaling.kind == "yarn":
        inv = _yarn_scale(inv, dim, theta, scaling)
    elif scaling.kind != "none":
        raise AprError(ErrorCode.UNSUPPORTED, "unsupported RoPE scaling", kind=scaling.kind)
    if freq_factors is not None:
        inv = inv / np.asarray(freq_factors, np.float64).reshape(-1)
    return inv


def _llama3_scale(inv: np.ndarray, s: RopeScaling) -> np.ndarray:
    """LLaMA 3.1 scaling: long wavelengths slowed by `factor`, short ones kept, and a
    linear blend (in 1/wavelength) between the two cut-offs."""
    wavelen = 2.0 * math.pi / inv
    low_cut = s.original_max_ctx / s.low_freq_factor      # longer than this: scale fully
    high_cut = s.original_max_ctx / s.high_freq_factor    # shorter than this: keep
    blend = (s.original_max_ctx / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor)
    blended = (1.0 - blend) * inv / s.factor + blend * inv
    out = np.where(wavelen > low_cut, inv / s.factor, inv)
    middle = (wavelen >= high_cut) & (wavelen <= low_cut)
    return np.where(middle, blended, out)


def _yarn_scale(inv: np.ndarray, dim: int, theta: float, s: RopeScaling) -> np.ndarray:
    """YaRN (Peng et al. 2023): pairs that turn more than `beta_fast` times over the
    original context keep their frequency (extrapolate), pairs that turn fewer than
    `beta_slow` times are slowed by `factor` (interpolate), with a linear ramp over the
    pair indices between (the cut-offs rounded outwards to whole pairs)."""
    def pair_index(rotations: float) -> float:     # the pair turning that often
        return dim * math.log(s.original_max_ctx / (rotations * 2.0 * math.pi)) / (
            2.0 * math.log(theta))
    low = max(math.floor(pair_index(s.beta_fast)), 0)
    high = min(math.ceil(pair_index(s.beta_slow)), dim - 1)
    if high == low:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp                                   # 1: extrapolate, 0: interpolate
    return inv / s.factor * (1.0 - keep) + inv * keep


class Rope:
    """Rotary embedding over the first `dim` features of each head.

    style "neox": feature i pairs with i + dim/2 (HF checkpoints, Qwen2 GGUFs);
    style "interleaved": feature 2i pairs with 2i + 1 (ggml's "normal" rope, which LLaMA
    GGUFs need because llama.cpp's converter permuted their Q/K rows).
    """

    def __init__(self, dim: int, theta: float, style: str, scaling: RopeScaling,
                 freq_factors: Optional[np.ndarray] = None) -> None:
        if style not in ("neox", "interleaved"):
            raise AprError(ErrorCode.UNSUPPORTED, "unknown RoPE style", style=style)
        self.dim = dim
        self.style = style
        self.inv_freq = rope_inv_freq(dim, theta, scaling, freq_factors)   # [dim/2]
        self.magnitude = scaling.attention_factor if scaling.kind == "yarn" else 1.0

    def tables(self, positions: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """cos and sin, each `[T, dim/2]` float32, for absolute `positions [T]` (times
        YaRN's attention factor, which scales q.k by its square)."""
        angles = np.asarray(positions, np.float64)[:, None] * self.inv_freq[None, :]
        if self.magnitude != 1.0:
            return ((np.cos(angles) * self.magnitude).astype(np.float32),
                    (np.sin(angles) * self.magnitude).astype(np.float32))
        return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)

    def apply(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """`x [T, H, head_dim]` -> rotated copy `[T, H, head_dim]`."""
        return rotate(x, cos, sin, self.dim, self.style == "neox")


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, dim: int, neox: bool
           ) -> np.ndarray:
    """RoPE: `x [T, H, head_dim]` with its first `dim` features rotated by the angles of
    `cos, sin [T, dim/2]` -> a new array; neox pairs feature i with i + dim/2, else 2i
    with 2i + 1."""
    half = dim // 2
    c, s = cos[:, None, :], sin[:, None, :]                          # [T, 1, dim/2]
    out = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:dim]                       # [T, H, dim/2] each
        out[..., :half] = a * c - b * s
        out[..., half:dim] = b * c + a * s
    else:
        a, b = x[..., 0:dim:2], x[..., 1:dim:2]                       # [T, H, dim/2] each
        out[..., 0:dim:2] = a * c - b * s
        out[..., 1:dim:2] = a * s + b * c
    return out


# --------------------------------------------------------------------------- attention

def attention_mask(q_pos: np.ndarray, n_keys: int, window: Optional[int]) -> np.ndarray:
    """Additive mask `[T, n_keys]`: 0 where query at q_pos may see key j (j <= q_pos and,
    with a window, q_pos - j < window), -inf elsewhere."""
    keys = np.arange(n_keys)[None, :]                                 # [1, L]
    q = np.asarray(q_pos)[:, None]                                    # [T, 1]
    allowed = keys <= q
    if window is not None:
        allowed &= (q - keys) < window
    return np.where(allowed, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray, scale: float,
              window: Optional[int] = None) -> np.ndarray:
    """Grouped-query attention: `q [T, H, hd]`, `k, v [n_kv, L, hd]` (keys at positions
    0..L-1), query positions `q_pos [T]` -> `[T, H * hd]`. Query head h reads KV head
    h // (H / n_kv), as transformers' repeat_kv and llama.cpp do."""
    T, H, hd = q.shape
    n_kv, L, _ = k.shape
    group = H // n_kv
    out = np.empty((T, H * hd), np.float32)
    # Scores and softmax in float64: with large Q/K (Qwen2's K biases reach ~150) a dot
    # product is a difference of big terms, and float32 cancellation there cost 10x the
    # logit error of torch on Qwen2.5. The cost is small next to the weight matvecs
    # (n_kv * L * hd values cast per layer), and V stays float32.
    k_t = k.transpose(0, 2, 1).astype(np.float64)                     # [n_kv, hd, L]
    for start in range(0, T, ATTN_QUERY_BLOCK):
        stop = min(T, start + ATTN_QUERY_BLOCK)
        t = stop - start
        qb = q[start:stop].reshape(t, n_kv, group, hd).transpose(1, 2, 0, 3)
        qb = qb.reshape(n_kv, group * t, hd).astype(np.float64) * scale   # [n_kv, g*t, hd]
        scores = np.matmul(qb, k_t).reshape(n_kv, group, t, L)       # [n_kv, g, t, L]
        scores += attention_mask(q_pos[start:stop], L, window)        # [t, L] broadcast
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        probs = probs.astype(np.float32).reshape(n_kv, group * t, L)
        ctx = np.matmul(probs, v)                                     # [n_kv, g*t, hd]
        ctx = ctx.reshape(n_kv, group, t, hd).transpose(2, 0, 1, 3)   # [t, n_kv, g, hd]
        out[start:stop] = ctx.reshape(t, H * hd)
    return out


__all__ = ["Norm", "rms_norm", "layer_norm", "silu", "gelu", "gelu_tanh", "erf",
           "ACTIVATION_FNS", "Rope", "rope_inv_freq", "rotate", "attention", "attention_mask"]
