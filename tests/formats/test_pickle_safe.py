"""PyTorch checkpoints are read without executing pickle code (seed 000 §10.3, §11 #77).

Real checkpoints (`torch.save` of transformers state_dicts, zip and legacy formats) give
exactly torch's tensors. A corpus of hostile pickles -- os.system, eval, exec,
subprocess, `__reduce__` tricks, nested and indirect globals (getattr, copyreg extension
codes, INST/OBJ/STACK_GLOBAL opcodes), torch zip and legacy files carrying a malicious
data.pkl -- is blocked 100 %: `apr import` refuses each (exit 5, one line) and a witness
file every payload would create never appears. The corpus is first proven hostile: plain
`pickle.loads` in a child process does create each witness.
"""
import copyreg
import io
import os
import pickle
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from apr_core.errors import AprError, ErrorCode
from cli_util import apr
from torch_checkpoints import torch_checkpoints  # noqa: F401  (fixture)

pytestmark = pytest.mark.native

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------- hostile corpus

def _touch(path):
    return "open({!r}, 'w').write('pwned')".format(path)


class _Reduce:
    """An object whose pickle calls `func(*args)` on load."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _proto0(module, name, arg):
    """Protocol-0 GLOBAL + REDUCE by hand: `module.name(arg)`."""
    return "c{}\n{}\n(V{}\ntR.".format(module, name, arg).encode("utf-8")


def _inst(module, name, arg):
    """The INST opcode (`i`): builds `module.name(arg)` without REDUCE."""
    return "(V{}\ni{}\n{}\n.".format(arg, module, name).encode("utf-8")


def _stack_global(module, name, arg):
    """Protocol 4 STACK_GLOBAL + REDUCE."""
    def s(text):
        data = text.encode("utf-8")
        return b"\x8c" + bytes([len(data)]) + data
    return b"\x80\x04" + s(module) + s(name) + b"\x93" + s(arg) + b"\x85R."


def _ext_code(module, name, arg, code=0x7f42):
    """A copyreg extension code: EXT2 resolves to a global without naming it inline."""
    copyreg.add_extension(module, name, code)
    try:
        return b"\x80\x02\x83" + struct.pack("<H", code) + \
            pickle.dumps(arg, protocol=2)[2:-1] + b"\x85R."
    finally:
        copyreg.remove_extension(module, name, code)


def _nested(witness):
    """A state_dict whose tensor is real-looking but whose storage comes from eval."""
    payload = _Reduce(eval, (_touch(witness),))
    return pickle.dumps({"model.embed_tokens.weight": _Reduce(
        __import__("collections").OrderedDict, ([("x", payload)],))}, protocol=2)


def _getattr_import(command):
    """`getattr(__import__("os"), "system")(command)`: the callable is built by calls."""
    return ("cbuiltins\ngetattr\n(cbuiltins\n__import__\n(Vos\ntRVsystem\ntR(V{}\ntR."
            .format(command)).encode("utf-8")


def corpus(folder):
    """{name: (path, witness)}: each file would create `witness` if unpickled normally."""
    items = {}

    def witness(name):
        return str(folder / ("witness_" + name))

    def add(name, data, suffix=".pt"):
        path = folder / (name + suffix)
        path.write_bytes(data)
        items[name] = (str(path), witness(name))

    w = witness
    add("os_system", pickle.dumps(_Reduce(os.system, ("touch " + w("os_system"),)), 2))
    add("posix_system", _proto0("posix", "system", "touch " + w("posix_system")))
    add("eval", pickle.dumps(_Reduce(eval, (_touch(w("eval")),)), 2))
    add("exec", pickle.dumps(_Reduce(exec, (_touch(w("exec")),)), 2))
    add("subprocess", pickle.dumps(_Reduce(subprocess.call, (["touch", w("subprocess")],)), 2))
    add("inst_opcode", _inst("os", "system", "touch " + w("inst_opcode")))
    add("stack_global", _stack_global("builtins", "exec", _touch(w("stack_global"))))
    add("ext_code", _ext_code("builtins", "eval", _touch(w("ext_code"))))
    add("nested_in_state_dict", _nested(w("nested_in_state_dict")))
    add("getattr_import", _getattr_import("touch " + w("getattr_import")))
    add("torch_namespace", _proto0("torch.serialization", "_import_dotted_name",
                                   "os.system"))
    add("getoutput", _proto0("subprocess", "getoutput", "touch " + w("getoutput")))
    # A torch zip archive whose data.pkl is hostile.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("archive/data.pkl",
                         pickle.dumps(_Reduce(os.system, ("touch " + w("torch_zip"),)), 2))
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/version", "3\n")
    add("torch_zip", buf.getvalue())
    # A legacy torch stream: magic, protocol, sys_info, then a hostile main pickle.
    legacy = b"".join(pickle.dumps(x, 2) for x in (
        0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}))
    add("torch_legacy", legacy + pickle.dumps(
        _Reduce(eval, (_touch(w("torch_legacy")),)), 2))
    return items


# The torch_namespace item names a real torch helper that is not in the allow-list; it
# creates no witness (it only resolves a name), so it is checked for refusal only.
NO_WITNESS = {"torch_namespace"}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return corpus(tmp_path_factory.mktemp("hostile"))


def test_corpus_is_really_hostile(hostile, tmp_path):
    """Plain pickle (what torch.load(weights_only=False) uses) runs every payload."""
    script = (
        "import io, pickle, sys, zipfile\n"
        "for path in sys.argv[1:]:\n"
        "    data = open(path, 'rb').read()\n"
        "    if data[:2] == b'PK':\n"
        "        z = zipfile.ZipFile(io.BytesIO(data))\n"
        "        data = z.read([n for n in z.namelist() if n.endswith('data.pkl')][0])\n"
        "    stream = io.BytesIO(data)\n"
        "    try:\n"
        "        while stream.tell() < len(data):\n"
        "            pickle.load(stream)\n"
        "    except Exception:\n"
        "        pass\n")
    paths = [p for name, (p, _) in sorted(hostile.items()) if name not in NO_WITNESS]
    env = dict(os.environ)
    # the ext_code item needs the extension registered in the child, as a victim's
    # process might have it: register it there too
    script = "import copyreg; copyreg.add_extension('builtins', 'eval', 0x7f42)\n" + script
    subprocess.run([sys.executable, "-c", script] + paths, check=True, env=env,
                   capture_output=True, timeout=120)
    for name, (_, witness) in sorted(hostile.items()):
        if name not in NO_WITNESS:
            assert os.path.exists(witness), name
            os.unlink(witness)


def test_every_hostile_pickle_is_refused_and_nothing_runs(hostile, tmp_path):
    from apr_native.pickle_safe import open_torch
    # As in a victim's process, the extension code resolves: the refusal must come from
    # the allow-list, not from an unknown code.
    copyreg.add_extension("builtins", "eval", 0x7f42)
    try:
        _refuse_all(hostile, tmp_path, open_torch)
    finally:
        copyreg.remove_extension("builtins", "eval", 0x7f42)


def _refuse_all(hostile, tmp_path, open_torch):
    for name, (path, witness) in sorted(hostile.items()):
        code, out, err = apr("import", path, "-o", str(tmp_path / (name + ".apr")),
                             "--arch", "llama")
        assert code == 5, (name, code, err)
        assert "refused unsafe pickle" in err and "Traceback" not in err, (name, err)
        assert len(err.strip().splitlines()) == 1, (name, err)
        with pytest.raises(AprError) as exc:
            open_torch(path)
        assert exc.value.code == ErrorCode.VALIDATION, name
        assert not os.path.exists(witness), name
        assert not os.path.exists(str(tmp_path / (name + ".apr"))), name
    # --force never lowers the guard
    path, witness = hostile["eval"]
    code, _, err = apr("import", path, "-o", str(tmp_path / "forced.apr"), "--force")
    assert code == 5 and not os.path.exists(witness)


def test_build_on_a_tensor_is_refused():
    """BUILD (`b`) after a rebuilt tensor would rewrite its checked fields."""
    from apr_native.pickle_safe import safe_loads
    data = (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
            b"ctorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQK\x00"
            b"K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR}b.")
    with pytest.raises(AprError) as exc:
        safe_loads(data)
    assert exc.value.code == ErrorCode.VALIDATION and "BUILD" in str(exc.value)


# ---------------------------------------------------------------- real checkpoints

@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("variant", ["", "_legacy"])
def test_real_checkpoints_match_torch(torch_checkpoints, arch, variant):  # noqa: F811
    from apr_native.pickle_safe import open_torch
    reference = torch_checkpoints[arch + ":sd"]
    with open_torch(torch_checkpoints[arch + variant]) as model:
        assert sorted(model.tensors) == sorted(reference)
        for name, tensor in reference.items():
            raw = model.read_raw(name)
            assert raw.shape == tuple(tensor.shape), name
            want = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            assert raw.data == want, name


def test_dtypes_strides_offsets_and_wrappers(tmp_path):
    """BF16/F16/I64/bool, a transposed view, a slice at a storage offset, two tensors on
    one storage, and a checkpoint wrapping its state_dict."""
    from apr_native.pickle_safe import open_torch
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    sd = {"bf16": torch.randn(3, 5).to(torch.bfloat16), "f16": torch.randn(7).half(),
          "i64": torch.arange(5), "mask": torch.tensor([True, False, True]),
          "t": base.t(), "slice": base[1:3, 2:5], "whole": base,
          "f64": torch.linspace(0, 1, 9, dtype=torch.float64)}
    for fmt in (True, False):
        path = str(tmp_path / "ckpt{}.pt".format(int(fmt)))
        torch.save({"state_dict": sd, "epoch": 3, "note": "x"}, path,
                   _use_new_zipfile_serialization=fmt)
        with open_torch(path) as model:
            assert sorted(model.tensors) == sorted(sd)
            for name, tensor in sd.items():
                raw = model.read_raw(name)
                if name == "f64":
                    want = tensor.float().numpy()
                elif name == "mask":
                    want = tensor.to(torch.uint8).numpy()
                elif name == "bf16":
                    want = tensor.view(torch.int16).numpy()
                else:
                    want = tensor.contiguous().numpy()
                got = np.frombuffer(raw.data, dtype=want.dtype).reshape(raw.shape)
                assert np.array_equal(got, want), (fmt, name)


def test_malformed_checkpoints_fail_cleanly(tmp_path, torch_checkpoints):  # noqa: F811
    """Truncated archives, a storage shorter than declared, a tensor reaching past its
    storage: AprError with a code (exit 4 from the CLI), never a crash."""
    good = open(torch_checkpoints["llama"], "rb").read()
    cases = {"truncated.pt": good[:len(good) // 2], "empty.pt": b"\x80\x02",
             "garbage.pt": b"\x80" + b"\xff" * 64}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("a/data.pkl", pickle.dumps({}, 2)[:-1] + b"")  # no STOP
    cases["nostop.pt"] = buf.getvalue()
    # a tensor of 4 elements on a storage of 2
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("a/data.pkl", (
            b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00"
            b"\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQ"
            b"K\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRs."))
        archive.writestr("a/data/0", b"\x00" * 8)
    cases["overrun.pt"] = buf.getvalue()
    # a broadcast view: 2**40 elements (stride 0) over a 1-element storage
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("a/data.pkl", (
            b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00"
            b"\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQ"
            b"K\x00\x8a\x06\x00\x00\x00\x00\x00\x01\x85K\x00\x85\x89ccollections\nOrderedDict\n)RtRs."))
        archive.writestr("a/data/0", b"\x00" * 4)
    cases["broadcast.pt"] = buf.getvalue()
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        code, _, err = apr("import", str(path), "-o", str(tmp_path / (name + ".apr")),
                           "--force")
        assert code == 4, (name, code, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, (name, err)
