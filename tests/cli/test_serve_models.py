"""`apr serve --models-dir DIR` finds its models (cli/serve_models.py): model files by
suffix, references from *.ref files; ids are file names and must not collide."""
import os

import pytest

from apr_core.errors import AprError, ErrorCode
from apr_native.cli.serve_cmd import model_id_for
from apr_native.cli.serve_models import model_refs, scan_dir


def test_models_dir_lists_model_files_and_references(tmp_path):
    for name in ("b.gguf", "a.APR", "notes.txt", "c.safetensors"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "more.ref").write_text(
        "# served too\nhf://org/repo/model.Q4_0.gguf  # a comment\n\nnot a reference\n"
        "https://example.org/m.gguf\n", encoding="utf-8")
    found = scan_dir(str(tmp_path))
    assert found == [str(tmp_path / "a.APR"), str(tmp_path / "b.gguf"),
                     "hf://org/repo/model.Q4_0.gguf", "https://example.org/m.gguf"]
    refs = model_refs(["hf://org/repo/model.Q4_0.gguf"], str(tmp_path), model_id_for)
    assert list(refs) == ["hf://org/repo/model.Q4_0.gguf", "a.APR", "b.gguf",
                          "https://example.org/m.gguf"]
    assert refs["b.gguf"] == str(tmp_path / "b.gguf")


def test_two_models_with_one_id_and_none_at_all_are_refused(tmp_path):
    for folder in ("x", "y"):
        os.mkdir(tmp_path / folder)
        (tmp_path / folder / "m.gguf").write_bytes(b"x")
    with pytest.raises(AprError) as err:
        model_refs([str(tmp_path / "x" / "m.gguf"), str(tmp_path / "y" / "m.gguf")], None,
                   model_id_for)
    assert err.value.code is ErrorCode.ARGUMENT and "m.gguf" in str(err.value)
    with pytest.raises(AprError) as err:
        model_refs([], str(tmp_path / "x" / "none"), model_id_for)
    assert err.value.code is ErrorCode.IO
    os.remove(tmp_path / "x" / "m.gguf")
    with pytest.raises(AprError) as err:
        model_refs([], str(tmp_path / "x"), model_id_for)
    assert err.value.code is ErrorCode.ARGUMENT
