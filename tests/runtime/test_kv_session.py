"""Session files (`apr_core.formats.session`, `apr_core.runtime.kv_session`) without a real
model: byte-exact round trips for every KV type, damaged files refused with their codes,
mismatched settings refused with E016, and the block pool's KV taken out and given back
under another block size with the prefix cache finding it."""
from __future__ import annotations

import types

import numpy as np
import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.formats.session import decode_session, kv_size
from apr_core.model import kv_types
from apr_core.model.config import RopeScaling
from apr_core.runtime import kv_session
from apr_core.runtime.batching.paged_kv import BlockPool

N_LAYERS, N_KV, HEAD_DIM, CTX = 3, 2, 64, 512
SHA = "ab" * 32


def fake_model(kv_type="f16", ctx=CTX, theta=10000.0, n_layers=N_LAYERS):
    config = types.SimpleNamespace(n_layers=n_layers, n_kv_heads=N_KV, head_dim=HEAD_DIM,
                                   max_ctx=ctx, positions="rope", rope_theta=theta,
                                   rope_dim=HEAD_DIM, rope_scaling=RopeScaling())
    return types.SimpleNamespace(config=config, kv_type=kv_type)


def random_state(kv_type: str, n: int, seed: int = 0) -> kv_session.KVState:
    """Rows as the cache stores them: encoded from random float32 `[n_kv, n, hd]`."""
    rng = np.random.default_rng(seed)
    rows = [kv_types.encode(kv_type, rng.standard_normal((N_KV, n, HEAD_DIM), np.float32))
            for _ in range(2 * N_LAYERS)]                      # each [n_kv, n, row]
    tokens = [int(t) for t in rng.integers(0, 49152, n)]
    return kv_session.KVState(tokens, kv_type, HEAD_DIM, rows[0::2], rows[1::2], SHA, CTX,
                              kv_session.positions_of(fake_model().config),
                              {"mode": "chat", "messages": [{"role": "user", "content": "é"}]})


@pytest.mark.parametrize("kv_type", kv_types.NAMES)
def test_round_trip_is_byte_exact(tmp_path, kv_type):
    state = random_state(kv_type, 37)
    path = tmp_path / "s.aprs"
    written = kv_session.save(path, state)
    assert written == path.stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == ["s.aprs"]       # no temporary left
    back = kv_session.load(path)
    assert back.tokens == state.tokens and back.kv_type == kv_type
    assert back.extra == state.extra and back.model_sha256 == SHA
    for a, b in zip(state.k + state.v, back.k + back.v):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    kv_session.check_fits(back, SHA, fake_model(kv_type))            # fits: no error
    assert kv_session.to_bytes(state) == path.read_bytes()           # in memory, the same


def test_damaged_files_get_their_codes(tmp_path):
    path = tmp_path / "s.aprs"
    kv_session.save(path, random_state("q8_0", 40))
    data = path.read_bytes()
    meta = decode_session(data).metadata
    for cut in (0, 3, 20, 47, 48, len(data) // 2, len(data) - 17, len(data) - 1):
        with pytest.raises(AprError) as err:
            kv_session.from_bytes(data[:cut])
        assert err.value.code is ErrorCode.CORRUPT, (cut, err.value)
    with pytest.raises(AprError) as err:
        kv_session.from_bytes(data + b"\0")
    assert err.value.code is ErrorCode.CORRUPT
    # one flipped byte in the metadata, the token ids, the KV rows, the footer's CRC
    kv_start = len(data) - 16 - kv_size(meta)
    for where in (40, kv_start - 8, kv_start + 5, len(data) - 100, len(data) - 16):
        bad = bytearray(data)
        bad[where] ^= 0x10
        with pytest.raises(AprError) as err:
            kv_session.from_bytes(bytes(bad))
        assert err.value.code is ErrorCode.CHECKSUM, (where, err.value)
    bad = bytearray(data)
    bad[0:4] = b"GGUF"
    with pytest.raises(AprError) as err:
        kv_session.from_bytes(bytes(bad))
    assert err.value.code is ErrorCode.FORMAT


def test_other_version_is_refused(tmp_path):
    import struct
    import zlib
    path = tmp_path / "s.aprs"
    kv_session.save(path, random_state("f16", 8))
    data = bytearray(path.read_bytes())
    struct.pack_into("<H", data, 4, 2)                               # major 2
    struct.pack_into("<I", data, len(data) - 16, zlib.crc32(bytes(data[:-16])))
    with pytest.raises(AprError) as err:
        kv_session.from_bytes(bytes(data))
    assert err.value.code is ErrorCode.VERSION


@pytest.mark.parametrize("change, field", [
    ({"sha": "cd" * 32}, "model_sha256"),
    ({"kv_type": "q8_0"}, "kv_type"),
    ({"ctx": 1024}, "context"),
    ({"theta": 500000.0}, "positions"),
    ({"n_layers": 4}, "geometry"),
])
def test_mismatched_settings_are_refused(tmp_path, change, field):
    path = tmp_path / "s.aprs"
    kv_session.save(path, random_state("f16", 8))
    state = kv_session.load(path)
    model = fake_model(change.get("kv_type", "f16"), change.get("ctx", CTX),
                       change.get("theta", 10000.0), change.get("n_layers", N_LAYERS))
    with pytest.raises(AprError) as err:
        kv_session.check_fits(state, change.get("sha", SHA), model)
    assert err.value.code is ErrorCode.MISMATCH and err.value.context["field"] == field


@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
def test_pool_capture_and_restore_under_another_block_size(kv_type):
    """Blocks registered as the scheduler registers them (chain hashes of full blocks)
    come out as one position-ordered state and go into a pool of another block size,
    where a prefix lookup of the same tokens finds every full block with the same rows."""
    source = BlockPool(N_LAYERS, N_KV, HEAD_DIM, 16, 8, kv_type=kv_type)
    saved = random_state(kv_type, 45, seed=3)           # 5 full blocks of 8, 5 spare
    table = [source.allocate() for _ in range(6)][::-1]              # any block order
    parent = None
    for i, block in enumerate(table[:5]):
        for cache, rows in ((source.k, saved.k), (source.v, saved.v)):
            for layer, r in zip(cache, rows):                           # [n_kv, 8, row]
                layer[:, block * 8:(block + 1) * 8] = r[:, i * 8:(i + 1) * 8]
        parent = source.chain_hash(parent, saved.tokens[i * 8:(i + 1) * 8])
        source.register(block, parent)
    source.release_all(table)
    state = kv_session.capture(source, fake_model(kv_type), saved.tokens, SHA)
    assert state.tokens == saved.tokens[:40]
    for a, b in zip(state.k + state.v, saved.k + saved.v):
        assert a.tobytes() == np.ascontiguousarray(b[:, :40]).tobytes()

    target = BlockPool(N_LAYERS, N_KV, HEAD_DIM, 12, 16, kv_type=kv_type)
    assert kv_session.restore(target, state) == 32                   # 2 full blocks of 16
    assert target.used == 0 and target.cached == 2
    parent = None
    for i in range(2):
        parent = target.chain_hash(parent, state.tokens[i * 16:(i + 1) * 16])
        block = target.lookup(parent)
        assert block is not None
        for cache, rows in ((target.k, state.k), (target.v, state.v)):
            for layer, r in zip(cache, rows):
                assert layer[:, block * 16:(block + 1) * 16].tobytes() == \
                    np.ascontiguousarray(r[:, i * 16:(i + 1) * 16]).tobytes()


def test_restore_needs_room():
    pool = BlockPool(N_LAYERS, N_KV, HEAD_DIM, 2, 8)
    state = random_state("f32", 24)
    with pytest.raises(AprError) as err:
        kv_session.restore(pool, state)
    assert err.value.code is ErrorCode.MEMORY and pool.free == 2
