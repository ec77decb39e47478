"""APR v2 encryption: encrypt -> decrypt is byte-identical (password and recipient, raw
and compressed payloads); wrong password/recipient or tampered ciphertext is E005 with no
output file; header, metadata and index stay readable without a key; tensors decrypt one
at a time (streaming and random access)."""
import pytest

from apr_core import crypto, dtypes
from apr_core.crypto import keys
from apr_core.errors import AprError, ErrorCode
from apr_core.formats import flags as F
from apr_core.formats.apr2 import read_apr2, write_apr2
from apr_core.formats.apr2_encrypt import ARGON2, decrypt_apr2, encrypt_apr2, unlock
from apr_core.formats.apr2_stream import StreamingLoader
from apr_core.formats.open import open_model
from apr_core.tensor import RawTensor

pytestmark = pytest.mark.skipif(
    not all(crypto.available(op) for op in ("encrypt_aes256gcm", "argon2id", "x25519")),
    reason="encryption needs a native crypto provider")
_NATIVE = crypto.available("sign_ed25519")
# Built only when a provider can derive public keys (the Python 3.8 run has none).
KEY = keys.from_seed(bytes(range(32))) if _NATIVE else None
OTHER = keys.from_seed(bytes(range(1, 33))) if _NATIVE else None
# A cheap Argon2id cost for the many-file tests; the file records it (see the module doc
# of apr2_encrypt). test_password_round_trip_seed_parameters uses seed 003's values.
CHEAP = {"m_cost": 64, "t_cost": 1, "p_cost": 1}


def _tensors():
    by = dtypes.BY_NAME
    return [RawTensor("emb", by["F32"], (16, 8), bytes(range(256)) * 2),
            RawTensor("q", by["Q8_0"], (2, 32), bytes(range(68))),
            RawTensor("z", by["U8"], (5000,), bytes(5000))]


@pytest.fixture(params=[None, "lz4", "zstd"])
def plain(request, tmp_path):
    path = tmp_path / "plain.apr"
    write_apr2(path, _tensors(), {"name": "enc", "vocab": ["a", "b"]},
               compression=request.param)
    return path


def test_password_round_trip_seed_parameters(plain, tmp_path):
    sealed, back = tmp_path / "e.apr", tmp_path / "d.apr"
    with read_apr2(str(plain)) as model:
        encrypt_apr2(model, str(sealed), password="correct horse")
    with read_apr2(str(sealed)) as model:
        record = model.metadata["encryption"]
        assert {k: record[k] for k in ARGON2} == {"m_cost": 19456, "t_cost": 2, "p_cost": 1}
        assert model.flags & F.ENCRYPTED
        decrypt_apr2(model, str(back), password="correct horse")
    assert back.read_bytes() == plain.read_bytes()


def test_recipient_round_trip(plain, tmp_path):
    sealed, back = tmp_path / "e.apr", tmp_path / "d.apr"
    with read_apr2(str(plain)) as model:
        encrypt_apr2(model, str(sealed), recipient=KEY.public)
    with read_apr2(str(sealed)) as model:
        decrypt_apr2(model, str(back), key=KEY)
    assert back.read_bytes() == plain.read_bytes()


def test_tensors_read_directly_and_streamed(plain, tmp_path):
    sealed = tmp_path / "e.apr"
    with read_apr2(str(plain)) as model:
        encrypt_apr2(model, str(sealed), password="pw", argon2=CHEAP)
    expected = {t.name: t.data for t in _tensors()}
    with open_model(str(sealed), password="pw") as model:
        assert {n: model.read_raw(n).data for n in reversed(list(model.tensors))} == expected
    loader = StreamingLoader(str(sealed))
    with pytest.raises(AprError) as err:
        loader.unlock(password="wrong")
    assert err.value.code == ErrorCode.DECRYPT
    loader.unlock(password="pw")
    assert loader.load_tensor("q").data == expected["q"]
    loader.close()


def test_inspect_needs_no_key_but_tensors_do(plain, tmp_path):
    sealed = tmp_path / "e.apr"
    with read_apr2(str(plain)) as model:
        encrypt_apr2(model, str(sealed), recipient=KEY.public)
    with open_model(str(sealed), verify=False) as model:
        assert model.metadata["name"] == "enc"
        assert [t.shape for t in model.tensors.values()] == [(16, 8), (2, 32), (5000,)]
        with pytest.raises(AprError) as info:
            model.read_raw("emb")
        assert info.value.code is ErrorCode.UNSUPPORTED
    # ciphertext hides the zeros
    assert bytes(5000) not in sealed.read_bytes()


@pytest.mark.parametrize("kwargs", [{"password": "wrong"}, {"key": OTHER}, {}])
def test_wrong_secret_is_e005_and_writes_nothing(plain, tmp_path, kwargs):
    for mode in ({"password": "pw", "argon2": CHEAP}, {"recipient": KEY.public}):
        sealed, out = tmp_path / "e.apr", tmp_path / "out.apr"
        with read_apr2(str(plain)) as model:
            encrypt_apr2(model, str(sealed), **mode)
        with read_apr2(str(sealed)) as model:
            with pytest.raises(AprError) as info:
                decrypt_apr2(model, str(out), **kwargs)
            assert info.value.code is ErrorCode.DECRYPT
            with pytest.raises(AprError) as info:
                unlock(model, **kwargs)
            assert info.value.code is ErrorCode.DECRYPT
        assert not out.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["e.apr", "plain.apr"]


def test_tampered_ciphertext_is_e005_and_writes_nothing(plain, tmp_path):
    sealed = tmp_path / "e.apr"
    with read_apr2(str(plain)) as model:
        encrypt_apr2(model, str(sealed), password="pw", argon2=CHEAP)
    with read_apr2(str(sealed)) as model:
        spans = [(t.offset, t.size) for t in model.tensors.values()]
    data = sealed.read_bytes()
    for offset, size in spans:
        for where in (offset, offset + 12, offset + size - 1):   # nonce, body, tag
            bad = bytearray(data)
            bad[where] ^= 0x20
            with pytest.raises(AprError) as info:
                model = read_apr2(bytes(bad), verify=False)
                unlock(model, password="pw")
                decrypt_apr2(model, str(tmp_path / "out.apr"), password="pw")
            assert info.value.code is ErrorCode.DECRYPT
            assert not (tmp_path / "out.apr").exists()


def test_index_entry_is_authenticated(tmp_path):
    """Swapping two same-sized payloads (or renaming a tensor) breaks authentication."""
    by = dtypes.BY_NAME
    plain, sealed = tmp_path / "p.apr", tmp_path / "e.apr"
    write_apr2(plain, [RawTensor("a", by["U8"], (64,), b"A" * 64),
                       RawTensor("b", by["U8"], (64,), b"B" * 64)], {})
    with read_apr2(str(plain)) as model:
        encrypt_apr2(model, str(sealed), password="pw", argon2=CHEAP)
    data = bytearray(sealed.read_bytes())
    with read_apr2(bytes(data)) as model:
        a, b = model.tensors["a"], model.tensors["b"]
    data[a.offset:a.offset + a.size], data[b.offset:b.offset + b.size] = (
        data[b.offset:b.offset + b.size], data[a.offset:a.offset + a.size])
    model = read_apr2(bytes(data), verify=False)
    unlock(model, password="pw")
    with pytest.raises(AprError) as info:
        model.read_raw("a")
    assert info.value.code is ErrorCode.DECRYPT


def test_refusals(plain, tmp_path):
    sealed = tmp_path / "e.apr"
    with read_apr2(str(plain)) as model:
        with pytest.raises(AprError):
            encrypt_apr2(model, str(sealed), password="pw", recipient=KEY.public)
        with pytest.raises(AprError):
            decrypt_apr2(model, str(sealed), password="pw")      # not encrypted
        encrypt_apr2(model, str(sealed), password="pw", argon2=CHEAP)
    with read_apr2(str(sealed)) as model:
        with pytest.raises(AprError):
            encrypt_apr2(model, str(tmp_path / "x.apr"), password="pw")
    meta_tampered = sealed.read_bytes().replace(b'"t_cost": 1', b'"t_cost": 9')
    from apr_core.formats.apr2_layout import FOOTER_MAGIC, Footer
    import zlib
    body = meta_tampered[:-16]
    fixed = body + Footer(zlib.crc32(body), FOOTER_MAGIC, len(body) + 16).pack()
    with read_apr2(fixed) as model:
        with pytest.raises(AprError) as info:
            unlock(model, password="pw")
        assert info.value.code is ErrorCode.DECRYPT


@pytest.mark.native
def test_cli_trust_commands(tmp_path, monkeypatch, capsys):
    import json
    from apr_native.cli.main import main
    plain = tmp_path / "m.apr"
    write_apr2(plain, _tensors(), {"name": "cli"}, compression="lz4")
    key = str(tmp_path / "k")
    assert main(["keygen", "-o", key]) == 0
    assert (tmp_path / "k.pub").exists() and oct((tmp_path / "k").stat().st_mode)[-3:] == "600"
    assert main(["keygen", "-o", key]) == 2                      # no silent overwrite
    assert main(["sign", str(plain), "--key", key, "-o", str(tmp_path / "s.apr")]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "s.apr"), "--trusted-key", key + ".pub",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "trusted"
    assert main(["verify", str(tmp_path / "s.apr")]) == 0
    assert "provenance unknown" in capsys.readouterr().out
    assert main(["verify", str(plain), "--trusted-key", key + ".pub"]) == 5
    monkeypatch.setenv("APR_TEST_PW", "s3cret")
    assert main(["encrypt", str(plain), "--password-env", "APR_TEST_PW", "-o",
                 str(tmp_path / "e.apr")]) == 0
    assert main(["inspect", str(tmp_path / "e.apr")]) == 0
    out = capsys.readouterr()
    assert "s3cret" not in out.out + out.err
    (tmp_path / "pw.txt").write_text("wrong\n")
    assert main(["decrypt", str(tmp_path / "e.apr"), "--password-file",
                 str(tmp_path / "pw.txt"), "-o", str(tmp_path / "d.apr")]) == 5
    assert not (tmp_path / "d.apr").exists()
    (tmp_path / "pw.txt").write_text("s3cret\n")
    assert main(["decrypt", str(tmp_path / "e.apr"), "--password-file",
                 str(tmp_path / "pw.txt"), "-o", str(tmp_path / "d.apr")]) == 0
    assert (tmp_path / "d.apr").read_bytes() == plain.read_bytes()
    assert main(["encrypt", str(plain), "--recipient", key + ".pub", "-o",
                 str(tmp_path / "r.apr")]) == 0
    assert main(["keygen", "-o", str(tmp_path / "other")]) == 0
    assert main(["decrypt", str(tmp_path / "r.apr"), "--key", str(tmp_path / "other"),
                 "-o", str(tmp_path / "rd.apr")]) == 5
    assert not (tmp_path / "rd.apr").exists()
    assert main(["decrypt", str(tmp_path / "r.apr"), "--key", key, "-o",
                 str(tmp_path / "rd.apr")]) == 0
    assert (tmp_path / "rd.apr").read_bytes() == plain.read_bytes()
    # v1 files go through the same commands
    from apr_core.formats.apr1 import write_apr1
    v1 = tmp_path / "v1.apr"
    write_apr1(v1, b"payload" * 30, "KMEANS", {"name": "v1"}, "zstd-l3")
    for argv in (["sign", str(v1), "--key", key, "-o", str(tmp_path / "v1s.apr")],
                 ["verify", str(tmp_path / "v1s.apr"), "--trusted-key", key + ".pub"],
                 ["encrypt", str(v1), "--recipient", key + ".pub", "-o",
                  str(tmp_path / "v1e.apr")],
                 ["decrypt", str(tmp_path / "v1e.apr"), "--key", key, "-o",
                  str(tmp_path / "v1d.apr")]):
        assert main(argv) == 0, argv
    assert (tmp_path / "v1d.apr").read_bytes() == v1.read_bytes()
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["decrypt", str(tmp_path / "e.apr"), "-o", str(tmp_path / "x.apr")]) == 2
