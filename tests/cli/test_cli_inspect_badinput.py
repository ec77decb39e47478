"""Every inspection/validation command on a missing, empty, non-model, truncated or
corrupted file: the seed 000 appendix A exit code and a one-line message naming the
problem (no traceback).

Header-only commands (inspect, tensors, tree, explain, debug, hex --tensor) never read the
whole file, so a flipped payload bit is invisible to them by design (exit 0, `inspect`
stays O(header) on 50 GB); every command that decodes all tensors verifies the CRC first
and exits 5 (E004). The byte dumpers (`debug --hex`, `hex` without --tensor) dump any
file, model or not: that is what they are for.
"""
import json

import pytest

from apr_core.conversion.convert import convert
from cli_util import apr
from synthetic_models import write_gguf_model

pytestmark = pytest.mark.native

T = "blk.0.attn_q.weight"
# (command args after the file, reads every tensor)
COMMANDS = [
    (("inspect",), False), (("inspect", "--header", "--json"), False),
    (("inspect", "--vocab", "--full"), False), (("tensors",), False),
    (("tensors", "--stats"), True), (("tensors", "--hist", T), True), (("tree",), False),
    (("tree", "--format", "mermaid"), False), (("debug",), False), (("debug", "--drama"), True),
    (("debug", "--strings"), False), (("hex", "--tensor", T), False),
    (("validate",), True), (("validate", "--quality", "--json"), True),
    (("validate", "--nan-check", "--shapes"), True), (("lint",), True), (("explain",), False),
    (("explain", "--tensor", T), False), (("diff", "GOOD"), True), (("diff", "GOOD", "--json"),
                                                                   True),
]
DUMPERS = [("debug", "--hex"), ("hex",), ("hex", "--offset", "8", "--limit", "8")]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    good_gguf = str(folder / "good.gguf")
    write_gguf_model(good_gguf, quant="Q8_0")
    good = str(folder / "good.apr")
    convert(good_gguf, good)
    data = open(good, "rb").read()
    gguf = open(good_gguf, "rb").read()

    def put(name, blob):
        path = folder / name
        path.write_bytes(blob)
        return str(path)
    corrupt = bytearray(data)
    corrupt[len(data) - 200] ^= 0x10                        # a payload bit
    header = bytearray(data)
    header[33] = ord("[")                                   # metadata JSON: '{' -> '['
    return {
        "good": good,
        "missing": str(folder / "nope.apr"),
        "empty": put("empty.apr", b""),
        "text": put("notes.txt", b"these are my notes, not a model\n" * 10),
        "html": put("model.gguf", b"<!DOCTYPE html><html>404 Not Found</html>"),
        "truncated_apr": put("cut.apr", data[:len(data) // 2]),
        "truncated_gguf": put("cut.gguf", gguf[:len(gguf) // 2]),
        "corrupt_header": put("header.apr", bytes(header)),
        "corrupt_payload": put("payload.apr", bytes(corrupt)),
    }


# bad file -> (exit code, error code) for every command
EXPECTED = {
    "missing": (3, "E007"), "empty": (4, "E001"), "text": (4, "E001"), "html": (4, "E001"),
    "truncated_apr": (4, "E002"), "truncated_gguf": (4, "E002"),
    "corrupt_header": (4, "E001"),
}


def run(files, kind, args):
    rest = [files["good"] if a == "GOOD" else a for a in args[1:]]
    return apr(args[0], files[kind], *rest)


def one_line_error(err, code_name):
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("apr: error: {} ".format(code_name)), err


@pytest.mark.parametrize("kind", sorted(EXPECTED))
@pytest.mark.parametrize("args,_", COMMANDS, ids=[" ".join(c) for c, _ in COMMANDS])
def test_bad_file(files, kind, args, _):
    exit_code, code_name = EXPECTED[kind]
    code, out, err = run(files, kind, args)
    assert code == exit_code, (kind, args, out, err)
    one_line_error(err, code_name)


@pytest.mark.parametrize("args,reads_all", COMMANDS, ids=[" ".join(c) for c, _ in COMMANDS])
def test_flipped_payload_bit(files, args, reads_all):
    code, out, err = run(files, "corrupt_payload", args)
    if reads_all:
        assert code == 5, (args, out, err)
        one_line_error(err, "E004")
    else:
        assert code == 0 and err == "", (args, err)


@pytest.mark.parametrize("args,_", COMMANDS, ids=[" ".join(c) for c, _ in COMMANDS])
def test_good_file(files, args, _):
    code, out, err = run(files, "good", args)
    assert code == 0 and err == "", (args, err)


def test_diff_with_the_bad_file_second(files):
    code, _, err = apr("diff", files["good"], files["truncated_apr"])
    assert code == 4
    one_line_error(err, "E002")


@pytest.mark.parametrize("args", DUMPERS)
def test_byte_dumpers_dump_anything_but_need_a_file(files, args):
    code, out, err = apr(args[0], files["text"], *args[1:], "--json")
    offset = int(args[2]) if len(args) > 2 else 0
    limit = int(args[4]) if len(args) > 4 else 256
    raw = open(files["text"], "rb").read()
    assert code == 0 and bytes.fromhex(json.loads(out)["hex"]) == raw[offset:offset + limit]
    code, _, err = apr(args[0], files["missing"], *args[1:])
    assert code == 3
    one_line_error(err, "E007")


def test_traceback_only_with_debug_log_level(files):
    code, _, err = apr("validate", files["truncated_apr"], env={"APR_LOG_LEVEL": "debug"})
    assert code == 4 and "Traceback" in err
