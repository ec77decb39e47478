"""`projections`' browser options on a stand-in model file: `plain=True` holds F16
projection weights as Linears over their stored bytes too (not positional tables), and
`audio` gives the products over a window's audio frames (encoder, cross-attention k|v)
their own kernels; the products equal float32 `x @ W.T + b`."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from apr_core import dtypes
from apr_core.quant.registry import NUMPY, Kernels
from apr_core.speech.projections import projections

F16 = dtypes.by_name("F16")
F32 = dtypes.by_name("F32")


def _file():
    """A model file with an encoder and a decoder projection, a bias and a position table."""
    rng = np.random.RandomState(0)
    arrays = {"encoder.blocks.0.mlp.fc1.weight": rng.randn(64, 32).astype(np.float16),
              "decoder.blocks.0.attn.qkv.weight": rng.randn(96, 32).astype(np.float16),
              "decoder.blocks.0.attn.qkv.bias": rng.randn(96).astype(np.float32),
              "decoder.positional_embedding": rng.randn(8, 32).astype(np.float16)}

    def raw(name):
        a = arrays[name]
        return SimpleNamespace(data=a.tobytes(), dtype=F16 if a.dtype == np.float16 else F32,
                               shape=a.shape)
    tensors = {n: SimpleNamespace(shape=a.shape, dtype=raw(n).dtype) for n, a in arrays.items()}
    return SimpleNamespace(tensors=tensors, read_raw=raw), arrays


def test_plain_weights_become_linears_with_audio_kernels_of_their_own():
    model_file, arrays = _file()
    assert projections(model_file, NUMPY) == {}              # F16 stays float32 natively
    audio = Kernels("numpy")
    held = projections(model_file, NUMPY, audio=audio, plain=True)
    assert sorted(held) == ["decoder.blocks.0.attn.qkv", "encoder.blocks.0.mlp.fc1"]
    assert held["encoder.blocks.0.mlp.fc1"].kernels is audio
    assert held["decoder.blocks.0.attn.qkv"].kernels is NUMPY
    x = np.random.RandomState(1).randn(3, 32).astype(np.float32)              # [T, in]
    for stem, lin in held.items():
        w = arrays[stem + ".weight"].astype(np.float32)                        # [out, in]
        want = x @ w.T + arrays.get(stem + ".bias", 0)
        np.testing.assert_allclose(lin.matmul(x), want, rtol=1e-5, atol=1e-5)
        assert lin.data.nbytes == w.size * 2                   # the stored F16 bytes only
