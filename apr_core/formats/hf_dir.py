"""The side files of a Hugging Face model directory, carried in APR metadata.

Weights in a HF directory are SafeTensors; what makes them a *model* lives beside them:
`config.json` (hyperparameters), `tokenizer.json` and `tokenizer_config.json` (vocabulary,
special tokens, chat template), `generation_config.json`. A conversion from such a
directory keeps them under `HF_FILES`' keys, so an APR file is self-contained and a GGUF
export can write llama.cpp's hyperparameter and tokenizer keys from them.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from ..json_files import read_json_file

# APR metadata key -> file name in the directory.
HF_FILES = (("hf_config", "config.json"), ("hf_tokenizer", "tokenizer.json"),
            ("hf_tokenizer_config", "tokenizer_config.json"),
            ("hf_generation_config", "generation_config.json"))


def hf_directory(target: Any) -> Optional[str]:
    """The HF model directory `target` names (the directory, or a weights file inside one
    that has a config.json), else None."""
    if not isinstance(target, (str, os.PathLike)):
        return None
    path = os.fspath(target)
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    return directory if os.path.isfile(os.path.join(directory, "config.json")) else None


def read_side_files(directory: str) -> Dict[str, Any]:
    """{metadata key: parsed JSON} for each side file present in `directory`."""
    out: Dict[str, Any] = {}
    for key, name in HF_FILES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            out[key] = read_json_file(path, name)
    return out


__all__ = ["HF_FILES", "hf_directory", "read_side_files"]
