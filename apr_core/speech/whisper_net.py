"""The Whisper network in numpy (float32): encoder, decoder with KV cache, logits.

Encoder: two conv1d (kernel 3, padding 1; the second with stride 2) each followed by GELU,
plus sinusoidal positions, pre-LayerNorm blocks (self-attention, MLP with GELU), final
LayerNorm. Decoder: token embedding + learned positions, pre-LN blocks (causal
self-attention with a KV cache, cross-attention on the encoder output whose K/V are
computed once per window, MLP), final LayerNorm; logits = hidden @ embedding^T.

Weights use the APR Whisper names (`names.py`); the fused projections are kept fused
(self-attention q|k|v as one [3d, d] matrix, cross-attention k|v as [2d, d]), so each is
one matrix product. Every product with a weight -- the linear layers, the logits and the
two convolutions (as im2col + one product) -- goes through `self.matmul` (numpy's `@` by
default), the seam where a backend plugs in a faster kernel (the browser's SIMD kernel);
each head of the encoder's attention goes to `self.attention_head` when set (the browser's
kernels: products and softmax), else numpy's blocks (`attention`); GELU is `self.gelu`,
the decoder's cross-attention `self.cross_attention` (`_cross_attention`'s arguments), the
log-mel's STFT product `self.stft_product` (transcribe passes it to mel.py; None: numpy's).
Each decoder step runs inside `self.decoder_scope()` (nothing by default): natively it
keeps BLAS on one thread for the step's tiny products (`apr_native.speech_native`); the
encoder inside `self.encoder_scope()`. The encoder's work on 1500 frames -- products,
GELU, attention heads -- is cut into `self.parts` row blocks / heads mapped by `self.map`
(builtin `map`, one part, by default; natively a thread pool with BLAS on one thread each:
coarse blocks keep two cores busy where BLAS's own fine-grained threads wait on a loaded
machine).
A projection found in `linears` (name without ".weight" -> an object with `matmul(x [N,
in]) -> [N, out]` bias included, `rows(ids)` and `shape`: apr_core.model.weights.Linear,
see `projections`) runs there instead, over its stored bytes on a backend's kernels; the
token embedding's Linear serves both the lookup and the logits.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import numpy as np

from .whisper_math import gelu, layer_norm

# Query rows per block of attention scores, and the fewest rows `WhisperNet.by_rows` splits.
SCORE_ROWS = 256
EMBEDDING = "decoder.token_embedding"


class WhisperConfig(NamedTuple):
    """Hyperparameters (OpenAI's ModelDimensions names)."""

    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int



def _heads(x: np.ndarray, n_head: int) -> np.ndarray:
    """[..., T, d] -> [..., H, T, d/H]."""
    *lead, t, d = x.shape
    return np.ascontiguousarray(np.swapaxes(x.reshape(*lead, t, n_head, d // n_head), -2, -3))


def _merge(x: np.ndarray) -> np.ndarray:
    """[..., H, T, dh] -> [..., T, H*dh]."""
    x = np.swapaxes(x, -2, -3)
    return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
              mask: Optional[np.ndarray] = None, map_fn: Callable = map,
              head_fn: Optional[Callable[..., np.ndarray]] = None) -> np.ndarray:
    """[..., H, Tq, dh] x [..., H, Tk, dh] -> [..., H, Tq, dh] (scaled dot product).

    The softmax runs in place on the scores and its normalisation is applied to the
    [.., Tq, dh] product instead of the [.., Tq, Tk] weights. From `SCORE_ROWS` query rows
    (the encoder's 1500) each head runs on its own (`map_fn` over heads: threads natively)
    in blocks of `SCORE_ROWS` rows, so a block's scores stay in cache through the
    softmax's passes instead of the whole 8 x 1500 x 1500 going to memory on each.
    `head_fn(q [Tq, dh] already scaled, k [Tk, dh], v [Tk, dh]) -> [Tq, dh]`, when given
    (and no mask), computes such a head instead: the browser's SIMD kernels."""
    if q.shape[-2] < SCORE_ROWS:
        return _attention_batched(q, k, v, mask)
    n_q, dh = q.shape[-2:]
    scale = np.float32(1.0 / np.sqrt(dh))
    qf = q.reshape(-1, n_q, dh)                                 # [N, Tq, dh]
    kf = np.ascontiguousarray(k).reshape(-1, k.shape[-2], dh)   # [N, Tk, dh]
    vf = np.ascontiguousarray(v).reshape(-1, v.shape[-2], dh)   # [N, Tk, dh]
    out = np.empty(qf.shape, np.float32)                        # [N, Tq, dh]

    def head(h: int) -> None:
        if head_fn is not None and mask is None:
            out[h] = head_fn(qf[h] * scale, kf[h], vf[h])       # [Tq, dh]
            return
        keys = kf[h].T                                          # [dh, Tk]
        for a in range(0, n_q, SCORE_ROWS):
            b = min(n_q, a + SCORE_ROWS)
            scores = np.dot(qf[h, a:b] * scale, keys)          # [rows, Tk]
            if mask is not None:
                scores += mask[a:b]
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            np.dot(scores, vf[h], out=out[h, a:b])              # [rows, dh]
            out[h, a:b] /= scores.sum(axis=-1, keepdims=True)
    for _ in map_fn(head, range(qf.shape[0])):
        pass
    return out.reshape(q.shape)


def _attention_batched(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                       mask: Optional[np.ndarray]) -> np.ndarray:
    """`attention` for few query rows (decoder steps) in one stacked product."""
    scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
    scores = np.matmul(q * scale, np.swapaxes(k, -1, -2))       # [..., H, Tq, Tk]
    if mask is not None:
        scores += mask
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True)                  # [..., H, Tq, 1]
    out = np.matmul(scores, v)                                  # [..., H, Tq, dh]
    out /= total
    return out


def _matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x [..., in] @ w[out, in]^T -> [..., out], as one 2-D product: numpy's stacked
    matmul does not hand a transposed operand to BLAS, the 2-D one does."""
    flat = x.reshape(-1, x.shape[-1])                           # [N, in]
    return (flat @ w.T).reshape(x.shape[:-1] + (w.shape[0],))


def _cross_attention(q: np.ndarray, keys_t: np.ndarray, values: np.ndarray) -> np.ndarray:
    """q [B, n, H, dh] over one window's cross K^T [H, dh, S] and V [H, S, dh] ->
    [B, n, H * dh]: per head one product over all B * n query rows (beams as rows), so
    each head's keys and values are read once per step, not once per beam."""
    b, n, heads, dh = q.shape
    rows = np.ascontiguousarray(q.reshape(b * n, heads, dh).transpose(1, 0, 2))  # [H, Bn, dh]
    rows *= np.float32(1.0 / np.sqrt(dh))
    scores = np.matmul(rows, keys_t)                            # [H, Bn, S]
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True)                  # [H, Bn, 1]
    out = np.matmul(scores, values)                             # [H, Bn, dh]
    out /= total
    return out.transpose(1, 0, 2).reshape(b, n, heads * dh)     # [B, n, H * dh]


class DecoderState:
    """Per-window decoder cache: cross-attention K^T/V of every layer (shared by all beams)
    and the self-attention K/V of each hypothesis, in buffers [B, H, n_text_ctx, dh] per
    layer of which the first `length` positions are filled."""

    def __init__(self, cross: List[tuple]) -> None:
        self.cross = cross                      # per layer: (K^T [H, dh, S], V [H, S, dh])
        self.self_k: List[Optional[np.ndarray]] = [None] * len(cross)
        self.self_v: List[Optional[np.ndarray]] = [None] * len(cross)
        self.length = 0

    def append(self, layer: int, k: np.ndarray, v: np.ndarray, capacity: int) -> tuple:
        """Store k, v [B, H, n, dh] at positions length.. of `layer`; -> that layer's
        (K, V) views [B, H, length + n, dh]."""
        end = self.length + k.shape[2]
        if self.self_k[layer] is None:
            shape = k.shape[:2] + (capacity, k.shape[3])
            self.self_k[layer] = np.empty(shape, np.float32)
            self.self_v[layer] = np.empty(shape, np.float32)
        keys, values = self.self_k[layer], self.self_v[layer]
        keys[:, :, self.length:end] = k
        values[:, :, self.length:end] = v
        return keys[:, :, :end], values[:, :, :end]

    def reorder(self, rows: np.ndarray) -> None:
        """Keep hypotheses `rows` (beam search: index of each surviving beam's parent);
        only the filled positions are copied."""
        used = self.length
        for i, k in enumerate(self.self_k):
            if k is None:
                continue
            v = self.self_v[i]
            if rows.size == k.shape[0]:
                k[:, :, :used] = k[rows, :, :used]
                v[:, :, :used] = v[rows, :, :used]
            else:
                shape = (rows.size,) + k.shape[1:]
                self.self_k[i], self.self_v[i] = np.empty(shape, np.float32), \
                    np.empty(shape, np.float32)
                self.self_k[i][:, :, :used] = k[rows, :, :used]
                self.self_v[i][:, :, :used] = v[rows, :, :used]


class WhisperNet:
    """Forward passes over float32 weights (name -> array)."""

    def __init__(self, config: WhisperConfig, weights: Dict[str, np.ndarray],
                 matmul: Optional[Callable[[np.ndarray, np.ndarray], np.ndarray]] = None,
                 decoder_scope: Optional[Callable[[], Any]] = None,
                 linears: Optional[Dict[str, Any]] = None) -> None:
        self.config = config
        self.w = weights
        self.linears: Dict[str, Any] = dict(linears or {})
        self.matmul = matmul or _matmul
        self.decoder_scope = decoder_scope or contextlib.nullcontext
        self.encoder_scope: Callable[[], Any] = contextlib.nullcontext
        self.map: Callable = map
        self.parts = 1
        # the encoder's attention per head, (q [T, dh] scaled, k, v [T, dh]) -> [T, dh]
        # (`attention`'s head_fn): None is numpy's; the browser plugs in its kernels
        self.attention_head: Optional[Callable[..., np.ndarray]] = None
        self.gelu: Callable[[np.ndarray], np.ndarray] = gelu   # (the browser: its kernels')
        self.cross_attention: Callable[..., np.ndarray] = _cross_attention   # (same)
        # how a window's cross K^T / V are held for `cross_attention`, (K^T, V) -> (K^T, V)
        # (None: float32 as computed; natively float16, which its kernel reads)
        self.cross_layout: Optional[Callable[..., tuple]] = None
        # the log-mel's STFT product (mel.power_spectrogram's `product`): None is numpy's
        self.stft_product: Optional[Callable[..., np.ndarray]] = None
        self._cross_of: Optional[np.ndarray] = None     # features `_cross` was made from
        self._cross: List[tuple] = []
        self._flat: Dict[str, np.ndarray] = {}   # conv weights as [C_out, C_in * 3] (kept:
        # a kernel that caches weights by identity must see the same array every call)

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        """x [..., in] @ W[out, in]^T + b -> [..., out]."""
        held = self.linears.get(name)
        if held is not None:
            flat = x.reshape(-1, x.shape[-1])                           # [N, in]
            return held.matmul(flat).reshape(x.shape[:-1] + (held.shape[0],))
        y = self.matmul(x, self.w[name + ".weight"])
        bias = self.w.get(name + ".bias")
        return y + bias if bias is not None else y

    def _conv(self, x: np.ndarray, name: str, stride: int) -> np.ndarray:
        """[T, C_in] -> [T / stride, C_out]: kernel 3, padding 1, as im2col + one product."""
        flat = self._flat.get(name)
        if flat is None:
            weight = self.w[name + ".weight"]                           # [C_out, C_in, 3]
            flat = self._flat[name] = np.ascontiguousarray(
                weight.reshape(weight.shape[0], -1))                    # [C_out, C_in * 3]
        taps = flat.shape[1] // x.shape[1]
        padded = np.pad(x, ((1, 1), (0, 0)))                           # [T + 2, C_in]
        t_out = (x.shape[0] - 1) // stride + 1
        columns = np.stack([padded[k:k + stride * (t_out - 1) + 1:stride]
                            for k in range(taps)], axis=-1)            # [T_out, C_in, 3]
        columns = columns.reshape(t_out, -1)                            # [T_out, C_in * 3]
        return self.by_rows(lambda c: self.matmul(c, flat), columns) + self.w[name + ".bias"]

    def by_rows(self, fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
        """fn(x [T, ...]) -> [T, ...], in `self.parts` row blocks through `self.map`."""
        if self.parts <= 1 or x.shape[0] < 2 * SCORE_ROWS:
            return fn(x)
        edges = [x.shape[0] * i // self.parts for i in range(self.parts + 1)]
        return np.concatenate(list(self.map(fn, [x[a:b] for a, b in zip(edges, edges[1:])])))

    def _wide(self, x: np.ndarray, name: str) -> np.ndarray:
        """`linear` over many rows (a window's frames), in row blocks (`by_rows`); a weight
        held in blocks is split by its output rows instead (`_by_outputs`)."""
        held = self.linears.get(name)
        if held is not None and self.parts > 1 and x.shape[0] >= 2 * SCORE_ROWS:
            return self._by_outputs(x, held)
        return self.by_rows(lambda rows: self.linear(rows, name), x)

    def _by_outputs(self, x: np.ndarray, held: Any) -> np.ndarray:
        """x [T, in] @ W^T + b for a Linear `held` over stored blocks, one block of W's rows
        per part (`self.map`), each decoded once (`held.rows`) and multiplied by BLAS:
        splitting x instead would decode every weight once per part."""
        out_dim = held.shape[0]
        edges = [out_dim * i // self.parts // 32 * 32 for i in range(self.parts)] + [out_dim]

        def part(span: tuple) -> np.ndarray:
            w = held.rows(np.arange(span[0], span[1]))                 # [rows, in] float32
            y = np.dot(x, w.T)                                          # [T, rows]
            return y if held.bias is None else y + held.bias[span[0]:span[1]]
        return np.concatenate(list(self.map(part, list(zip(edges, edges[1:])))), axis=1)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """[n_mels, 3000] log-mel -> [n_audio_ctx, n_audio_state] encoder output."""
        with self.encoder_scope():
            return self._encode(mel)

    def _encode(self, mel: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(mel.T, dtype=np.float32)                   # [3000, n_mels]
        x = self.by_rows(self.gelu, self._conv(x, "encoder.conv1", 1))           # [3000, d]
        x = self.by_rows(self.gelu, self._conv(x, "encoder.conv2", 2))           # [1500, d]
        x = x + self.w["encoder.positional_embedding"]                      # [1500, d]
        heads = self.config.n_audio_head
        for i in range(self.config.n_audio_layer):
            p = "encoder.blocks.{}.".format(i)
            h = layer_norm(x, self.w[p + "attn_ln.weight"], self.w[p + "attn_ln.bias"])
            q, k, v = np.split(self._wide(h, p + "attn.qkv"), 3, axis=-1)  # 3 x [T, d]
            a = attention(_heads(q, heads), _heads(k, heads), _heads(v, heads),
                          map_fn=self.map, head_fn=self.attention_head)
            x = x + self._wide(_merge(a), p + "attn.out")
            h = layer_norm(x, self.w[p + "mlp_ln.weight"], self.w[p + "mlp_ln.bias"])
            x = x + self._wide(self.by_rows(self.gelu, self._wide(h, p + "mlp.fc1")), p + "mlp.fc2")
        return layer_norm(x, self.w["encoder.ln_post.weight"], self.w["encoder.ln_post.bias"])

    def start(self, audio_features: np.ndarray) -> DecoderState:
        """A decoder state over one window's encoder output [S, d]. The cross-attention
        K/V are computed once per window: language detection, each temperature of the
        fallback and the decode itself share them while `audio_features` is the same
        array (they are only read)."""
        if self._cross_of is not audio_features:
            self._cross, self._cross_of = self._cross_kv(audio_features), audio_features
        return DecoderState(self._cross)

    def _cross_kv(self, audio_features: np.ndarray) -> List[tuple]:
        """Per decoder layer (K^T [H, dh, S], V [H, S, dh]) of the window's frames."""
        heads = self.config.n_text_head
        cross = []
        with self.encoder_scope():
            for i in range(self.config.n_text_layer):
                kv = self._wide(audio_features, "decoder.blocks.{}.cross_attn.kv".format(i))
                k, v = np.split(kv, 2, axis=-1)                         # 2 x [S, d]
                keys_t = np.ascontiguousarray(np.swapaxes(_heads(k, heads), -1, -2))
                pair = (keys_t, _heads(v, heads))                       # [H, dh, S], [H, S, dh]
                cross.append(self.cross_layout(*pair) if self.cross_layout else pair)
        return cross

    def decode(self, state: DecoderState, tokens: np.ndarray) -> np.ndarray:
        """tokens [B, n] at positions state.length.. -> hidden [B, n, d]; extends the cache."""
        with self.decoder_scope():
            return self._decode(state, tokens)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """[..., d] -> [..., n_vocab] (tied output projection)."""
        with self.decoder_scope():
            return self.linear(hidden, EMBEDDING)                       # no bias: tied

    def _embed(self, tokens: np.ndarray) -> np.ndarray:
        """tokens [B, n] -> their embedding rows [B, n, d] (only those rows decoded)."""
        held = self.linears.get(EMBEDDING)
        if held is None:
            return self.w[EMBEDDING + ".weight"][tokens]
        return held.rows(tokens.reshape(-1)).reshape(tokens.shape + (held.shape[1],))

    def _decode(self, state: DecoderState, tokens: np.ndarray) -> np.ndarray:
        b, n = tokens.shape
        start = state.length
        if start + n > self.config.n_text_ctx:
            raise ValueError("decoder context exceeded")
        x = self._embed(tokens) + \
            self.w["decoder.positional_embedding"][start:start + n]    # [B, n, d]
        heads = self.config.n_text_head
        # [n, start + n] causal mask for the new tokens over cache + themselves
        mask = np.triu(np.full((n, start + n), -np.inf, dtype=np.float32), k=start + 1) \
            if n > 1 else None
        for i in range(self.config.n_text_layer):
            p = "decoder.blocks.{}.".format(i)
            h = layer_norm(x, self.w[p + "attn_ln.weight"], self.w[p + "attn_ln.bias"])
            q, k, v = np.split(self.linear(h, p + "attn.qkv"), 3, axis=-1)  # 3 x [B, n, d]
            k, v = state.append(i, _heads(k, heads), _heads(v, heads),
                                self.config.n_text_ctx)                 # [B, H, T, dh]
            a = attention(_heads(q, heads), k, v, mask)
            x = x + self.linear(_merge(a), p + "attn.out")
            h = layer_norm(x, self.w[p + "cross_attn_ln.weight"], self.w[p + "cross_attn_ln.bias"])
            q = self.linear(h, p + "cross_attn.query").reshape(b, n, heads, -1)  # [B, n, H, dh]
            x = x + self.linear(self.cross_attention(q, *state.cross[i]), p + "cross_attn.out")
            h = layer_norm(x, self.w[p + "mlp_ln.weight"], self.w[p + "mlp_ln.bias"])
            x = x + self.linear(self.gelu(self.linear(h, p + "mlp.fc1")), p + "mlp.fc2")
        state.length = start + n
        return layer_norm(x, self.w["decoder.ln.weight"], self.w["decoder.ln.bias"])


__all__ = ["WhisperConfig", "WhisperNet", "DecoderState"]
